// flowtune-ctl: asks a running flowtune-allocator for its state over the same
// ZeroMQ endpoint the endpoints use, and prints it as tables or JSON.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "health.h"

#include "flowtune/common/cli.h"
#include "flowtune/common/curve.h"
#include "flowtune/common/endpoint.h"

namespace {

using nlohmann::json;

constexpr int kExitUsage = flowtune::cli::kExitUsage;
constexpr int kExitUnreachable = 1;
constexpr const char* kControlTag = "flowtune-ctl";  // as flowtune/daemon/server.h

constexpr const char* kUsage = R"(usage: flowtune-ctl [options] [COMMAND]

Shows the state of a running flowtune-allocator.

commands:
  status      summary, configuration and counters (default)
  endpoints   connected endpoints: host, flows, idle time, messages, errors
  flows       active flows: endpoints, path, weight, current and sent rate
  links       links that carry flows: capacity, allocation, utilization, price
  tenants     tenants: flows, rates, weight, guarantee and cap (status shows
              the first 32)
  all         every section above
  health      exit 0 when the allocator is ready, 1 when not (or it does not
              answer): live (it answers), its engine idle or iterating
              (two replies --health-interval-ms apart), and in a standby
              pair its role settled; one line says why. With --live: 0
              when it answers at all. For probes and watchdogs
  reload      the allocator re-reads its --policy file and key lists (as
              SIGHUP; needs an admin key, or a loopback listener without CURVE)
  keygen NAME writes a new CURVE key pair: NAME.key (secret, mode 600) and
              NAME.pub (public; for an allocator's allow-list); with
              --hosts, the hosts an endpoint key may speak for

options:
  --allocator ENDPOINT   the allocator's --listen endpoint (default
                         $FLOWTUNE_ALLOCATOR or tcp://127.0.0.1:5555)
  --json                 print the allocator's JSON reply instead of tables
  --limit N              at most N flows, endpoints, links or tenants
                         (default 1000; asked a page of 500 at a time)
  --timeout-ms MS        wait this long for a reply (default 1000)
  --watch SECONDS        repeat every SECONDS until interrupted
  --live                 health: liveness only (the allocator answers)
  --health-interval-ms MS
                         health: the gap between the two replies readiness
                         compares (default 200)
  --curve-server KEY     the allocator's public key (Z85, or its .pub file):
                         speak CURVE (default $FLOWTUNE_CURVE_SERVER)
  --curve-key FILE       this tool's key pair, from keygen (default
                         $FLOWTUNE_CURVE_KEY, or $FLOWTUNE_CURVE_SECRET)
keygen:
  --out DIR              where keygen writes (default .)
  --hosts H1,H2,...      the hosts the key's endpoints may speak for (names
                         or addresses; * for any), written to NAME.pub
  -h, --help             show this help

exit status: 0 ok, 1 no reply from the allocator (health: not live or not
ready), 2 bad usage, 3 keygen could not write its files.
)";

struct Options {
  std::string allocator;
  std::string command = "status";
  bool json = false;
  std::size_t limit = 1000;
  long timeout_ms = 1000;
  double watch_s = 0;
  bool live_only = false;
  long health_interval_ms = 200;
  std::string curve_server;
  std::string curve_key;
  flowtune::curve::ClientCurve curve;
  // keygen
  std::string key_name;
  std::string key_dir = ".";
  std::string key_hosts;
};

