// flowtune-packet: runs the packet-level simulation (docs/packet.md) for one
// or more schemes on the same network and workload; JSON out.
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

#include "flow_list.h"
#include "packet.h"

namespace {

using flowtune::packet::Config;

const char* kUsage = R"(usage: flowtune-packet [--quick] [--schemes LIST] [flags] [--out FILE]
Runs each scheme (flowtune,dctcp,cubic,bbr,fqcodel; default flowtune) on the
same network and workload and writes one JSON object {"runs": [...]}.
--quick: a 2 x 4-host Clos, 2 ms of web traffic at load 0.5, every scheme.
Flags (defaults: the paper's network, docs/packet.md):
  --topology clos|star  --racks N --hosts-per-rack N --spines N --star-hosts N
  --host-gbps G --core-gbps G --allocator-gbps G --link-delay-us T
  --buffer-packets N --dctcp-k N --codel-target-us T --codel-interval-us T
  --min-rto-us T --mss B
  --traffic poisson|joinleave|incast|coflow-trace --workload NAME|FILE --load L
  --duration-ms T --drain-ms T --incast-senders N --incast-receivers M
  --incast-bytes B --join-interval-ms T --seed N
  --trace fb|FILE --trace-coflows N --time-scale S --trace-byte-scale B
  --turn-us T --threshold F --control network|instant --bin-us T --queue-host H
  --coflow-policy none|stf|sebf|bssi --coflow-share F (Flowtune)
  --flows-out FILE: every flowlet's arrival, ECMP hash and end as a flow list
  (CSV, flowtune-sim run --flows reads it); one scheme only.
)";

double number(const std::string& flag, const std::string& v) {
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty())
    throw std::invalid_argument(flag + " needs a number (got '" + v + "')");
  return x;
}

using Setter = std::function<void(Config&, const std::string&, const std::string&)>;
template <typename T>
Setter num(T Config::*field) {
  return [field](Config& c, const std::string& f, const std::string& v) {
    c.*field = static_cast<T>(number(f, v));
  };
}

const std::map<std::string, Setter>& setters() {
  using namespace flowtune::packet;
  static const std::map<std::string, Setter> m = {
      {"--topology",
       [](Config& c, const std::string&, const std::string& v) { c.shape = parse_shape(v); }},
      {"--traffic",
       [](Config& c, const std::string&, const std::string& v) { c.traffic = parse_traffic(v); }},
      {"--control",
       [](Config& c, const std::string&, const std::string& v) {
         if (v != "network" && v != "instant")
           throw std::invalid_argument("--control must be network or instant (got '" + v + "')");
         c.instant_control = v == "instant";
       }},
      {"--workload", [](Config& c, const std::string&, const std::string& v) { c.workload = v; }},
      {"--trace", [](Config& c, const std::string&, const std::string& v) { c.trace = v; }},
      {"--coflow-policy",
       [](Config& c, const std::string&, const std::string& v) { c.coflow_policy = v; }},
      {"--trace-coflows", num(&Config::trace_coflows)},
      {"--time-scale", num(&Config::time_scale)},
      {"--trace-byte-scale", num(&Config::trace_byte_scale)},
      {"--coflow-share", num(&Config::coflow_share)},
      {"--racks", num(&Config::racks)},
      {"--hosts-per-rack", num(&Config::hosts_per_rack)},
      {"--spines", num(&Config::spines)},
      {"--star-hosts", num(&Config::star_hosts)},
      {"--host-gbps", num(&Config::host_gbps)},
      {"--core-gbps", num(&Config::core_gbps)},
      {"--allocator-gbps", num(&Config::allocator_gbps)},
      {"--link-delay-us", num(&Config::link_delay_us)},
      {"--buffer-packets", num(&Config::buffer_packets)},
      {"--dctcp-k", num(&Config::dctcp_k_packets)},
      {"--codel-target-us", num(&Config::codel_target_us)},
      {"--codel-interval-us", num(&Config::codel_interval_us)},
      {"--min-rto-us", num(&Config::min_rto_us)},
      {"--mss", num(&Config::mss)},
      {"--load", num(&Config::load)},
      {"--duration-ms", num(&Config::duration_ms)},
      {"--drain-ms", num(&Config::drain_ms)},
      {"--incast-senders", num(&Config::incast_senders)},
      {"--incast-receivers", num(&Config::incast_receivers)},
      {"--incast-bytes", num(&Config::incast_bytes)},
      {"--join-interval-ms", num(&Config::join_interval_ms)},
      {"--seed", num(&Config::seed)},
      {"--turn-us", num(&Config::turn_us)},
      {"--threshold", num(&Config::threshold)},
      {"--bin-us", num(&Config::bin_us)},
      {"--queue-host", num(&Config::queue_host)}};
  return m;
}

std::vector<flowtune::packet::Scheme> split_schemes(const std::string& list) {
  std::vector<flowtune::packet::Scheme> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');)
    out.push_back(flowtune::packet::parse_scheme(item));
  return out;
}

Config quick_config() {
  Config c;
  c.racks = 2;
  c.hosts_per_rack = 4;
  c.spines = 2;
  c.core_gbps = 20;
  c.duration_ms = 2;
  c.drain_ms = 50;
  return c;
}

// The run's flowlets as a flow list (allocator/sim/flow_list.h).
void write_flows(const std::string& path, const flowtune::packet::Result& r) {
  std::vector<flowtune::sim::ListedFlow> list;
  for (const auto& f : r.flows) {
    list.push_back({f.spec.src, f.spec.dst, f.spec.bytes, f.spec.start_s, f.ecmp_hash, f.end_s});
  }
  std::ofstream out(path);
  out << flowtune::sim::format_flow_list(list);
  if (!out) throw std::runtime_error("cannot write " + path);
}

int run_main(int argc, char** argv) {
  using namespace flowtune::packet;
  bool quick = false;
  std::string out_path, flows_out, schemes = "flowtune";
  for (int i = 1; i < argc; ++i) quick = quick || std::string(argv[i]) == "--quick";
  Config c = quick ? quick_config() : Config{};
  if (quick) schemes = "flowtune,dctcp,cubic,bbr,fqcodel";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quick") continue;
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value (or is unknown)");
    const std::string value = argv[++i];
    if (flag == "--out") {
      out_path = value;
    } else if (flag == "--flows-out") {
      flows_out = value;
    } else if (flag == "--schemes") {
      schemes = value;
    } else if (auto it = setters().find(flag); it != setters().end()) {
      it->second(c, flag, value);
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  const std::vector<Scheme> list = split_schemes(schemes);
  if (!flows_out.empty() && list.size() != 1)
    throw std::invalid_argument("--flows-out takes one scheme");
  nlohmann::json runs = nlohmann::json::array();
  for (Scheme s : list) {
    c.scheme = s;
    validate(c);
    Result r = run(c);
    nlohmann::json j = summary_json(c, r);
    std::fprintf(stderr, "%s: %llu/%llu flows finished, %.1f ms simulated in %.1f s\n",
                 to_string(s), static_cast<unsigned long long>(j["finished"].get<std::uint64_t>()),
                 static_cast<unsigned long long>(r.flows.size()), r.simulated_s * 1e3, r.wall_s);
    runs.push_back(std::move(j));
    if (!flows_out.empty()) write_flows(flows_out, r);
  }
  const nlohmann::json doc = {{"runs", runs}};
  if (out_path.empty()) {
    std::cout << doc.dump(2) << "\n";
  } else {
    std::ofstream(out_path) << doc.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "flowtune-packet: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flowtune-packet: %s\n", e.what());
    return 1;
  }
}
