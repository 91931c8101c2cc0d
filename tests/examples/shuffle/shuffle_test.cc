// flowtune-shuffle: the request parser (with random input), headers, CRC32C
// and the index format; then the io_uring server against the fetch client
// on loopback: every block arrives with its checksum on every data path,
// registered buffers and zero-copy send fall back when refused, bad
// requests get an error and the server keeps serving, with and without an
// allocator; neither side lets a silent or stalled peer hold it.
#include <arpa/inet.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <chrono>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "protocol.h"
#include "service.h"

namespace flowtune::shuffle {
namespace {

TEST(ShuffleProtocol, ParsesAFetchAndRefusesEverythingElse) {
  const auto ok = parse_fetch("FETCH 3 17 5 123456789012");
  ASSERT_TRUE(std::holds_alternative<Fetch>(ok));
  EXPECT_EQ(std::get<Fetch>(ok), (Fetch{3, 17, 5, 123456789012ull}));
  EXPECT_TRUE(std::holds_alternative<Fetch>(parse_fetch("FETCH 0 0 0 0\r")));
  for (const char* bad : {"", "FETCH", "FETCH 1 2 3", "FETCH 1 2 3 4 5", "GET 1 2 3 4", "FETCH  1 2 3 4",
                          "FETCH 1 2 3 4 ", "FETCH -1 2 3 4", "FETCH 1 2 x 4", "FETCH 4294967296 0 0 0",
                          "FETCH 1 2 3 18446744073709551616"}) {
    EXPECT_TRUE(std::holds_alternative<std::string>(parse_fetch(bad))) << bad;
  }
  EXPECT_EQ(std::get<std::string>(parse_fetch(std::string(200, 'F'))), "request longer than 128 bytes");
  EXPECT_STREQ(kRequestTooLong, "request longer than 128 bytes");
  EXPECT_EQ(format_fetch({1, 2, 3, 4}), "FETCH 1 2 3 4\n");
}

TEST(ShuffleProtocol, RandomLinesNeverCrashTheParserAndWhatItAcceptsRoundTrips) {
  std::mt19937 rng(3);
  const std::string alphabet = "FETCH 0123456789 \r\t-x";
  for (int i = 0; i < 20000; ++i) {
    std::string line;
    const int n = static_cast<int>(rng() % 150);
    for (int k = 0; k < n; ++k) {
      line += i % 2 ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()];
    }
    if (i % 7 == 0) line = "FETCH " + line;
    const auto r = parse_fetch(line);
    if (const auto* f = std::get_if<Fetch>(&r)) {
      const std::string again = format_fetch(*f);
      EXPECT_EQ(std::get<Fetch>(parse_fetch(again.substr(0, again.size() - 1))), *f);
    } else {
      EXPECT_FALSE(std::get<std::string>(r).empty());
    }
  }
}

TEST(ShuffleProtocol, RequestLinesAreFramedAcrossReadsAndAnOverlongPartialLineEndsTheStream) {
  std::vector<std::string> lines;
  const auto take = [&](std::string& in) {
    return take_request_lines(in, [&](std::string_view l) { lines.emplace_back(l); });
  };
  // Given a line and a half, then the rest of the second line.
  std::string in = "FETCH 1 2 3 4\nFETCH 5";
  EXPECT_FALSE(take(in));
  EXPECT_EQ(lines, std::vector<std::string>{"FETCH 1 2 3 4"});
  EXPECT_EQ(in, "FETCH 5");
  in += " 6 7 8\r\n\n";
  EXPECT_FALSE(take(in));
  // Expect: the line whole (its '\r' is the parser's to drop), then an empty line.
  EXPECT_EQ(lines, (std::vector<std::string>{"FETCH 1 2 3 4", "FETCH 5 6 7 8\r", ""}));
  EXPECT_TRUE(in.empty());
  // A complete over-long line is a line (the parser refuses it); the stream goes on.
  in = std::string(200, 'F') + "\n";
  EXPECT_FALSE(take(in));
  EXPECT_EQ(lines.back().size(), 200u);
  EXPECT_EQ(std::get<std::string>(parse_fetch(lines.back())), kRequestTooLong);
  // 128 bytes with no '\n' may still become a request; 129 cannot.
  in = std::string(kMaxRequestLine, 'F');
  EXPECT_FALSE(take(in));
  EXPECT_EQ(in.size(), kMaxRequestLine);
  in += "F";
  const std::size_t before = lines.size();
  EXPECT_TRUE(take(in));
  EXPECT_TRUE(in.empty());
  EXPECT_EQ(lines.size(), before);
}

TEST(ShuffleProtocol, HeadersChecksumsAndIndexesRoundTripAndBadOnesAreRefused) {
  std::uint8_t raw[kHeaderBytes];
  encode_header({Status::kNotFound, 1234567890123ull, 0xdeadbeef}, raw);
  const auto h = decode_header(raw);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->status, Status::kNotFound);
  EXPECT_EQ(h->length, 1234567890123ull);
  EXPECT_EQ(h->crc, 0xdeadbeefu);
  raw[0] ^= 1;
  EXPECT_FALSE(decode_header(raw).has_value());
  // The standard CRC32C check value, and incremental equals one-shot.
  EXPECT_EQ(crc32c(0, "123456789", 9), 0xE3069283u);
  const std::string text(1000, 'q');
  EXPECT_EQ(crc32c(crc32c(0, text.data(), 333), text.data() + 333, 667), crc32c(0, text.data(), 1000));