Options parse(int argc, char** argv) {
  Options o;
  const char* env = std::getenv("FLOWTUNE_ALLOCATOR");
  o.allocator = env != nullptr && *env != '\0' ? env : "tcp://127.0.0.1:5555";
  bool have_command = false;
  flowtune::cli::Args args("flowtune-ctl", kUsage, argc, argv);
  while (args.next()) {
    if (args.is("--json")) {
      o.json = true;
    } else if (args.is("--allocator")) {
      o.allocator = args.value();
    } else if (args.is("--limit")) {
      o.limit = args.count();
    } else if (args.is("--timeout-ms")) {
      o.timeout_ms = static_cast<long>(std::min<std::uint64_t>(args.count(), 3'600'000));
    } else if (args.is("--watch")) {
      o.watch_s = args.number(1e-3, 86400);
    } else if (args.is("--live")) {
      o.live_only = true;
    } else if (args.is("--health-interval-ms")) {
      o.health_interval_ms = static_cast<long>(args.count(60'000));
    } else if (args.is("--curve-server")) {
      o.curve_server = args.value();
    } else if (args.is("--curve-key")) {
      o.curve_key = args.value();
    } else if (args.is("--out")) {
      o.key_dir = args.value();
    } else if (args.is("--hosts")) {
      o.key_hosts = args.value();
    } else if (!args.arg().empty() && args.arg()[0] != '-' && !have_command) {
      const std::string_view a = args.arg();
      if (a != "status" && a != "endpoints" && a != "flows" && a != "links" && a != "tenants" &&
          a != "all" && a != "reload" && a != "keygen" && a != "health") {
        args.fail("unknown command: " + std::string(a));
      }
      o.command = a;
      have_command = true;
    } else if (!args.arg().empty() && args.arg()[0] != '-' && o.command == "keygen" &&
               o.key_name.empty()) {
      o.key_name = args.arg();
    } else {
      args.unknown();
    }
  }
  if (o.command == "keygen") {
    if (o.key_name.empty()) args.fail("keygen needs a NAME");
    // The name is written into the files and names the key in the
    // allocator's logs and policy rules: plain characters only.
    const bool plain = std::all_of(o.key_name.begin(), o.key_name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.';
    });
    if (!plain || o.key_name[0] == '.' || o.key_name.size() > 200) {
      args.fail("keygen: NAME is 1-200 of A-Z a-z 0-9 - _ . and does not start with '.'");
    }
    return o;
  }
  if (!o.key_hosts.empty() || o.key_dir != ".") args.fail("--hosts and --out are keygen's");
  if (o.command != "health" && (o.live_only || o.health_interval_ms != 200)) {
    args.fail("--live and --health-interval-ms are health's");
  }
  // From --allocator or $FLOWTUNE_ALLOCATOR alike.
  if (const std::string why = flowtune::endpoint_port_error(o.allocator); !why.empty()) {
    args.fail("allocator endpoint " + why);
  }
  auto curve = flowtune::curve::client_keys(o.curve_server, o.curve_key);
  if (!curve) args.fail("CURVE: " + curve.error().message);
  o.curve = std::move(curve).value();
  return o;
}

// "h1,h2" as a TOML array of strings; names with quotes or backslashes are
// refused, said on stderr, as nullopt.
std::optional<std::string> toml_hosts(const std::string& list) {
  std::string out = "[";
  for (const std::string& h : flowtune::cli::split_commas(list)) {
    if (h.empty() || h.find_first_of("\"\\\n") != std::string::npos) {
      std::cerr << "flowtune-ctl: --hosts: '" << h << "' is not a host name or address\n";
      return std::nullopt;
    }
    out += (out.size() > 1 ? ", \"" : "\"") + h + "\"";
  }
  return out + "]";
}

constexpr int kExitKeygen = 3;

// Writes all of `text` to fd; false on an error.
bool write_all(int fd, const std::string& text) {
  std::size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

int keygen(const Options& o) {
  const flowtune::curve::KeyPair k = flowtune::curve::generate();
  if (k.public_key.empty()) {
    std::cerr << "flowtune-ctl: keygen: this libzmq was built without CURVE (libsodium)\n";
    return kExitKeygen;
  }
  const std::string base = o.key_dir + "/" + o.key_name;
  const std::string head = "# flowtune CURVE key \"" + o.key_name + "\" (flowtune-ctl keygen)\n";
  std::string pub = head + "public-key = \"" + k.public_key + "\"\n";
  if (!o.key_hosts.empty()) {
    const std::optional<std::string> hosts = toml_hosts(o.key_hosts);
    if (!hosts) return kExitUsage;
    pub += "hosts = " + *hosts + "\n";
  }
  const std::string secret =
      head + "public-key = \"" + k.public_key + "\"\nsecret-key = \"" + k.secret_key + "\"\n";
  // Both files are created (never over existing ones) before either is
  // written, and neither stays if anything fails.
  const std::string paths[2] = {base + ".key", base + ".pub"};
  const mode_t modes[2] = {0600, 0644};
  int fds[2] = {-1, -1};
  std::string why;
  for (int i = 0; i < 2 && why.empty(); ++i) {
    fds[i] = ::open(paths[i].c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, modes[i]);
    if (fds[i] < 0) why = paths[i] + ": " + std::strerror(errno);
  }
  if (why.empty() && !write_all(fds[0], secret)) why = paths[0] + ": " + std::strerror(errno);
  if (why.empty() && !write_all(fds[1], pub)) why = paths[1] + ": " + std::strerror(errno);
  for (int i = 0; i < 2; ++i) {
    if (fds[i] >= 0 && ::close(fds[i]) != 0 && why.empty()) why = paths[i] + ": " + std::strerror(errno);
  }
  if (!why.empty()) {
    for (int i = 0; i < 2; ++i) {
      if (fds[i] >= 0) ::unlink(paths[i].c_str());
    }
    std::cerr << "flowtune-ctl: keygen: " << why << "\n";
    return kExitKeygen;
  }
  std::cout << paths[0] << " (secret: give it to the one endpoint or operator it names)\n"
            << paths[1] << " (public: put it in the allocator's --curve-clients, --curve-ctl"
            << " or --curve-admin directory, or give it as --curve-server)\n";
  return 0;
}

// A reply, or the exit status of a request that got none worth reading
// (said on stderr already): main returns it.
struct Answer {
  json body;
  int status = 0;
  bool ok() const { return status == 0; }
};

// One request/reply. A fresh socket per request: a reply that missed its
// deadline must not be read as the answer to the next question.
Answer ask_once(zmq::context_t& ctx, const Options& o, const std::string& request) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  if (o.curve.on && flowtune::curve::apply_client(s.handle(), o.curve.keys) != 0) {
    throw zmq::error_t();
  }
  s.connect(o.allocator);
  s.send(zmq::buffer(std::string_view(kControlTag)), zmq::send_flags::sndmore);
  s.send(zmq::buffer(request), zmq::send_flags::none);
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, std::chrono::milliseconds(o.timeout_ms));
  zmq::message_t tag, body;
  if ((item.revents & ZMQ_POLLIN) == 0 || !s.recv(tag, zmq::recv_flags::dontwait) || !tag.more() ||
      !s.recv(body, zmq::recv_flags::dontwait)) {
    std::cerr << "flowtune-ctl: no reply from " << o.allocator << " within " << o.timeout_ms
              << " ms (is flowtune-allocator running there"
              << (o.curve.on ? "? is --curve-server its public key?)\n"
                             : "? with CURVE on it needs --curve-server and --curve-key)\n");
    return {json(), kExitUnreachable};
  }
  json j = json::parse(body.to_string_view(), nullptr, false);
  if (j.is_discarded()) {
    std::cerr << "flowtune-ctl: the reply from " << o.allocator << " is not JSON\n";
    return {json(), kExitUnreachable};
  }
  return {std::move(j), 0};
}

