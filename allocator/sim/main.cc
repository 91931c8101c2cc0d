// flowtune-sim: run the real Flowtune engine offline.
//   flowtune-sim solve [options] FILE.json   solve one problem, print rates as JSON
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>

#include "solve.h"

namespace {

using flowtune::sim::InputError;
using flowtune::sim::SolveOptions;
using nlohmann::json;

constexpr int kExitBadInput = 2;

constexpr const char* kUsage = R"(usage: flowtune-sim <command> [options]

commands:
  solve [options] FILE.json   Compute network-utility-maximizing rates for the
                              problem in FILE.json ('-' reads standard input).

solve input:
  {"links": [{"id": ID, "capacity_bps": C}, ...],
   "flows": [{"id": ID, "path": [link ids, 1-4], "weight": W, "max_bps": M}, ...]}
  ids are integers or strings; weight defaults to 1; max_bps (optional) caps a flow.

solve output:
  {"rates": [{"id": ID, "bps": R}, ...], "iterations": N, "converged": BOOL,
   "max_link_utilization": U, "max_residual": KKT residual, "links": [...]}

solve options:
  --algorithm ned|gradient   optimizer (default ned)
  --norm fnorm|unorm|none    normalizer (default fnorm)
  --iterations N             run exactly N iterations (default: until converged)
  --max-iterations N         give up after N iterations (default 100000)
  --tolerance T              KKT residual that counts as converged (default 1e-4)
  --gamma G                  NED step size (default 0.4)
  --step S                   Gradient step, price per Gbit/s (default 0.002)
  --alpha A                  alpha-fair utility, 0.1-10; 1 = weighted log (default 1)
  --threads N                use the TBB-parallel driver with N threads (default: serial)
  --table                    print a human-readable table instead of JSON
  -h, --help                 show this help

exit status: 0 solved (converged or not), 2 bad usage or bad input.
)";

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "flowtune-sim: " << msg << "\n(run 'flowtune-sim --help' for usage)\n";
  std::exit(kExitBadInput);
}

double parse_double(std::string_view flag, const char* v) {
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0') {
    usage_error(std::string(flag) + " expects a number, got '" + v + "'");
  }
  return d;
}

std::uint64_t parse_count(std::string_view flag, const char* v) {
  char* end = nullptr;
  errno = 0;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || v[0] == '-') {
    usage_error(std::string(flag) + " expects a non-negative integer, got '" + v + "'");
  }
  return n;
}

json read_problem(const std::string& file) {
  std::stringstream buf;
  if (file == "-") {
    buf << std::cin.rdbuf();
  } else {
    std::ifstream in(file);
    if (!in) usage_error("cannot open '" + file + "': " + std::strerror(errno));
    buf << in.rdbuf();
  }
  try {
    return json::parse(buf.str());
  } catch (const json::parse_error& e) {
    throw InputError("malformed JSON in '" + file + "': " + e.what());
  }
}

void print_table(const json& out) {
  std::printf("%-16s %16s\n", "flow", "rate (Mbit/s)");
  for (const auto& r : out["rates"]) {
    std::printf("%-16s %16.3f\n", r["id"].dump().c_str(), r["bps"].get<double>() / 1e6);
  }
  std::printf("\n%-16s %16s %12s %12s\n", "link", "alloc (Mbit/s)", "utilization", "price");
  for (const auto& l : out["links"]) {
    std::printf("%-16s %16.3f %11.1f%% %12.5g\n", l["id"].dump().c_str(),
                l["allocated_bps"].get<double>() / 1e6, 100 * l["utilization"].get<double>(),
                l["price"].get<double>());
  }
  std::printf("\n%s + %s: %s after %llu iterations (KKT residual %.2g), max link utilization %.4f\n",
              out["algorithm"].get<std::string>().c_str(), out["norm"].get<std::string>().c_str(),
              out["converged"].get<bool>() ? "converged" : "NOT converged",
              static_cast<unsigned long long>(out["iterations"].get<std::uint64_t>()),
              out["max_residual"].get<double>(), out["max_link_utilization"].get<double>());
}

int cmd_solve(int argc, char** argv) {
  SolveOptions opt;
  std::string file;
  bool table = false;
  for (int i = 0; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(std::string(a) + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--algorithm") {
      std::string_view v = value();
      if (v == "ned") {
        opt.engine.algorithm = flowtune::alloc::Algorithm::kNed;
      } else if (v == "gradient") {
        opt.engine.algorithm = flowtune::alloc::Algorithm::kGradient;
      } else {
        usage_error("--algorithm must be ned or gradient, got '" + std::string(v) + "'");
      }
    } else if (a == "--norm") {
      std::string_view v = value();
      if (v == "fnorm") {
        opt.engine.normalizer = flowtune::alloc::Normalizer::kFNorm;
      } else if (v == "unorm") {
        opt.engine.normalizer = flowtune::alloc::Normalizer::kUNorm;
      } else if (v == "none") {
        opt.engine.normalizer = flowtune::alloc::Normalizer::kNone;
      } else {
        usage_error("--norm must be fnorm, unorm or none, got '" + std::string(v) + "'");
      }
    } else if (a == "--iterations") {
      opt.iterations = parse_count(a, value());
    } else if (a == "--max-iterations") {
      opt.max_iterations = parse_count(a, value());
    } else if (a == "--tolerance") {
      opt.engine.tolerance = parse_double(a, value());
    } else if (a == "--gamma") {
      opt.engine.gamma = parse_double(a, value());
    } else if (a == "--step") {
      opt.engine.gradient_step = parse_double(a, value());
    } else if (a == "--alpha") {
      opt.engine.alpha = parse_double(a, value());
    } else if (a == "--threads") {
      opt.threads = static_cast<unsigned>(parse_count(a, value()));
    } else if (a == "--table") {
      table = true;
    } else if (a.size() > 1 && a[0] == '-') {
      usage_error("unknown option '" + std::string(a) + "'");
    } else if (file.empty()) {
      file = a;
    } else {
      usage_error("more than one input file");
    }
  }
  if (file.empty()) usage_error("solve needs an input file (FILE.json or -)");
  json out;
  try {
    out = flowtune::sim::solve(read_problem(file), opt);
  } catch (const std::invalid_argument& e) {  // engine configuration
    usage_error(e.what());
  }
  if (table) {
    print_table(out);
  } else {
    std::cout << out.dump(2) << '\n';
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage_error("missing command");
  std::string_view cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  try {
    if (cmd == "solve") return cmd_solve(argc - 2, argv + 2);
  } catch (const InputError& e) {
    std::cerr << "flowtune-sim: bad input: " << e.what() << '\n';
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "flowtune-sim: error: " << e.what() << '\n';
    return 1;
  }
  usage_error("unknown command '" + std::string(cmd) + "'");
}
