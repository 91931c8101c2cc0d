// flowtune-shuffle: a shuffle service that declares its transfers to
// Flowtune (service.h, docs/coflows.md).
#include <csignal>
#include <cstdio>
#include <iostream>
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
         [--seed N]
         write M map outputs of R blocks each (sizes uniform in [MIN, MAX],
         default 1048576) with their index and checksums
  serve  --dir DIR [--bind ADDR] [--port P] [--chunk BYTES] [--no-flowtune]
         [--data-path read|splice|sendfile]
         serve DIR's map outputs until SIGINT or SIGTERM (data path: io_uring
         reads and sends; io_uring splices through a pipe, the default; or a
         blocking thread per connection with sendfile, the plain baseline;
         bench/shuffle_bench.py compares them); prints
         'listening PORT', then its counters as JSON on exit. The allocator
         comes from $FLOWTUNE_ALLOCATOR and $FLOWTUNE_HOST (libflowtune);
         without one, blocks go out unpaced and arrive all the same
  fetch  --source HOST:PORT:FIRST-LAST [--source ...] --partition R
         [--shuffle S] [--coflow ID]
         fetch reduce partition R from maps FIRST..LAST of each source, all
         sources at once; prints JSON (stage time, bytes, per-block times and
         errors); exit status 1 if a block failed its checksum or did not come

options:
  -h, --help   this text
)";

sh::Server* g_server = nullptr;
void on_signal(int) {
  if (g_server != nullptr) g_server->stop();
}

int cmd_gen(int argc, char** argv) {
  std::string dir;
  std::uint32_t shuffle = 0, maps = 0, partitions = 0;
  std::uint64_t lo = 1 << 20, hi = 1 << 20, seed = 1;
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
      if (lo > hi || hi > (1ull << 34)) args.fail("--block-bytes: MIN <= MAX <= 16 GiB");
    } else args.unknown("gen");
  }
  if (dir.empty() || maps == 0 || partitions == 0) {
    Args::usage_error("flowtune-shuffle", "gen needs --dir, --maps and --partitions");
  }
  sh::generate(dir, shuffle, maps, partitions, lo, hi, seed);
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
    else if (args.is("--data-path")) {
      c.data_path = args.choice<sh::DataPath>({{"read", sh::DataPath::kRead},
                                                {"splice", sh::DataPath::kSplice},
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
                    {"flowtune", server.flowtune_active()},
                    {"data_path", sh::to_string(c.data_path)}}
                   .dump()
            << '\n';
  return 0;
}

sh::FetchSource parse_source(Args& args, const std::string& v) {
  // HOST:PORT:FIRST-LAST
  const auto c2 = v.rfind(':');
  const auto c1 = c2 == std::string::npos || c2 == 0 ? std::string::npos : v.rfind(':', c2 - 1);
  const auto dash = c2 == std::string::npos ? std::string::npos : v.find('-', c2);
  sh::FetchSource s;
  try {
    if (c1 == std::string::npos || dash == std::string::npos || c1 == 0) throw std::invalid_argument(v);
    s.host = v.substr(0, c1);
    const unsigned long port = std::stoul(v.substr(c1 + 1, c2 - c1 - 1));
    s.first_map = static_cast<std::uint32_t>(std::stoul(v.substr(c2 + 1, dash - c2 - 1)));
    s.last_map = static_cast<std::uint32_t>(std::stoul(v.substr(dash + 1)));
    if (port == 0 || port > 65535 || s.first_map > s.last_map) throw std::invalid_argument(v);
    s.port = static_cast<std::uint16_t>(port);
  } catch (const std::exception&) {
    args.fail("--source expects HOST:PORT:FIRST-LAST (maps FIRST..LAST), got '" + v + "'");
  }
  return s;
}

int cmd_fetch(int argc, char** argv) {
  std::vector<sh::FetchSource> sources;
  std::uint32_t shuffle = 0;
  std::int64_t partition = -1;
  std::uint64_t coflow = 0;
  Args args("flowtune-shuffle", kUsage, argc, argv, 2);
  while (args.next()) {
    if (args.is("--source")) sources.push_back(parse_source(args, args.value()));
    else if (args.is("--shuffle")) shuffle = static_cast<std::uint32_t>(args.count(UINT32_MAX));
    else if (args.is("--partition")) partition = static_cast<std::int64_t>(args.count(UINT32_MAX));
    else if (args.is("--coflow")) coflow = args.count();
    else args.unknown("fetch");
  }
  if (sources.empty() || partition < 0) {
    Args::usage_error("flowtune-shuffle", "fetch needs --source and --partition");
  }
  const auto r = sh::fetch_partition(sources, shuffle, static_cast<std::uint32_t>(partition), coflow);
  json blocks = json::array();
  for (const auto& b : r.blocks) {
    json j = {{"map", b.map}, {"bytes", b.bytes}, {"seconds", b.seconds}};
    if (!b.error.empty()) j["error"] = b.error;
    blocks.push_back(j);
  }
  std::cout << json{{"stage_s", r.seconds}, {"bytes", r.bytes}, {"blocks", r.blocks.size()},
                    {"failed", r.failed}, {"coflow", coflow}, {"per_block", blocks}}
                   .dump()
            << '\n';
  return r.failed == 0 ? 0 : 1;
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flowtune-shuffle: %s\n", e.what());
    return 1;
  }
  Args::usage_error("flowtune-shuffle", "unknown command '" + cmd + "'");
}