// ask_once, again after the wait the allocator names while it is answering
// too many requests (for up to the timeout); an error is an exit status.
Answer ask(zmq::context_t& ctx, const Options& o, const std::string& request) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.timeout_ms);
  for (;;) {
    Answer a = ask_once(ctx, o, request);
    if (!a.ok()) return a;
    json& j = a.body;
    const bool busy = j.contains("retry_ms") && j["retry_ms"].is_number_unsigned();
    const auto now = std::chrono::steady_clock::now();
    if (busy && now < until) {
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(
              std::chrono::milliseconds(j["retry_ms"].get<std::uint32_t>()), until - now));
      continue;
    }
    if (busy) {
      std::cerr << "flowtune-ctl: the allocator stayed busy for " << o.timeout_ms << " ms\n";
      return {json(), kExitUnreachable};
    }
    if (j.contains("error")) {
      std::cerr << "flowtune-ctl: allocator says: " << j["error"].get<std::string>() << "\n";
      return {json(), kExitUsage};
    }
    return a;
  }
}

std::string rate(double bps) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1);
  if (bps >= 1e9) s << bps / 1e9 << "G";
  else if (bps >= 1e6) s << bps / 1e6 << "M";
  else s << bps / 1e3 << "k";
  return s.str();
}

// A peer's text for a terminal: control characters (escape sequences
// among them) shown as '?', and at most `width` characters, cut at a
// character's start and marked with '~'.
std::string printable(const std::string& s, std::size_t width) {
  // Characters are counted at their first byte (UTF-8 continuation bytes
  // are 10xxxxxx).
  const auto starts = [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; };
  const std::size_t chars = static_cast<std::size_t>(std::count_if(s.begin(), s.end(), starts));
  const std::size_t keep = chars <= width ? chars : width - 1;
  std::string out;
  std::size_t seen = 0;
  for (const char c : s) {
    if (starts(c) && seen++ == keep) break;
    const auto u = static_cast<unsigned char>(c);
    out += u < 0x20 || u == 0x7f ? '?' : c;
  }
  return chars <= width ? out : out + "~";
}

