// flowtune-sim: run the real Flowtune engine offline.
//   flowtune-sim solve [options] FILE.json   solve one problem, print rates as JSON
//   flowtune-sim run [options]               flow-level simulation of a workload
//   flowtune-sim figure NAME [options]       the paper's experiments, JSON + PNG
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>

#include "coflow_trace.h"
#include "figures.h"
#include "flowtune/common/cli.h"
#include "simulator.h"
#include "solve.h"
#include "workload.h"

namespace {

using flowtune::sim::InputError;
using flowtune::sim::SolveOptions;
using nlohmann::json;

constexpr int kExitBadInput = flowtune::cli::kExitUsage;

constexpr const char* kUsage = R"(usage: flowtune-sim <command> [options]

commands:
  solve [options] FILE.json   Compute network-utility-maximizing rates for the
                              problem in FILE.json ('-' reads standard input).
  run [options]               Simulate flowlets arriving on a two-tier network,
                              allocated by the engine every 10 µs; print JSON.
  figure NAME [options]       Run one of the paper's experiments (or all):
                              writes DIR/NAME.json and DIR/NAME*.png.
  coflows [options]           Replay a coflow trace (the Facebook one by
                              default) under a coflow policy; print JSON.

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
  --gamma G                  NED step size, (0, 1] (default 0.4)
  --step S                   Gradient step, price per Gbit/s (default 0.002)
  --alpha A                  alpha-fair utility, 0.1-10; 1 = weighted log (default 1)
  --threads N                use the multi-core driver with N threads (default: serial)
  --table                    print a human-readable table instead of JSON
  -h, --help                 show this help

run options (defaults: the paper's §5.3 network and web workload):
  --racks N --hosts-per-rack N --spines N   two-tier network (9, 16, 4)
  --host-gbps G              host link rate (10); spine links give full bisection
  --workload NAME|FILE       web, cache, hadoop, websearch, datamining, or a CDF
                             file ('size cdf' rows, or a mean line first) (web)
  --load L                   offered load, fraction of host link capacity (0.6)
  --class0 F                 this fraction of flowlets in strict priority class 0,
                             the rest in the default class; FCTs of short ones
                             reported apart (0)
  --warmup-ms T              simulated time before measuring (5)
  --duration-ms T            simulated time measured (20)
  --iteration-us T           allocator iteration interval (10)
  --engine general|clos      the engine that iterates: the general one, or the
                             Clos layout (the same rates up to rounding,
                             faster on large networks; fnorm, no --class0)
                             (general)
  --algorithm, --norm, --gamma, --step   as for solve (ned, fnorm, 0.4, 0.002)
  --threshold T              notify rates that moved by more than T; links are
                             allocated to (1 - T) of capacity (0.01)
  --headroom H               also leave H of every link unscheduled, as the
                             allocator's --headroom (0)
  --seed N                   workload seed (1); a seed gives the same run
  --sample-every N           measure links every N iterations, 0 = never (10)
  --oracle-every N           compare with the optimum every N iterations, 0 = never (0)
  --flows FILE               run these flowlets (a flow list, as flowtune-packet's
                             --flows-out writes) instead of drawing them; stops
                             once all finished (workload, load, seed unused)
  --flows-out FILE           write every flowlet's arrival and end (a flow list)
  --out FILE                 write the JSON there instead of standard output
  --progress | --no-progress progress bar on standard error (default: if a tty)

coflows options (docs/coflows.md):
  --trace fb|FILE            Coflow-Benchmark trace (fb: 526 coflows, 150 racks)
  --policy pf|pf-engine|fair|stf|sebf|bssi|offline  per-flow fair (max-min);
                             proportional fairness by the allocator's engine
                             (NED + F-NORM solved at every event; slower);
                             per-port equal shares (the spare not handed on);
                             smallest coflow first;
                             smallest effective bottleneck first with MADD;
                             Sincronia's bottleneck-select-scale-iterate order;
                             each coflow alone (a bound) (sebf)
  --port-gbps G              each rack's up- and downlink (1)
  --time-scale S             multiply arrival times by S: < 1 is more load (1)
  --ordered-share F          share of each link handed out in coflow order;
                             the rest is shared by all flows (0.9)
  --aging-s T                aging: a coflow's weight grows as 1 + waited / T,
                             its key divided by it (0: off) (0)
  --max-coflows N            the first N coflows only (all)
  --batch-ms T               flows ending within T of the next end end with it,
                             each at its own time (fewer rate changes) (10)
  --per-coflow               every coflow's CCT in the JSON
  --out FILE                 write the JSON there instead of standard output

figure NAME: overallocation (Fig. 16), normalizers (Fig. 17), update-traffic
  (Fig. 9), threshold (Fig. 10), network-size (Fig. 11), convergence (Fig. 8,
  §5.3.1), fairness (§5.3.3 K), policies (short-flow FCT with a tenth of the
  web workload in strict priority class 0, against all in one class),
  coflow-trace (the Facebook coflow trace under each coflow policy), or all.
figure options:
  --quick                    shorter runs and fewer points (each under a minute)
  --out DIR                  output folder (sim-results)
  --jobs N                   simulations side by side (one per core)
  --seed N                   workload seed (1)
  --no-plot                  JSON only (PNGs need python3 with matplotlib)
  --progress | --no-progress as for run

exit status: 0 done (solve: converged or not), 1 failed, 2 bad usage or bad input.
)";

[[noreturn]] void usage_error(const std::string& msg) {
  flowtune::cli::Args::usage_error("flowtune-sim", msg);
}

// Walks a command's arguments (after the command name).
flowtune::cli::Args command_args(int argc, char** argv) {
  return flowtune::cli::Args("flowtune-sim", kUsage, argc, argv, 0);
}

flowtune::alloc::Algorithm parse_algorithm(std::string_view v) {
  if (v == "ned") return flowtune::alloc::Algorithm::kNed;
  if (v == "gradient") return flowtune::alloc::Algorithm::kGradient;
  usage_error("--algorithm must be ned or gradient, got '" + std::string(v) + "'");
}

flowtune::alloc::Normalizer parse_norm(std::string_view v) {
  if (v == "fnorm") return flowtune::alloc::Normalizer::kFNorm;
  if (v == "unorm") return flowtune::alloc::Normalizer::kUNorm;
  if (v == "none") return flowtune::alloc::Normalizer::kNone;
  usage_error("--norm must be fnorm, unorm or none, got '" + std::string(v) + "'");
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
  return flowtune::sim::parse_problem(buf.str(), file);
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
  for (auto args = command_args(argc, argv); args.next();) {
    std::string_view a = args.arg();
    if (a == "--algorithm") {
      opt.engine.algorithm = parse_algorithm(args.value());
    } else if (a == "--norm") {
      opt.engine.normalizer = parse_norm(args.value());
    } else if (a == "--iterations") {
      opt.iterations = args.count();
    } else if (a == "--max-iterations") {
      opt.max_iterations = args.count();
    } else if (a == "--tolerance") {
      opt.engine.tolerance = args.number();
    } else if (a == "--gamma") {
      opt.engine.gamma = args.number();
    } else if (a == "--step") {
      opt.engine.gradient_step = args.number();
    } else if (a == "--alpha") {
      opt.engine.alpha = args.number();
    } else if (a == "--threads") {
      opt.threads = static_cast<unsigned>(args.count());
    } else if (a == "--table") {
      table = true;
    } else if (args.is_option()) {
      args.unknown();
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

bool stderr_is_tty() { return ::isatty(STDERR_FILENO) == 1; }

std::uint32_t parse_u32(flowtune::cli::Args& args) {
  return static_cast<std::uint32_t>(args.count(0xffffffffull));
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno));
}

// One of run's flags that sets the simulation's config; false for any other.
bool parse_run_flag(std::string_view a, flowtune::cli::Args& args, flowtune::sim::SimConfig& c) {
  if (a == "--racks") {
    c.topology.racks = parse_u32(args);
  } else if (a == "--hosts-per-rack") {
    c.topology.hosts_per_rack = parse_u32(args);
  } else if (a == "--spines") {
    c.topology.spines = parse_u32(args);
  } else if (a == "--host-gbps") {
    c.topology.host_link_bps = args.number() * 1e9;
  } else if (a == "--workload") {
    c.workload = args.value();
  } else if (a == "--load") {
    c.load = args.number();
  } else if (a == "--class0") {
    c.tagged_fraction = args.number();
    c.tagged_class0 = true;
  } else if (a == "--warmup-ms") {
    c.warmup_s = args.number() / 1e3;
  } else if (a == "--duration-ms") {
    c.duration_s = args.number() / 1e3;
  } else if (a == "--iteration-us") {
    c.iteration_s = args.number() / 1e6;
  } else if (a == "--engine") {
    const std::string_view e = args.value();
    if (e != "general" && e != "clos") usage_error("--engine must be general or clos, got '" + std::string(e) + "'");
    c.clos_engine = e == "clos";
  } else if (a == "--algorithm") {
    c.algorithm = parse_algorithm(args.value());
  } else if (a == "--norm") {
    c.normalizer = parse_norm(args.value());
  } else if (a == "--gamma") {
    c.gamma = args.number();
  } else if (a == "--step") {
    c.gradient_step = args.number();
  } else if (a == "--threshold") {
    c.threshold = args.number();
  } else if (a == "--headroom") {
    c.headroom = args.number();
  } else if (a == "--seed") {
    c.seed = args.count();
  } else if (a == "--sample-every") {
    c.sample_every = parse_u32(args);
  } else if (a == "--oracle-every") {
    c.oracle_every = parse_u32(args);
  } else {
    return false;
  }
  return true;
}

// simulate(c), with a progress bar on stderr when `progress`.
flowtune::sim::SimResult simulate_showing_progress(flowtune::sim::SimConfig& c, bool progress) {
  std::atomic<std::uint64_t> done{0};
  std::atomic<bool> finished{false};
  if (progress) c.progress = &done;
  std::thread bar;
  if (progress) {
    bar = std::thread([&, total = flowtune::sim::total_steps(c)] {
      while (!finished) {
        double f = static_cast<double>(done.load()) / static_cast<double>(total);
        std::fprintf(stderr, "\r  simulating [%-30s] %3.0f%%",
                     std::string(static_cast<std::size_t>(f * 30), '=').c_str(), 100 * f);
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
      std::fputs("\r  simulating [==============================] 100%\n", stderr);
    });
  }
  flowtune::sim::SimResult r;
  try {
    r = flowtune::sim::simulate(c);
  } catch (...) {
    finished = true;
    if (bar.joinable()) bar.join();
    throw;
  }
  finished = true;
  if (bar.joinable()) bar.join();
  c.progress = nullptr;
  return r;
}

int cmd_run(int argc, char** argv) {
  flowtune::sim::SimConfig c;
  std::string out_file, flows_out;
  bool progress = stderr_is_tty();
  for (auto args = command_args(argc, argv); args.next();) {
    std::string_view a = args.arg();
    if (parse_run_flag(a, args, c)) continue;
    if (a == "--out") {
      out_file = args.value();
    } else if (a == "--flows") {
      c.flows = flowtune::sim::load_flow_list(std::string(args.value()));
    } else if (a == "--flows-out") {
      flows_out = args.value();
      c.record_flows = true;
    } else if (a == "--progress") {
      progress = true;
    } else if (a == "--no-progress") {
      progress = false;
    } else {
      args.unknown("run");
    }
  }
  try {
    flowtune::sim::validate(c);
  } catch (const std::invalid_argument& e) {
    usage_error(e.what());
  }
  const flowtune::sim::SimResult r = simulate_showing_progress(c, progress);
  json out = {{"config", flowtune::sim::to_json(c)}, {"result", flowtune::sim::to_json(r)}};
  if (!flows_out.empty()) write_text(flows_out, flowtune::sim::format_flow_list(r.flow_records));
  if (out_file.empty()) {
    std::cout << out.dump(2) << '\n';
  } else {
    write_text(out_file, out.dump(2) + "\n");
  }
  return 0;
}

int cmd_coflows(int argc, char** argv) {
  flowtune::sim::CoflowSimConfig c;
  std::string trace = "fb", out_file;
  bool per_coflow = false;
  for (auto args = command_args(argc, argv); args.next();) {
    std::string_view a = args.arg();
    if (a == "--trace") {
      trace = args.value();
    } else if (a == "--policy") {
      c.policy = args.value();
    } else if (a == "--port-gbps") {
      c.port_gbps = args.number();
    } else if (a == "--time-scale") {
      c.time_scale = args.number();
    } else if (a == "--ordered-share") {
      c.ordered_share = args.number();
    } else if (a == "--aging-s") {
      c.aging_s = args.number();
    } else if (a == "--max-coflows") {
      c.max_coflows = parse_u32(args);
    } else if (a == "--batch-ms") {
      c.batch_s = args.number() / 1e3;
    } else if (a == "--per-coflow") {
      per_coflow = true;
    } else if (a == "--out") {
      out_file = args.value();
    } else {
      args.unknown("coflows");
    }
  }
  if (const std::string why = flowtune::sim::check(c); !why.empty()) usage_error(why);
  flowtune::sim::CoflowTrace t;
  try {
    t = flowtune::sim::load_coflow_trace(trace);
  } catch (const std::runtime_error& e) {
    throw InputError(e.what());
  }
  const auto r = flowtune::sim::simulate_coflows(t, c);
  json out = {{"config", {{"trace", trace}, {"policy", c.policy}, {"port_gbps", c.port_gbps},
                          {"time_scale", c.time_scale}, {"ordered_share", c.ordered_share},
                          {"aging_s", c.aging_s}, {"max_coflows", c.max_coflows}}},
              {"summary", flowtune::sim::summarize(r)}};
  if (per_coflow) {
    for (const auto& o : r.coflows) {
      out["coflows"].push_back({{"id", o.id}, {"arrival_s", o.arrival_s}, {"cct_s", o.cct_s},
                                {"bound_s", o.bound_s}, {"bytes", o.bytes}, {"flows", o.flows}});
    }
  }
  if (out_file.empty()) {
    std::cout << out.dump(2) << '\n';
  } else {
    write_text(out_file, out.dump(2) + "\n");
  }
  return 0;
}

// Runs the plot script on a figure's JSON; a missing interpreter or
// matplotlib costs the PNGs only, with a warning that says so.
void plot(const std::string& json_path) {
  std::string script = FT_SIM_INSTALLED_PLOT;
  if (!std::ifstream(script).good()) script = FT_SIM_SOURCE_PLOT;
  // Debian's interpreter first: python3-matplotlib is installed for it, and a
  // user's PATH may lead to another python3 without it. FLOWTUNE_PYTHON wins.
  std::string python = "python3";
  if (const char* env = std::getenv("FLOWTUNE_PYTHON"); env != nullptr && *env != '\0') {
    python = env;
  } else if (::access("/usr/bin/python3", X_OK) == 0) {
    python = "/usr/bin/python3";
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execlp(python.c_str(), python.c_str(), script.c_str(), json_path.c_str(),
             static_cast<char*>(nullptr));
    std::fprintf(stderr, "flowtune-sim: warning: cannot run %s (%s): no PNGs\n", python.c_str(),
                 std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "flowtune-sim: warning: plotting %s failed; the JSON is complete\n",
                 json_path.c_str());
  }
}

int cmd_figure(int argc, char** argv) {
  flowtune::sim::FigureOptions opt;
  opt.progress = stderr_is_tty();
  std::string name, dir = "sim-results";
  bool draw = true;
  for (auto args = command_args(argc, argv); args.next();) {
    std::string_view a = args.arg();
    if (a == "--quick") {
      opt.quick = true;
    } else if (a == "--out") {
      dir = args.value();
    } else if (a == "--jobs") {
      opt.jobs = parse_u32(args);
    } else if (a == "--seed") {
      opt.seed = args.count();
    } else if (a == "--no-plot") {
      draw = false;
    } else if (a == "--progress") {
      opt.progress = true;
    } else if (a == "--no-progress") {
      opt.progress = false;
    } else if (args.is_option()) {
      args.unknown("figure");
    } else if (name.empty()) {
      name = a;
    } else {
      usage_error("figure takes one NAME");
    }
  }
  const auto& known = flowtune::sim::figure_names();
  std::vector<std::string> names;
  if (name == "all") {
    names = known;
  } else if (std::find(known.begin(), known.end(), name) != known.end()) {
    names = {name};
  } else {
    std::string list;
    for (const auto& n : known) list += n + ", ";
    usage_error((name.empty() ? std::string("figure needs a NAME") : "unknown figure '" + name + "'") +
                ": one of " + list + "all");
  }
  std::filesystem::create_directories(dir);
  flowtune::sim::FigureRunner runner(opt);
  for (const auto& n : names) {
    json out = runner.run(n);
    std::string path = dir + "/" + n + ".json";
    write_text(path, out.dump(1) + "\n");
    std::fprintf(stderr, "flowtune-sim: %s: %.1f s -> %s\n", n.c_str(),
                 out["wall_s"].get<double>(), path.c_str());
    std::cout << n << ": " << out["summary"].dump() << '\n';
    if (draw) plot(path);
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
    if (cmd == "run") return cmd_run(argc - 2, argv + 2);
    if (cmd == "figure") return cmd_figure(argc - 2, argv + 2);
    if (cmd == "coflows") return cmd_coflows(argc - 2, argv + 2);
  } catch (const flowtune::sim::WorkloadError& e) {
    std::cerr << "flowtune-sim: bad workload: " << e.what() << '\n';
    return kExitBadInput;
  } catch (const InputError& e) {
    std::cerr << "flowtune-sim: bad input: " << e.what() << '\n';
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "flowtune-sim: error: " << e.what() << '\n';
    return 1;
  }
  usage_error("unknown command '" + std::string(cmd) + "'");
}
