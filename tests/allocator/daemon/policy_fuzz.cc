// libFuzzer target over the operator's policy file parser (parse_policy, what
// load_policy_file reads). Checked, beyond nothing crashing or tripping a
// sanitizer:
//   - a refused file throws ConfigError (no other exception) whose message
//     names the file and says more ("fuzz.toml:LINE: key: reason");
//   - an accepted policy round-trips: written back as TOML (every value the
//     parser kept) it parses to the same policy.
// Run with -max_len=4096 (real policy files are a few kilobytes).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "flowtune/alloc/engine.h"
#include "flowtune/daemon/network.h"
#include "flowtune/daemon/policy_file.h"

namespace {

using namespace flowtune;
using daemon::OperatorPolicy;
using daemon::PolicyRule;

[[noreturn]] void fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "policy_fuzz: %s\n%s\n", what, detail.c_str());
  std::abort();
}

// The file gives Gbit/s and the policy keeps bit/s; stay inside the
// parser's range when dividing back rounds a bound by an ulp.
double gbps(double bps) { return std::clamp(bps / 1e9, 1e-6, 1e6); }

// The policy written back as TOML by hand: toml++ 3.3's writer leaves some
// keys bare that TOML requires quoted (a tenant named saa' became
// [tenants.saa'], which toml++ itself then refuses), so keys and strings are
// written as basic strings, escaping every byte that needs it.
std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\' || u < 0x20 || u == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04X", u);
      out += esc;
    } else {
      out += c;  // UTF-8 passes as is: the parser only accepted valid UTF-8
    }
  }
  return out + "\"";
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);  // exact; "1" is an integer, which the parser takes
  return buf;
}

std::string names(const std::vector<std::string>& v) {
  std::string out = "[";
  for (const std::string& s : v) out += (out.size() > 1 ? ", " : "") + quoted(s);
  return out + "]";
}

std::string write(const OperatorPolicy& p) {
  std::string out = "[defaults]\n";
  if (p.default_class) out += "class = " + std::to_string(*p.default_class) + "\n";
  if (p.top_class) out += "top_class = " + std::to_string(*p.top_class) + "\n";
  out += "tenant_weight = " + number(p.default_tenant.weight) + "\n";
  for (const auto& [name, t] : p.tenants) {
    out += "[tenants." + quoted(name) + "]\nweight = " + number(t.weight) + "\n";
    if (t.guarantee_bps > 0) out += "guarantee_gbps = " + number(gbps(t.guarantee_bps)) + "\n";
    if (t.cap_bps > 0) out += "cap_gbps = " + number(gbps(t.cap_bps)) + "\n";
  }
  for (const PolicyRule& r : p.rules) {
    out += "[[rule]]\n";
    if (!r.src_hosts.empty()) out += "src_hosts = " + names(r.src_hosts) + "\n";
    if (!r.dst_hosts.empty()) out += "dst_hosts = " + names(r.dst_hosts) + "\n";
    if (r.dst_port_lo != 0 && r.dst_port_lo == r.dst_port_hi) {
      out += "dst_ports = " + std::to_string(r.dst_port_lo) + "\n";
    } else if (r.dst_port_lo != 0) {
      out += "dst_ports = \"" + std::to_string(r.dst_port_lo) + "-" +
             std::to_string(r.dst_port_hi) + "\"\n";
    }
    if (!r.endpoint_prefix.empty()) out += "endpoint = " + quoted(r.endpoint_prefix) + "\n";
    if (!r.keys.empty()) out += "keys = " + names(r.keys) + "\n";
    if (r.default_class) out += "class = " + std::to_string(*r.default_class) + "\n";
    if (r.top_class) out += "top_class = " + std::to_string(*r.top_class) + "\n";
    if (!r.tenant.empty()) out += "tenant = " + quoted(r.tenant) + "\n";
  }
  return out;
}

bool near(double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b)); }

bool same(const alloc::TenantSpec& a, const alloc::TenantSpec& b) {
  return a.weight == b.weight && near(a.guarantee_bps, b.guarantee_bps) && near(a.cap_bps, b.cap_bps);
}

bool same(const PolicyRule& a, const PolicyRule& b) {
  return a.src_hosts == b.src_hosts && a.dst_hosts == b.dst_hosts &&
         a.dst_port_lo == b.dst_port_lo && a.dst_port_hi == b.dst_port_hi &&
         a.endpoint_prefix == b.endpoint_prefix && a.keys == b.keys &&
         a.default_class == b.default_class &&
         a.top_class == b.top_class && a.tenant == b.tenant;
}

void check_round_trip(const OperatorPolicy& p) {
  const std::string text = write(p);
  OperatorPolicy q;
  try {
    q = daemon::parse_policy(text, "again.toml");
  } catch (const daemon::ConfigError& e) {
    fail("an accepted policy, written back, is refused", text + "\n" + e.what());
  }
  bool ok = p.default_class == q.default_class && p.top_class == q.top_class &&
            same(p.default_tenant, q.default_tenant) && p.tenants.size() == q.tenants.size() &&
            p.rules.size() == q.rules.size();
  for (auto a = p.tenants.cbegin(), b = q.tenants.cbegin(); ok && a != p.tenants.cend(); ++a, ++b) {
    ok = a->first == b->first && same(a->second, b->second);
  }
  for (std::size_t i = 0; ok && i < p.rules.size(); ++i) ok = same(p.rules[i], q.rules[i]);
  if (!ok) fail("an accepted policy, written back, parses to another policy", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    check_round_trip(daemon::parse_policy(text, "fuzz.toml"));
  } catch (const daemon::ConfigError& e) {
    const std::string_view what = e.what();
    if (what.substr(0, 10) != "fuzz.toml:" || what.size() <= 11) {
      fail("a refusal does not name the file and say why", e.what());
    }
  }
  return 0;
}