// p: status's policy; j_age_s: how far behind the allocator its sums over
// flows are (0: current).
void print_policy(const json& p, double j_age_s) {
  std::cout << "classes  ";
  for (const auto& [k, s] : p["classes"].items()) {
    std::cout << " " << k << ": " << s["flows"] << " flows " << rate(s["rate_bps"].get<double>());
  }
  std::cout << (p["classes"].empty() ? " none\n" : "\n") << "tenants  ";
  if (p.contains("no_tenant") && p["no_tenant"].value("flows", 0u) > 0) {
    std::cout << " (none): " << p["no_tenant"]["flows"] << " flows "
              << rate(p["no_tenant"]["rate_bps"].get<double>());
  }
  for (const auto& [name, s] : p["tenants"].items()) {
    std::cout << " " << (name.empty() ? "(none)" : printable(name, 40)) << ": " << s["flows"] << " flows "
              << rate(s["rate_bps"].get<double>());
    if (s.contains("weight")) std::cout << " (weight " << s["weight"].get<double>();
    if (s.value("guarantee_bps", 0.0) > 0) std::cout << ", guarantee " << rate(s["guarantee_bps"].get<double>());
    if (s.value("cap_bps", 0.0) > 0) std::cout << ", cap " << rate(s["cap_bps"].get<double>());
    if (s.contains("weight")) std::cout << ")";
  }
  std::cout << (p["tenants"].empty() && p.value("no_tenant", json::object()).value("flows", 0u) == 0
                    ? " none\n"
                    : "\n");
  const auto total = p.value("tenants_total", std::uint64_t{0});
  const auto shown = p.value("tenants_shown", total);
  if (shown < total) {
    std::cout << "          (" << shown << " of " << total << " tenants; flowtune-ctl tenants shows all)\n";
  }
  if (j_age_s > 0) {
    std::cout << "          (sums over flows as of " << std::fixed << std::setprecision(1) << j_age_s
              << " s ago)\n";
  }
  std::cout << "planning  " << p.value("replans", 0u) << " floor plans; "
            << p.value("deadlines_infeasible", 0u) << " deadlines infeasible, "
            << p.value("guarantees_refused", 0u) << " guarantee floors refused";
  if (p.value("coflow_plans", 0u) > 0) {
    std::cout << "; " << p.value("coflow_plans", 0u) << " coflow plans, "
              << p.value("coflows_ordered", 0u) << " coflows in order";
  }
  std::cout << "\n";
}

