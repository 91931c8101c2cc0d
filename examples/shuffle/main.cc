// flowtune-shuffle: a shuffle service that declares its transfers to
// Flowtune (service.h, docs/coflows.md).
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "flowtune/common/cli.h"
#include "service.h"

namespace {

using flowtune::cli::Args;
using nlohmann::json;
namespace sh = flowtune::shuffle;

constexpr const char* kUsage = R"(usage: flowtune-shuffle <command> [options]

A shuffle service: map outputs served as blocks over TCP (one io_uring loop),
fetched by reducers from many servers at once; every block is a flowlet
declared to the Flowtune allocator with its size and its stage's coflow id.

commands:
  gen    --dir DIR --maps M --partitions R [--shuffle S] [--block-bytes MIN[:MAX]]
         [--partition-bytes B0,B1,...] [--seed N]
         write M map outputs of R blocks each (sizes uniform in [MIN, MAX],
         default 1048576; or block p of every map B_p bytes, R = how many
         are given) with their index and checksums
  serve  --dir DIR [--bind ADDR] [--port P] [--chunk BYTES] [--no-flowtune]
         [--data-path splice|read|read-zc|sendfile] [--cc ALGORITHM]
         [--idle-timeout-s S]
         serve DIR's map outputs until SIGINT or SIGTERM. Data paths:
           splice    io_uring splices file -> pipe -> socket (the default)
           read      io_uring reads into a per-connection buffer of --chunk
                     bytes (256 KiB), registered with the kernel, and sends it
           read-zc   as read, with two registered halves, sent zero-copy
                     (send_zc, kernel 6.0+); a half is read into again once
                     the kernel says it let go of its pages
           sendfile  a blocking thread per connection with sendfile(2), the
                     plain baseline (bench/shuffle_bench.py compares them)
         A buffer the kernel will not register (RLIMIT_MEMLOCK) is read into
         plainly, and a kernel that refuses zero-copy send gets plain sends:
         either is said once on stderr, nothing else changes. A connection
         on which nothing moves for --idle-timeout-s (default 60) is closed.
         --cc: the connections' TCP congestion control, e.g. cubic (default
         the system's). Prints 'listening PORT', then its counters as JSON on
         exit. The allocator comes from $FLOWTUNE_ALLOCATOR and
         $FLOWTUNE_HOST (libflowtune); without one, blocks go out unpaced and
         arrive all the same
  fetch  --source HOST:PORT:FIRST-LAST [--source ...] --partition R
         [--shuffle S] [--coflow ID] [--read-timeout-s S]
         fetch reduce partition R from maps FIRST..LAST of each source, all
         sources at once; prints JSON (stage time, bytes, per-block times and
         errors); exit status 1 if a block failed its checksum or did not
         come. A source from which nothing arrives for --read-timeout-s
         (default 30; connecting included) fails its outstanding blocks
  stages --plan FILE [--start-at UNIX_S] [--read-timeout-s S]
         run a sequence of fetches as a reducer host does over a trace: each
         line of FILE, "START_MS SHUFFLE PARTITION COFLOW SOURCE...", fetches
         one partition from its sources START_MS after the start (--start-at,
         seconds since the epoch: hosts agree on it; default now), each on
         its own thread; prints a JSON line per fetch as it ends (start,
         finish, bytes, failed blocks), then one with the totals; exit
         status 1 if any block failed; --read-timeout-s as for fetch

options:
  -h, --help   this text
)";

sh::Server* g_server = nullptr;
void on_signal(int) {
  if (g_server != nullptr) g_server->stop();
}

constexpr std::uint64_t kMaxBlock = 1ull << 34;

// --idle-timeout-s and --read-timeout-s: 1 ms to a day, in milliseconds.
std::uint32_t timeout_ms(Args& args) {
  return static_cast<std::uint32_t>(std::lround(args.number(0.001, 86400) * 1000));
}

std::vector<std::uint64_t> parse_sizes(Args& args, const std::string& v) {
  std::vector<std::uint64_t> out;
  for (const std::string& one : flowtune::cli::split_commas(v)) {
    std::uint64_t n = 0;
    if (!sh::parse_whole(one, n) || n > kMaxBlock) {
      args.fail("--partition-bytes expects comma-separated byte counts <= 16 GiB, got '" + one + "'");
    }
    out.push_back(n);
  }
  if (out.size() > 1'000'000) args.fail("--partition-bytes: at most 1,000,000 partitions");
  return out;
}

