// flowtune-shuffle: the request parser (with random input), headers, CRC32C
// and the index format; then the io_uring server against the fetch client
// on loopback: every block arrives with its checksum, bad requests get an
// error and the server keeps serving, with and without an allocator.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
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
  std::string why;
  const auto back = decode_index(encode_index(ix), &why);
  ASSERT_TRUE(back.has_value()) << why;
  EXPECT_EQ(back->offsets, ix.offsets);
  EXPECT_EQ(back->crcs, ix.crcs);
  EXPECT_FALSE(decode_index("nonsense", &why).has_value());
  std::string cut = encode_index(ix);
  cut.pop_back();
  EXPECT_FALSE(decode_index(cut, &why).has_value());
  EXPECT_EQ(why, "index size does not match its partitions");
  MapIndex down{{0, 10, 5, 25}, {1, 2, 3}};
  EXPECT_FALSE(decode_index(encode_index(down), &why).has_value());
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
  void start(bool flowtune, DataPath path = DataPath::kRead) {
    ServerConfig c;
    c.data_path = path;
    c.dir = dir_;
    c.bind = "127.0.0.1";
    c.flowtune = flowtune;
    c.chunk_bytes = 64 * 1024;  // several reads per block
    server_ = std::make_unique<Server>(c);
    thread_ = std::thread([this] { server_->run(); });
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
    const auto ix = decode_index(bytes, nullptr);
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
};

constexpr DataPath kPaths[] = {DataPath::kRead, DataPath::kSplice, DataPath::kSendfile};

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
  EXPECT_EQ(server_->stats().blocks.load(), 14u);
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
  std::string why;
  const auto plan = parse_plan("# reducer plan\n150 12 3 77 " + src + ":0-0 " + src + ":1-1\n\n" +
                                   "0 12 0 76 " + src + ":0-1  # first\n0 12 1 76 " + src + ":0-1\n",
                               &why);
  ASSERT_TRUE(plan.has_value()) << why;
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
    const auto ix = decode_index(std::string((std::istreambuf_iterator<char>(in)), {}), nullptr);
    ASSERT_TRUE(ix.has_value());
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
  std::string why;
  EXPECT_EQ(parse_plan("", &why)->size(), 0u);
  EXPECT_EQ(parse_plan("  # nothing\n\n", &why)->size(), 0u);
  const auto ok = parse_plan("12.5\t1 2 3 a:1:0-0 b:2:1-1\r\n", &why);
  ASSERT_TRUE(ok.has_value()) << why;
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
    EXPECT_FALSE(parse_plan(text, &why).has_value()) << text;
    EXPECT_EQ(why, want);
  }
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