// A relay's or a witness's status: what it is, then its counters, one
// "name value" pair each (their own status shapes, not the allocator's).
void print_peer_status(const json& j) {
  if (j.value("relay", false)) {
    std::cout << "relay     " << j.value("listen", "") << " -> " << j.value("upstream", "")
              << (j.value("curve", false) ? ", CURVE upstream" : "")
              << (j.value("curve_downstream", false) ? ", CURVE downstream" : "");
    if (j.contains("allow_list") && j["allow_list"].is_object()) {
      std::cout << ", allow-list of " << j["allow_list"].value("keys", 0u) << " keys";
    }
    std::cout << "\n";
  } else {
    std::cout << "witness   " << j.value("listen", "") << (j.value("curve", false) ? " (CURVE)" : "")
              << "  holder " << j.value("holder", 0u) << "  term " << j.value("term", 0u) << "  lease left "
              << j.value("lease_left_ms", 0u) << " ms\n";
  }
  if (!j.contains("counters") || !j["counters"].is_object()) return;
  std::cout << "counters ";
  for (const auto& [name, v] : j["counters"].items()) std::cout << " " << name << " " << v;
  std::cout << "\n";
}

void print_status(const json& j) {
  if (j.value("relay", false) || j.value("witness", false)) {
    print_peer_status(j);
    return;
  }
  const json& c = j["counters"];
  std::cout << "allocator " << j["listen"].get<std::string>() << "  epoch " << j["epoch"]
            << "  up " << std::fixed << std::setprecision(1) << j["uptime_s"].get<double>()
            << " s\n";
  const json& t = j["topology"];
  const json& cfg = j["config"];
  std::cout << "network   " << t["kind"].get<std::string>() << ", " << t["hosts"] << " hosts ("
            << t["spare_hosts"] << " spare), " << t["links"] << " links\n"
            << "engine    NED gamma " << cfg["gamma"] << ", " << cfg["norm"].get<std::string>()
            << ", " << cfg["threads"] << " thread(s), " << j["kernels"].get<std::string>()
            << "; threshold " << cfg["threshold"] << ", headroom " << cfg["headroom"] << "\n"
            << "state     " << j["endpoints"] << " endpoints, " << j["flows"] << " flows, "
            << (j["busy"].get<bool>() ? "iterating" : "idle") << "\n"
            << "events    " << c["events"] << " (hello " << c["hellos"] << ", start " << c["starts"]
            << ", end " << c["ends"] << ", heartbeat " << c["heartbeats"] << ", resync "
            << c["resyncs"] << ") in " << c["messages_in"] << " messages, " << c["bytes_in"]
            << " B\n"
            << "sent      " << c["rate_updates"] << " rate updates ("
            << c["rate_updates_suppressed"] << " under threshold; " << c.value("early_rates", 0u)
            << " early, " << c.value("early_rates_corrected", 0u) << " of them corrected), "
            << c["lease_refreshes"]
            << " lease refreshes in " << c["messages_out"] << " messages, " << c["bytes_out"]
            << " B; " << c["send_failures"] << " send failures\n"
            << "engine    " << c["iterations"] << " iterations; time p50 "
            << c["iteration_ns"]["p50"].get<double>() / 1e3 << " us, p99 "
            << c["iteration_ns"]["p99"].get<double>() / 1e3 << " us, p99.9 "
            << c["iteration_ns"]["p999"].get<double>() / 1e3 << " us\n"
            << "expired   " << c["endpoints_timed_out"] << " endpoints, " << c["flows_expired"]
            << " flows\n"
            << "deadlines " << c.value("deadlines_met", 0u) << " met, "
            << c.value("deadlines_missed", 0u) << " missed; " << c.value("classes_lowered", 0u)
            << " class asks lowered to the top class\n";
  if (j.contains("heap") && j["heap"]["in_use_bytes"].is_number()) {
    const json& h = j["heap"];
    std::cout << "memory    heap " << std::setprecision(1)
              << h["in_use_bytes"].get<double>() / (1 << 20) << " MiB in use, "
              << h["free_kept_bytes"].get<double>() / (1 << 20) << " MiB free ("
              << h["age_s"].get<double>() << " s ago); " << c.value("memory_trims", 0u)
              << " trims\n";
  }
  if (j.contains("policy")) print_policy(j["policy"], j.value("totals_age_s", 0.0));
  if (j.contains("auth") && j["auth"].value("mode", "") == "curve") {
    const json& a = j["auth"];
    std::cout << "auth      CURVE: " << a["keys"]["endpoint"] << " endpoint, " << a["keys"]["ctl"]
              << " ctl (" << a["keys"]["admin"] << " admin) keys; " << a["accepted"]
              << " handshakes accepted, refused: " << a["unknown_keys"] << " unknown keys, "
              << a["unauthenticated"] << " without CURVE, " << a["bad_handshakes"] << " failed\n";
    if (!a["last_reload_error"].get<std::string>().empty()) {
      std::cout << "          last reload refused: " << a["last_reload_error"].get<std::string>() << "\n";
    }
  } else if (j.contains("auth")) {
    std::cout << "auth      none (anyone who reaches the port is an endpoint)\n";
  }
  std::cout
            << "refused  ";
  bool any = false;
  for (const auto& [cause, n] : c["errors"].items()) {
    if (n.get<std::uint64_t>() == 0) continue;
    std::cout << " " << cause << "=" << n;
    any = true;
  }
  std::cout << (any ? "\n" : " none\n");
}