int cmd_gen(int argc, char** argv) {
  std::string dir;
  std::uint32_t shuffle = 0, maps = 0, partitions = 0;
  std::uint64_t lo = 1 << 20, hi = 1 << 20, seed = 1;
  std::vector<std::uint64_t> sized;  // --partition-bytes
  Args args("flowtune-shuffle", kUsage, argc, argv, 2);
  while (args.next()) {
    if (args.is("--dir")) dir = args.value();
    else if (args.is("--shuffle")) shuffle = static_cast<std::uint32_t>(args.count(UINT32_MAX));
    else if (args.is("--maps")) maps = static_cast<std::uint32_t>(args.count(1'000'000));
    else if (args.is("--partitions")) partitions = static_cast<std::uint32_t>(args.count(1'000'000));
    else if (args.is("--seed")) seed = args.count();
    else if (args.is("--block-bytes")) {
      const std::string v = args.value();
      const auto colon = v.find(':');
      try {
        lo = std::stoull(v.substr(0, colon));
        hi = colon == std::string::npos ? lo : std::stoull(v.substr(colon + 1));
      } catch (const std::exception&) {
        args.fail("--block-bytes expects MIN or MIN:MAX bytes, got '" + v + "'");
      }
      if (lo > hi || hi > kMaxBlock) args.fail("--block-bytes: MIN <= MAX <= 16 GiB");
    } else if (args.is("--partition-bytes")) {
      sized = parse_sizes(args, args.value());
    } else args.unknown("gen");
  }
  if (!sized.empty()) {
    if (partitions != 0 && partitions != sized.size()) {
      args.fail("--partitions " + std::to_string(partitions) + " but --partition-bytes gives " +
                std::to_string(sized.size()));
    }
    partitions = static_cast<std::uint32_t>(sized.size());
  }
  if (dir.empty() || maps == 0 || partitions == 0) {
    Args::usage_error("flowtune-shuffle", "gen needs --dir, --maps and --partitions");
  }
  if (sized.empty()) {
    sh::generate(dir, shuffle, maps, partitions, lo, hi, seed);
  } else {
    sh::generate(dir, shuffle, maps, sized, seed);
  }
  std::printf("wrote %u map outputs of %u blocks to %s\n", maps, partitions, dir.c_str());
  return 0;
}

int cmd_serve(int argc, char** argv) {
  sh::ServerConfig c;
  Args args("flowtune-shuffle", kUsage, argc, argv, 2);
  while (args.next()) {
    if (args.is("--dir")) c.dir = args.value();
    else if (args.is("--bind")) c.bind = args.value();
    else if (args.is("--port")) c.port = static_cast<std::uint16_t>(args.count(65535));
    else if (args.is("--chunk")) c.chunk_bytes = static_cast<std::uint32_t>(args.count(64u << 20));
    else if (args.is("--no-flowtune")) c.flowtune = false;
    else if (args.is("--cc")) c.congestion = args.value();
    else if (args.is("--idle-timeout-s")) c.idle_timeout_ms = timeout_ms(args);
    else if (args.is("--data-path")) {
      c.data_path = args.choice<sh::DataPath>({{"splice", sh::DataPath::kSplice},
                                                {"read", sh::DataPath::kRead},
                                                {"read-zc", sh::DataPath::kReadZc},
                                                {"sendfile", sh::DataPath::kSendfile}});
    }
    else args.unknown("serve");
  }
  if (c.dir.empty()) Args::usage_error("flowtune-shuffle", "serve needs --dir");
  sh::Server server(c);
  g_server = &server;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::printf("listening %u\n", server.port());
  std::fflush(stdout);
  server.run();
  g_server = nullptr;
  const auto& s = server.stats();
  std::cout << json{{"connections", s.connections.load()}, {"blocks", s.blocks.load()},
                    {"bytes", s.bytes.load()},           {"bad_requests", s.bad_requests.load()},
                    {"not_found", s.not_found.load()},   {"aborted", s.aborted.load()},
                    {"idle_closed", s.idle_closed.load()},
                    {"buffers_registered", s.buffers_registered.load()},
                    {"buffers_refused", s.buffers_refused.load()},
                    {"zc_sends", s.zc_sends.load()},     {"zc_copied", s.zc_copied.load()},
                    {"zero_copy", server.zero_copy()},
                    {"flowtune", server.flowtune_active()},
                    {"data_path", sh::to_string(c.data_path)}}
                   .dump()
            << '\n';
  return 0;
}

sh::FetchSource parse_source(Args& args, const std::string& v) {
  auto s = sh::parse_source(v);
  if (!s) args.fail("--source expects HOST:PORT:FIRST-LAST (maps FIRST..LAST), got '" + v + "'");
  return *s;
}