  MapIndex ix{{0, 10, 10, 25}, {1, 2, 3}};
  const auto back = decode_index(encode_index(ix));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->offsets, ix.offsets);
  EXPECT_EQ(back->crcs, ix.crcs);
  EXPECT_FALSE(decode_index("nonsense").ok());
  std::string cut = encode_index(ix);
  cut.pop_back();
  const auto short_index = decode_index(cut);
  ASSERT_FALSE(short_index.ok());
  EXPECT_EQ(short_index.error().cause, ErrorCause::kInvalid);
  EXPECT_EQ(short_index.error().message, "index size does not match its partitions");
  MapIndex down{{0, 10, 5, 25}, {1, 2, 3}};
  EXPECT_FALSE(decode_index(encode_index(down)).ok());
}

// A served directory and a server thread on loopback.
class ShuffleService : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "shuffle_test_" + std::to_string(::getpid());
    generate(dir_, 7, 3, 4, 0, 300'000, 11);  // blocks of 0 to 300 kB
  }
  void TearDown() override {
    stop();
    std::filesystem::remove_all(dir_);
  }
  static ServerConfig config(bool flowtune, DataPath path) {
    ServerConfig c;
    c.data_path = path;
    c.bind = "127.0.0.1";
    c.flowtune = flowtune;
    c.chunk_bytes = 64 * 1024;  // several reads per block
    return c;
  }
  void start(bool flowtune, DataPath path = DataPath::kRead,
             std::uint32_t idle_timeout_ms = kDefaultIdleTimeoutMs) {
    ServerConfig c = config(flowtune, path);
    c.dir = dir_;
    c.idle_timeout_ms = idle_timeout_ms;
    server_ = std::make_unique<Server>(c);
    ran_out_ = false;
    thread_ = std::thread([this] {
      server_->run();
      ran_out_ = true;
    });
  }
  // Stops the loop; the server's counters stay readable until stop().
  void halt() {
    if (!thread_.joinable()) return;
    server_->stop();
    thread_.join();
  }
  void stop() {
    halt();
    server_.reset();
  }
  std::uint64_t block_bytes(std::uint32_t map, std::uint32_t partition) {
    std::ifstream in(index_path(dir_, 7, map), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    const auto ix = decode_index(bytes);
    return ix->offsets[partition + 1] - ix->offsets[partition];
  }
  std::uint64_t partition_bytes(std::uint32_t partition) {
    std::uint64_t n = 0;
    for (std::uint32_t m = 0; m < 3; ++m) n += block_bytes(m, partition);
    return n;
  }
  std::string dir_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
  std::atomic<bool> ran_out_{false};  // run() returned
};

constexpr DataPath kPaths[] = {DataPath::kRead, DataPath::kReadZc, DataPath::kSplice,
                               DataPath::kSendfile};

bool buffered(DataPath p) { return p == DataPath::kRead || p == DataPath::kReadZc; }