// Says so when --limit left some out.
void print_more(const json& j, const std::string& what) {
  const auto shown = j[what].size();
  const auto total = j.value("total", json(shown)).get<std::size_t>();
  if (shown < total) std::cout << "(" << shown << " of " << total << " " << what << "; --limit shows more)\n";
}

void print_endpoints(const json& j) {
  std::cout << std::left << std::setw(28) << "ENDPOINT" << std::setw(16) << "HOST" << std::right
            << std::setw(8) << "FLOWS" << std::setw(10) << "IDLE_MS" << std::setw(10) << "MSGS"
            << std::setw(8) << "ERRORS" << "\n";
  for (const json& e : j["endpoints"]) {
    std::cout << std::left << std::setw(28) << e["id"].get<std::string>() << std::setw(16)
              << e["host"].get<std::string>() << std::right << std::setw(8) << e["flows"].get<std::uint64_t>()
              << std::setw(10) << std::fixed << std::setprecision(1) << e["idle_ms"].get<double>()
              << std::setw(10) << e["messages"].get<std::uint64_t>() << std::setw(8)
              << e["errors"].get<std::uint64_t>() << "\n";
  }
  print_more(j, "endpoints");
}

std::string tenant_of(const json& f) {
  const std::string t = f.value("tenant", std::string());
  return t.empty() ? "-" : printable(t, 11);
}

// Time left to the flow's deadline ("-3.2ms" once overdue), or "-"; "!"
// marks one the network cannot meet (no floor: its fair share only).
std::string deadline_of(const json& f) {
  const double ms = f.value("deadline_left_ms", 0.0);
  if (ms == 0) return "-";
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << ms << "ms";
  if (f.value("deadline_state", std::string()) == "infeasible") s << "!";
  return s.str();
}