// An error text can carry a server's raw bytes: invalid UTF-8 is replaced,
// not thrown on.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json blocks_json(const sh::FetchResult& r) {
  json blocks = json::array();
  for (const auto& b : r.blocks) {
    json j = {{"map", b.map}, {"bytes", b.bytes}, {"seconds", b.seconds}};
    if (!b.error.empty()) j["error"] = b.error;
    blocks.push_back(j);
  }
  return blocks;
}

int cmd_fetch(int argc, char** argv) {
  std::vector<sh::FetchSource> sources;
  std::uint32_t shuffle = 0;
  std::int64_t partition = -1;
  std::uint64_t coflow = 0;
  std::uint32_t read_timeout_ms = sh::kDefaultReadTimeoutMs;
  Args args("flowtune-shuffle", kUsage, argc, argv, 2);
  while (args.next()) {
    if (args.is("--source")) sources.push_back(parse_source(args, args.value()));
    else if (args.is("--read-timeout-s")) read_timeout_ms = timeout_ms(args);
    else if (args.is("--shuffle")) shuffle = static_cast<std::uint32_t>(args.count(UINT32_MAX));
    else if (args.is("--partition")) partition = static_cast<std::int64_t>(args.count(UINT32_MAX));
    else if (args.is("--coflow")) coflow = args.count();
    else args.unknown("fetch");
  }
  if (sources.empty() || partition < 0) {
    Args::usage_error("flowtune-shuffle", "fetch needs --source and --partition");
  }
  const auto r = sh::fetch_partition(sources, shuffle, static_cast<std::uint32_t>(partition),
                                     coflow, read_timeout_ms);
  std::cout << dump({{"stage_s", r.seconds}, {"bytes", r.bytes}, {"blocks", r.blocks.size()},
                     {"failed", r.failed}, {"coflow", coflow}, {"per_block", blocks_json(r)}})
            << '\n';
  return r.failed == 0 ? 0 : 1;
}

int cmd_stages(int argc, char** argv) {
  std::string plan_path;
  double start_at = 0;
  std::uint32_t read_timeout_ms = sh::kDefaultReadTimeoutMs;
  Args args("flowtune-shuffle", kUsage, argc, argv, 2);
  while (args.next()) {
    if (args.is("--plan")) plan_path = args.value();
    else if (args.is("--read-timeout-s")) read_timeout_ms = timeout_ms(args);
    else if (args.is("--start-at")) {
      start_at = args.number();
      // Below 2^32 s: the clock's nanoseconds stay within 64 bits.
      if (!(start_at > 0 && start_at < 4e9)) args.fail("--start-at expects seconds since the epoch");
    }
    else args.unknown("stages");
  }
  if (plan_path.empty()) Args::usage_error("flowtune-shuffle", "stages needs --plan");
  std::ifstream in(plan_path);
  if (!in) throw std::runtime_error("cannot read " + plan_path);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  const auto plan = sh::parse_plan(text);
  if (!plan) throw std::runtime_error(plan_path + ": " + plan.error().message);
  using std::chrono::system_clock;
  const auto t0 = start_at > 0 ? system_clock::time_point(std::chrono::duration_cast<system_clock::duration>(
                                     std::chrono::duration<double>(start_at)))
                               : system_clock::now();
  // One line per fetch as it ends, so a run cut short keeps what finished.
  std::mutex out_mu;
  std::uint64_t bytes = 0, failed = 0;
  sh::run_plan(*plan, t0, [&](std::size_t i, const sh::PlannedOutcome& o) {
    const auto& f = (*plan)[i];
    const json line = {{"shuffle", f.shuffle}, {"partition", f.partition}, {"coflow", f.coflow},
                       {"planned_s", f.start_ms / 1000}, {"start_s", o.start_s},
                       {"finish_s", o.finish_s}, {"bytes", o.result.bytes},
                       {"blocks", o.result.blocks.size()}, {"failed", o.result.failed},
                       {"per_block", blocks_json(o.result)}};
    const std::lock_guard lock(out_mu);
    bytes += o.result.bytes;
    failed += o.result.failed;
    std::cout << dump(line) << std::endl;
  }, read_timeout_ms);
  std::cout << json{{"fetches", plan->size()}, {"bytes", bytes}, {"failed", failed}}.dump() << '\n';
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Args::usage_error("flowtune-shuffle", "missing command");
  const std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  try {
    if (cmd == "gen") return cmd_gen(argc, argv);
    if (cmd == "serve") return cmd_serve(argc, argv);
    if (cmd == "fetch") return cmd_fetch(argc, argv);
    if (cmd == "stages") return cmd_stages(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flowtune-shuffle: %s\n", e.what());
    return 1;
  }
  Args::usage_error("flowtune-shuffle", "unknown command '" + cmd + "'");
}