// A socket connected to 127.0.0.1:port.
int dial(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// A listener on 127.0.0.1 that never accepts: the kernel completes
// connections into its backlog, and nothing is ever answered.
struct MuteServer {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  std::uint16_t port = 0;
  MuteServer() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd, 8), 0);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~MuteServer() { ::close(fd); }
};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST_F(ShuffleService, EveryBlockOfAPartitionArrivesWithItsChecksum) {
 for (DataPath path : kPaths) {
  SCOPED_TRACE(to_string(path));
  start(false, path);
  for (std::uint32_t p = 0; p < 4; ++p) {
    // Two sources (the same server, maps split between them), as a reducer
    // fetches from several servers at once.
    const auto r = fetch_partition({{"127.0.0.1", server_->port(), 0, 1}, {"127.0.0.1", server_->port(), 2, 2}},
                                   7, p, 42);
    ASSERT_EQ(r.blocks.size(), 3u);
    for (const auto& b : r.blocks) EXPECT_EQ(b.error, "") << "map " << b.map;
    EXPECT_EQ(r.failed, 0u);
    EXPECT_EQ(r.bytes, partition_bytes(p));
  }
  // Empty blocks: a header and nothing else.
  generate(dir_, 8, 2, 3, 0, 0, 1);
  const auto empty = fetch_partition({{"127.0.0.1", server_->port(), 0, 1}}, 8, 2, 0);
  EXPECT_EQ(empty.failed, 0u);
  EXPECT_EQ(empty.bytes, 0u);
  EXPECT_EQ(empty.blocks.size(), 2u);
  halt();  // the last block is counted once its last send completes
  const ServerStats& st = server_->stats();
  EXPECT_EQ(st.blocks.load(), 14u);
  // Each connection's buffer was registered or refused, nothing else.
  EXPECT_EQ(st.connections.load(), 9u);
  EXPECT_EQ(st.buffers_registered + st.buffers_refused, buffered(path) ? 9u : 0u);
  // Zero-copy sends moved the bytes unless the kernel refused them.
  if (path == DataPath::kReadZc && server_->zero_copy()) {
    EXPECT_GT(st.zc_sends.load(), 0u);
  } else {
    EXPECT_EQ(st.zc_sends.load(), 0u);
  }
  stop();
 }
}

// Drops CAP_IPC_LOCK from this process: registered buffers and zero-copy
// pages then count against RLIMIT_MEMLOCK. False when it could not.
bool drop_ipc_lock() {
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[2]{};
  if (::syscall(SYS_capget, &h, d) != 0) return false;
  d[CAP_IPC_LOCK / 32].effective &= ~(1U << (CAP_IPC_LOCK % 32));
  return ::syscall(SYS_capset, &h, d) == 0;
}