void print_flows(const json& j) {
  std::cout << std::left << std::setw(24) << "ENDPOINT" << std::setw(10) << "KEY" << std::setw(12)
            << "SRC" << std::setw(12) << "DST" << std::right << std::setw(8) << "WEIGHT"
            << std::setw(6) << "CLASS" << std::setw(12) << "TENANT" << std::setw(12) << "DEADLINE"
            << std::setw(10) << "RATE" << std::setw(10) << "SENT" << std::setw(8) << "HOLDERS"
            << "  PATH\n";
  for (const json& f : j["flows"]) {
    std::string path;
    for (const json& l : f["path"]) path += (path.empty() ? "" : ",") + l.get<std::string>();
    std::cout << std::left << std::setw(24) << f["endpoint"].get<std::string>() << std::setw(10)
              << f["key"].get<std::uint64_t>() << std::setw(12) << f["src"].get<std::string>() << std::setw(12)
              << f["dst"].get<std::string>() << std::right << std::setw(8) << std::setprecision(2)
              << f["weight"].get<double>() << std::setw(6) << f.value("class", 4u) << std::setw(12)
              << tenant_of(f) << std::setw(12) << deadline_of(f)
              << std::setw(10) << rate(f["rate_bps"].get<double>())
              << std::setw(10) << rate(f["sent_rate_bps"].get<double>()) << std::setw(8)
              << f.value("holders", 1u) << "  " << path << "\n";
  }
  print_more(j, "flows");
}

void print_links(const json& j) {
  std::cout << std::left << std::setw(20) << "LINK" << std::right << std::setw(10) << "CAPACITY"
            << std::setw(10) << "SCHED" << std::setw(10) << "ALLOC" << std::setw(8) << "UTIL%"
            << std::setw(8) << "FLOWS" << std::setw(12) << "PRICE" << "\n";
  for (const json& l : j["links"]) {
    std::cout << std::left << std::setw(20) << l["name"].get<std::string>() << std::right
              << std::setw(10) << rate(l["capacity_bps"].get<double>()) << std::setw(10)
              << rate(l["scheduled_bps"].get<double>()) << std::setw(10)
              << rate(l["allocated_bps"].get<double>()) << std::setw(8) << std::fixed
              << std::setprecision(1) << 100 * l["utilization"].get<double>() << std::setw(8)
              << l["flows"].get<std::uint64_t>() << std::setw(12) << std::setprecision(4) << l["price"].get<double>()
              << "\n";
  }
  print_more(j, "links");
}

void print_tenants(const json& j) {
  std::cout << std::left << std::setw(24) << "TENANT" << std::right << std::setw(8) << "FLOWS"
            << std::setw(10) << "RATE" << std::setw(8) << "WEIGHT" << std::setw(11) << "GUARANTEE"
            << std::setw(10) << "CAP" << "\n";
  for (const json& t : j["tenants"]) {
    const std::string name = printable(t["name"].get<std::string>(), 23);
    const auto bps = [&](const char* k) {
      const double v = t.value(k, 0.0);
      return v > 0 ? rate(v) : std::string("-");
    };
    std::cout << std::left << std::setw(24) << name << std::right << std::setw(8)
              << t["flows"].get<std::uint64_t>() << std::setw(10) << rate(t["rate_bps"].get<double>())
              << std::setw(8) << std::fixed << std::setprecision(2) << t["weight"].get<double>() << std::setw(11)
              << bps("guarantee_bps") << std::setw(10) << bps("cap_bps") << "\n";
  }
  if (j.contains("no_tenant")) {
    const json& n = j["no_tenant"];
    std::cout << std::left << std::setw(24) << "(none)" << std::right << std::setw(8)
              << n["flows"].get<std::uint64_t>() << std::setw(10) << rate(n["rate_bps"].get<double>())
              << "\n";
  }
  print_more(j, "tenants");
}

// Up to --limit items of `what` (flows, endpoints, links, tenants), a page per
// request (the allocator answers at most a page at a time so that no reply
// stalls its loop); "total" is the last page's count.
// Not a snapshot: items that come or go between pages may be missed or
// shown. Pages from another allocator run (its epoch) start the dump over,
// once. The first request names no start, so an allocator that does not
// page answers it as before.
Answer ask_pages(zmq::context_t& ctx, const Options& o, const std::string& what) {
  json all = {{what, json::array()}, {"total", 0}};
  std::optional<std::uint64_t> from, epoch;
  bool restarted = false;
  while (all[what].size() < o.limit) {
    const std::size_t want = o.limit - all[what].size();
    const Answer a = ask(ctx, o, what + " " + std::to_string(want) +
                                     (from ? " " + std::to_string(*from) : std::string()));
    if (!a.ok()) return a;
    const json& page = a.body;
    const std::uint64_t e = page.value("epoch", std::uint64_t{0});
    if (epoch && e != *epoch && !restarted) {
      all = {{what, json::array()}, {"total", 0}};
      from.reset();
      epoch = e;
      restarted = true;
      continue;
    }
    epoch = e;
    for (const json& f : page[what]) all[what].push_back(f);
    all["total"] = page.value("total", json(all[what].size()));
    if (page.contains("no_tenant")) all["no_tenant"] = page["no_tenant"];
    if (!page.contains("next") || page["next"].is_null()) break;
    from = page["next"].get<std::uint64_t>();
  }
  // An allocator that does not page answers whole: keep --limit.
  auto& items = all[what];
  if (items.size() > o.limit) {
    items.erase(items.begin() + static_cast<std::ptrdiff_t>(o.limit), items.end());
  }
  return {std::move(all), 0};
}

// health: 1 (said by ask()) when no reply comes.
int health(zmq::context_t& ctx, const Options& o) {
  const Answer first = ask(ctx, o, "status");
  if (!first.ok()) return first.status;
  if (o.live_only) {
    std::cout << "live: " << o.allocator << " answers\n";
    return 0;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(o.health_interval_ms));
  const Answer second = ask(ctx, o, "status");
  if (!second.ok()) return second.status;
  const flowtune::ctl::Verdict v = flowtune::ctl::readiness(first.body, second.body, o.health_interval_ms);
  std::cout << v.reason << "\n";
  return v.ok ? 0 : kExitUnreachable;
}

// One screen of the command: 0, or the exit status of a failed request.
int show(zmq::context_t& ctx, const Options& o) {
  if (o.command == "reload") {
    const Answer r = ask(ctx, o, "reload");
    if (!r.ok()) return r.status;
    std::cout << (o.json ? r.body.dump(2) : r.body.value("reload", std::string())) << "\n";
    return 0;
  }
  const bool all = o.command == "all";
  json out = json::object();
  if (all || o.command == "status") {
    Answer s = ask(ctx, o, "status");
    if (!s.ok()) return s.status;
    out["status"] = std::move(s.body);
  }
  // Pages: {ITEMS: [...], total}. --json prints endpoints and links as
  // their arrays (as before paging), flows as the object.
  json pages = json::object();
  for (const char* what : {"endpoints", "flows", "links", "tenants"}) {
    if (!all && o.command != what) continue;
    Answer p = ask_pages(ctx, o, what);
    if (!p.ok()) return p.status;
    pages[what] = std::move(p.body);
    const std::string w = what;
    out[what] = w == "flows" || w == "tenants" ? pages[what] : pages[what][what];
  }
  if (o.json) {
    std::cout << (all ? out : out.begin().value()).dump(2) << "\n";
    return 0;
  }
  if (out.contains("status")) print_status(out["status"]);
  if (pages.contains("endpoints")) print_endpoints(pages["endpoints"]);
  if (pages.contains("flows")) print_flows(pages["flows"]);
  if (pages.contains("links")) print_links(pages["links"]);
  if (pages.contains("tenants")) print_tenants(pages["tenants"]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.command == "keygen") return keygen(o);
  try {
    zmq::context_t ctx(1);
    if (o.command == "health") return health(ctx, o);
    do {
      if (o.watch_s > 0 && !o.json) std::cout << "\033[H\033[2J";
      if (const int status = show(ctx, o); status != 0) return status;
      std::cout.flush();
      if (o.watch_s > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double>(o.watch_s));
      }
    } while (o.watch_s > 0);
  } catch (const zmq::error_t& e) {
    std::cerr << "flowtune-ctl: " << o.allocator << ": " << e.what() << "\n";
    return kExitUsage;
  } catch (const nlohmann::json::exception& e) {
    std::cerr << "flowtune-ctl: unexpected reply from " << o.allocator << ": " << e.what() << "\n";
    return kExitUnreachable;
  }
  return 0;
}