TEST_F(ShuffleService, RefusedRegisteredBuffersAndZeroCopyFallBackWithOneWarningAndNothingLost) {
  for (DataPath path : {DataPath::kRead, DataPath::kReadZc}) {
    SCOPED_TRACE(to_string(path));
    // In a child, so that the capability and the limit stay there; its
    // stderr comes back through a pipe.
    int err[2];
    ASSERT_EQ(::pipe(err), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::dup2(err[1], 2);
      ::close(err[0]);
      if (!drop_ipc_lock()) ::_exit(10);
      ServerConfig c = config(false, path);
      c.dir = dir_;
      std::unique_ptr<Server> server;
      try {
        server = std::make_unique<Server>(c);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        ::_exit(11);
      }
      // Once the ring exists, nothing more may be locked: every
      // registration is refused, as under a small `ulimit -l`.
      const rlimit none{0, 0};
      if (::setrlimit(RLIMIT_MEMLOCK, &none) != 0) ::_exit(12);
      std::thread t([&] { server->run(); });
      int code = 0;
      for (std::uint32_t p = 0; p < 4 && code == 0; ++p) {
        const auto r = fetch_partition({{"127.0.0.1", server->port(), 0, 2}}, 7, p, 0);
        if (r.failed != 0 || r.bytes != partition_bytes(p)) code = 13;
      }
      server->stop();
      t.join();
      const ServerStats& st = server->stats();
      if (st.buffers_registered != 0 || st.buffers_refused != 4) code = 14;
      if (path == DataPath::kReadZc && st.zc_sends != 0) code = 15;  // every one refused
      std::fflush(stderr);
      ::_exit(code);
    }
    ::close(err[1]);
    std::string text;
    char b[512];
    ssize_t n;
    while ((n = ::read(err[0], b, sizeof b)) > 0) text.append(b, static_cast<std::size_t>(n));
    ::close(err[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << text;
    // One line per refusal kind for the server's life, not one per connection.
    const std::string buffers =
        "flowtune-shuffle: warning: registered buffers refused (Cannot allocate memory, "
        "RLIMIT_MEMLOCK: ulimit -l): plain reads where refused\n";
    const std::string zc =
        "flowtune-shuffle: warning: zero-copy send refused (Cannot allocate memory, "
        "RLIMIT_MEMLOCK: ulimit -l): plain sends where refused\n";
    EXPECT_EQ(text, path == DataPath::kRead ? buffers : buffers + zc);
  }
}

TEST_F(ShuffleService, SilentAndStalledConnectionsCloseAfterTheIdleTimeoutAndOthersAreServed) {
  // One 24 MB block: more than loopback's socket buffers hold, so a reader
  // that stops leaves the server with bytes it cannot send.
  constexpr std::uint64_t kBig = 24'000'000;
  generate(dir_, 20, 1, 1, kBig, kBig, 3);
  constexpr std::uint32_t kIdleMs = 150;
  for (DataPath path : kPaths) {
    SCOPED_TRACE(to_string(path));
    start(false, path, kIdleMs);
    const auto t0 = std::chrono::steady_clock::now();
    const int silent = dial(server_->port());   // says nothing
    const int stalled = dial(server_->port());  // asks, then reads nothing
    const std::string ask = format_fetch({20, 0, 0, 0});
    ASSERT_TRUE(send_all(stalled, ask.data(), ask.size()));
    // Others are served meanwhile.
    EXPECT_EQ(fetch_partition({{"127.0.0.1", server_->port(), 0, 2}}, 7, 1, 0).failed, 0u);
    // The silent one sees its end after the timeout, not before, and within
    // the sweep's lateness (a quarter of the timeout) plus slack.
    pollfd pf{silent, POLLIN, 0};
    ASSERT_EQ(::poll(&pf, 1, 2000), 1);
    const double closed_s = since(t0);
    char c;
    EXPECT_EQ(::recv(silent, &c, 1, 0), 0);
    EXPECT_GE(closed_s, kIdleMs / 1000.0);
    EXPECT_LT(closed_s, 1.0);
    // The stalled one is closed too (the counter says when), and what it
    // then reads ends short of the block.
    for (int i = 0; i < 200 && server_->stats().idle_closed < 2; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(server_->stats().idle_closed.load(), 2u);
    EXPECT_EQ(server_->stats().aborted.load(), 1u);
    EXPECT_EQ(fetch_partition({{"127.0.0.1", server_->port(), 0, 2}}, 7, 2, 0).failed, 0u);
    // Nothing is left waiting on the stalled peer, which still reads
    // nothing: the server stops at once (read-zc's pages held for it are
    // let go by a reset).
    server_->stop();
    for (int i = 0; i < 100 && !ran_out_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(ran_out_) << "the server waits on a stalled peer";
    const timeval bound{2, 0};  // a server that never closes fails the test, not hangs it
    ::setsockopt(stalled, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
    std::vector<char> buf(1 << 20);
    std::uint64_t got = 0;
    ssize_t n;
    while ((n = ::recv(stalled, buf.data(), buf.size(), 0)) > 0) {
      got += static_cast<std::uint64_t>(n);
    }
    EXPECT_LT(got, kHeaderBytes + kBig);
    ::close(silent);
    ::close(stalled);
    stop();
  }
}

TEST_F(ShuffleService, ManyBlocksPerSourcePassThroughTheServersRequestQueue) {
  // 2,000 requests on one connection against a server that queues 16: it
  // stops reading requests while its queue is full and reads on as answers
  // go out. (The client keeps at most 64 requests outstanding, so it never
  // blocks writing requests while the server waits for it to read.)
  generate(dir_, 9, 2000, 1, 20'000, 20'000, 2);
  ServerConfig c;
  c.dir = dir_;
  c.bind = "127.0.0.1";
  c.flowtune = false;
  c.max_pipelined = 16;
  server_ = std::make_unique<Server>(c);
  thread_ = std::thread([this] { server_->run(); });
  const auto r = fetch_partition({{"127.0.0.1", server_->port(), 0, 1999}}, 9, 0, 0);
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(r.bytes, 2000u * 20'000u);
}

TEST_F(ShuffleService, BadRequestsGetAnErrorAndTheServerKeepsServing) {
 for (DataPath path : kPaths) {
  SCOPED_TRACE(to_string(path));
  start(false, path);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(server_->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req = "HELLO\nFETCH 7 0 99 0\nFETCH 7 9 0 0\nFETCH 7 1 2 5\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  const auto answer = [&](Status want) {
    // recv_all loops: MSG_WAITALL may still return short (seen under load
    // with a 200 KB block).
    std::uint8_t raw[kHeaderBytes];
    ASSERT_TRUE(recv_all(fd, raw, sizeof raw));
    const auto h = decode_header(raw);
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->status, want);
    std::string body(h->length, '\0');
    if (h->length > 0) {
      ASSERT_TRUE(recv_all(fd, body.data(), body.size()));
    }
    EXPECT_EQ(crc32c(0, body.data(), body.size()), h->crc);
    if (want != Status::kOk) {
      EXPECT_FALSE(body.empty());
    }
  };
  answer(Status::kBadRequest);
  answer(Status::kNotFound);  // partition 99
  answer(Status::kNotFound);  // map 9
  answer(Status::kOk);
  // A line that never ends: an error, then the connection closes.
  const std::string endless(300, 'x');
  ASSERT_EQ(::send(fd, endless.data(), endless.size(), 0), 300);
  answer(Status::kBadRequest);
  char c;
  EXPECT_EQ(::recv(fd, &c, 1, 0), 0);
  ::close(fd);
  const auto r = fetch_partition({{"127.0.0.1", server_->port(), 0, 2}}, 7, 1, 0);
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(server_->stats().bad_requests.load(), 2u);
  EXPECT_EQ(server_->stats().not_found.load(), 2u);
  stop();
 }
}

TEST_F(ShuffleService, WithoutAnAllocatorBlocksArriveAllTheSame) {
  // libflowtune is on but its allocator does not exist: blocks go unpaced.
  ::setenv("FLOWTUNE_ALLOCATOR", "tcp://127.0.0.1:9", 1);
  ::setenv("FLOWTUNE_LOG", "0", 1);
  start(true);
  EXPECT_TRUE(server_->flowtune_active());
  const auto r = fetch_partition({{"127.0.0.1", server_->port(), 0, 2}}, 7, 3, 99);
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(r.bytes, partition_bytes(3));
  // Every block was declared (as a flowlet, or as a mouse below 64 KB).
  ft_stats st{};
  std::uint64_t declared = 0;
  for (int i = 0; i < 200 && declared < 3; ++i) {
    ASSERT_TRUE(server_->flowtune_stats(&st));
    declared = st.flowlets_started + st.flowlets_coalesced + st.mice;
    if (declared < 3) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(declared, 3u);
  ::unsetenv("FLOWTUNE_ALLOCATOR");
  ::unsetenv("FLOWTUNE_LOG");
}

TEST_F(ShuffleService, APlanRunsEachFetchAtItsTimeAndSizedBlocksHaveTheirSizes) {
  // A stage with known reducer shares: every map's block p is sizes[p] bytes.
  const std::vector<std::uint64_t> sizes = {70'000, 0, 1, 250'000};
  generate(dir_, 12, 2, sizes, 5);
  start(false);
  const std::string src = "127.0.0.1:" + std::to_string(server_->port());
  const auto plan = parse_plan("# reducer plan\n150 12 3 77 " + src + ":0-0 " + src + ":1-1\n\n" +
                               "0 12 0 76 " + src + ":0-1  # first\n0 12 1 76 " + src + ":0-1\n");
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_EQ(plan->size(), 3u);
  const auto t0 = std::chrono::system_clock::now();
  std::mutex mu;
  std::vector<std::size_t> heard;
  const auto out = run_plan(*plan, t0, [&](std::size_t i, const PlannedOutcome& o) {
    const std::lock_guard lock(mu);
    heard.push_back(i);
    EXPECT_GT(o.finish_s, 0);
  });
  ASSERT_EQ(out.size(), 3u);
  // Each fetch is told once, as it ends: the late one last.
  ASSERT_EQ(heard.size(), 3u);
  EXPECT_EQ(heard.back(), 0u);
  EXPECT_EQ(std::set<std::size_t>(heard.begin(), heard.end()).size(), 3u);
  // Outcomes in plan order; each fetch starts no earlier than planned, and
  // the early ones do not wait for the late one.
  EXPECT_GE(out[0].start_s, 0.150);
  EXPECT_LT(out[1].start_s, 0.100);
  EXPECT_LT(out[2].start_s, 0.100);
  EXPECT_EQ(out[0].result.bytes, 2 * sizes[3]);
  EXPECT_EQ(out[1].result.bytes, 2 * sizes[0]);
  EXPECT_EQ(out[2].result.bytes, 0u);
  for (const auto& o : out) {
    EXPECT_EQ(o.result.failed, 0u);
    EXPECT_GE(o.finish_s, o.start_s);
  }
  for (std::uint32_t m = 0; m < 2; ++m) {
    std::ifstream in(index_path(dir_, 12, m), std::ios::binary);
    const auto ix = decode_index(std::string((std::istreambuf_iterator<char>(in)), {}));
    ASSERT_TRUE(ix.ok());
    ASSERT_EQ(ix->partitions(), sizes.size());
    for (std::size_t p = 0; p < sizes.size(); ++p) EXPECT_EQ(ix->offsets[p + 1] - ix->offsets[p], sizes[p]);
  }
}

TEST(ShufflePlan, BadLinesAreRefusedWithTheirNumberAndSourcesParse) {
  const auto s = parse_source("host-1.example:7100:3-9");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->host, "host-1.example");
  EXPECT_EQ(s->port, 7100);
  EXPECT_EQ(s->first_map, 3u);
  EXPECT_EQ(s->last_map, 9u);
  EXPECT_EQ(parse_source("[::1]:80:0-0")->host, "::1");
  EXPECT_EQ(parse_source("h:1:0-4294967294")->last_map, 4294967294u);
  for (const char* bad : {"", "h", "h:1", ":1:0-0", "h:0:0-0", "h:65536:0-0", "h:1:2-1", "h:1:0",
                          "h:x:0-0", "h:1:-1-2", "h:1:0-4294967296", "h:1:0-4294967295"}) {
    EXPECT_FALSE(parse_source(bad).has_value()) << bad;
  }
  EXPECT_EQ(parse_plan("")->size(), 0u);
  EXPECT_EQ(parse_plan("  # nothing\n\n")->size(), 0u);
  const auto ok = parse_plan("12.5\t1 2 3 a:1:0-0 b:2:1-1\r\n");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_DOUBLE_EQ((*ok)[0].start_ms, 12.5);
  EXPECT_EQ((*ok)[0].coflow, 3u);
  EXPECT_EQ((*ok)[0].sources.size(), 2u);
  const std::pair<const char*, const char*> cases[] = {
      {"0 1 2 3\n", "line 1: expected START_MS SHUFFLE PARTITION COFLOW SOURCE..."},
      {"# ok\n-1 1 2 3 a:1:0-0\n", "line 2: START_MS must be a number of milliseconds in [0, 1e9]"},
      {"nan 1 2 3 a:1:0-0\n", "line 1: START_MS must be a number of milliseconds in [0, 1e9]"},
      {"0 1 x 3 a:1:0-0\n", "line 1: bad PARTITION 'x'"},
      {"0 1 2 3 a:1:0-0\n\n0 1 2 3 a:1\n", "line 3: bad SOURCE 'a:1' (HOST:PORT:FIRST-LAST)"},
  };
  for (const auto& [text, want] : cases) {
    const auto plan = parse_plan(text);
    ASSERT_FALSE(plan.ok()) << text;
    EXPECT_EQ(plan.error().cause, ErrorCause::kInvalid);
    EXPECT_EQ(plan.error().message, want);
  }
}

TEST(ShuffleFetch, ASourceThatAcceptsAndNeverAnswersFailsItsBlocksAfterTheReadTimeout) {
  MuteServer mute;
  const auto t0 = std::chrono::steady_clock::now();
  auto pending = std::async(std::launch::async, [&] {
    return fetch_partition({{"127.0.0.1", mute.port, 0, 2}}, 0, 0, 0, 200);
  });
  if (pending.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
    ADD_FAILURE() << "the fetch waits on a mute server";
    ::shutdown(mute.fd, SHUT_RDWR);  // resets its backlog: the fetch ends
  }
  const auto r = pending.get();
  const double took_s = since(t0);
  EXPECT_GE(took_s, 0.2);
  EXPECT_LT(took_s, 1.0);
  ASSERT_EQ(r.blocks.size(), 3u);
  EXPECT_EQ(r.failed, 3u);
  const std::string want = "read timeout: nothing from 127.0.0.1:" + std::to_string(mute.port) +
                           " for 0.2 s (before the block's header)";
  for (const auto& b : r.blocks) EXPECT_EQ(b.error, want);
}

TEST(ShuffleFetch, ASourceThatStallsMidBlockFailsWhatIsOutstandingAfterTheReadTimeout) {
  // A server that answers one block whole, then half of the next, then
  // nothing: the first arrives, the rest fail.
  MuteServer mute;
  std::thread peer([&] {
    const int fd = ::accept(mute.fd, nullptr, nullptr);
    const timeval bound{3, 0};  // a client that never gives up fails the test, not hangs it
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
    const std::string body = "0123456789";
    std::uint8_t h[kHeaderBytes];
    encode_header({Status::kOk, body.size(), crc32c(0, body.data(), body.size())}, h);
    send_all(fd, h, sizeof h);
    send_all(fd, body.data(), body.size());
    encode_header({Status::kOk, 1000, 0}, h);
    send_all(fd, h, sizeof h);
    send_all(fd, body.data(), body.size());
    char b[256];
    while (::recv(fd, b, sizeof b, 0) > 0) {
    }  // the requests, until the client gives up
    ::close(fd);
  });
  const auto r = fetch_partition({{"127.0.0.1", mute.port, 0, 2}}, 0, 0, 0, 200);
  peer.join();
  ASSERT_EQ(r.blocks.size(), 3u);
  EXPECT_EQ(r.blocks[0].error, "");
  EXPECT_EQ(r.blocks[0].bytes, 10u);
  const std::string src = "127.0.0.1:" + std::to_string(mute.port);
  EXPECT_EQ(r.blocks[1].error, "read timeout: nothing from " + src + " for 0.2 s (mid-block)");
  EXPECT_EQ(r.blocks[2].error, r.blocks[1].error);
}

// The binary: a fetch that times out exits 1 and names the source; bad
// timeouts are refused with exit 2, as other bad flags are.
struct Cli {
  int status = -1;
  std::string out;
};
Cli shuffle_cli(const std::string& args) {
  Cli r;
  // timeout(1): a binary that never gives up exits 124 and fails the test.
  const std::string cmd = std::string("timeout 5 '") + FT_SHUFFLE_BINARY + "' " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  char b[4096];
  while (std::size_t n = std::fread(b, 1, sizeof b, p)) r.out.append(b, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

TEST(ShuffleCli, AFetchThatTimesOutExitsOneAndBadTimeoutsAreRefused) {
  MuteServer mute;
  const std::string src = "127.0.0.1:" + std::to_string(mute.port);
  const Cli r = shuffle_cli("fetch --source " + src + ":0-1 --partition 0 --read-timeout-s 0.1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("read timeout: nothing from " + src + " for 0.1 s"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"failed\":2"), std::string::npos) << r.out;
  for (const char* bad : {"0", "-1", "abc", "nan", "1e9", ""}) {
    const std::string quoted = std::string(" '") + bad + "'";
    const Cli f = shuffle_cli("fetch --source " + src + ":0-1 --partition 0 --read-timeout-s" + quoted);
    EXPECT_EQ(f.status, 2) << bad << ": " << f.out;
    EXPECT_NE(f.out.find("--read-timeout-s expects a number"), std::string::npos) << f.out;
    const Cli s = shuffle_cli("serve --dir /nonexistent --idle-timeout-s" + quoted);
    EXPECT_EQ(s.status, 2) << bad << ": " << s.out;
    EXPECT_NE(s.out.find("--idle-timeout-s expects a number"), std::string::npos) << s.out;
  }
  const Cli p = shuffle_cli("serve --dir /nonexistent --data-path zero");
  EXPECT_EQ(p.status, 2);
  EXPECT_NE(p.out.find("expects splice, read, read-zc or sendfile"), std::string::npos) << p.out;
}

TEST(ShuffleFetch, AnUnreachableSourceFailsEachOfItsBlocksWithAReason) {
  // Port 9 (discard) on loopback: nothing listens in the test environment.
  const auto r = fetch_partition({{"127.0.0.1", 9, 0, 3}}, 0, 0, 0);
  ASSERT_EQ(r.blocks.size(), 4u);
  EXPECT_EQ(r.failed, 4u);
  EXPECT_NE(r.blocks[0].error.find("cannot connect"), std::string::npos) << r.blocks[0].error;
}

}  // namespace
}  // namespace flowtune::shuffle
