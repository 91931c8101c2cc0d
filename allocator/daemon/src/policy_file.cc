#include "flowtune/daemon/policy_file.h"

#include <toml++/toml.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <sstream>

#include "flowtune/daemon/network.h"
#include "toml_reader.h"

namespace flowtune::daemon {
namespace {

// Policy files are a few kilobytes; a bound keeps a wrong path (a device, a
// huge log) from eating the allocator's memory.
constexpr std::size_t kMaxPolicyBytes = 4u << 20;

class Reader : TomlReader {
 public:
  explicit Reader(std::string src) : TomlReader{std::move(src)} {}

  static std::string key(std::string_view path, std::string_view k) { return join(path, k); }

  std::optional<double> number(const toml::table& t, std::string_view path, std::string_view k,
                               double lo, double hi) const {
    const toml::node* n = t.get(k);
    if (n == nullptr) return std::nullopt;
    double v = 0;
    if (const auto* i = n->as_integer()) v = static_cast<double>(i->get());
    else if (const auto* f = n->as_floating_point()) v = f->get();
    else fail(n, key(path, k), "expected a number");
    if (!(v >= lo && v <= hi)) {
      std::ostringstream os;
      os << v << " is out of range [" << lo << ", " << hi << "]";
      fail(n, key(path, k), os.str());
    }
    return v;
  }

  std::optional<std::uint8_t> cls(const toml::table& t, std::string_view path,
                                  std::string_view k) const {
    const toml::node* n = t.get(k);
    if (n == nullptr) return std::nullopt;
    const auto* i = n->as_integer();
    if (i == nullptr) fail(n, key(path, k), "expected a class, an integer 0-7");
    if (i->get() < 0 || i->get() >= alloc::kNumClasses) {
      fail(n, key(path, k), std::to_string(i->get()) + " is not a class (0-7)");
    }
    return static_cast<std::uint8_t>(i->get());
  }

  std::string text(const toml::table& t, std::string_view path, std::string_view k) const {
    const toml::node* n = t.get(k);
    if (n == nullptr) return "";
    const auto* s = n->as_string();
    if (s == nullptr || s->get().empty() || s->get().size() > 255) {
      fail(n, key(path, k), "expected a non-empty string of at most 255 bytes");
    }
    return s->get();
  }

  std::vector<std::string> names(const toml::table& t, std::string_view path,
                                 std::string_view k) const {
    std::vector<std::string> out;
    const toml::node* n = t.get(k);
    if (n == nullptr) return out;
    const auto* a = n->as_array();
    if (a == nullptr || a->empty()) fail(n, key(path, k), "expected a non-empty array of names");
    for (const toml::node& e : *a) {
      const auto* s = e.as_string();
      if (s == nullptr || s->get().empty()) fail(&e, key(path, k), "expected names (non-empty strings)");
      out.push_back(s->get());
    }
    return out;
  }

  alloc::TenantSpec tenant(const toml::table& t, std::string_view path,
                           const alloc::TenantSpec& base) const {
    check_keys(t, path, {"weight", "guarantee_gbps", "cap_gbps"});
    alloc::TenantSpec s = base;
    s.guarantee_bps = 0;
    s.cap_bps = 0;
    if (auto w = number(t, path, "weight", alloc::kMinWeight, alloc::kMaxWeight)) s.weight = *w;
    if (auto g = number(t, path, "guarantee_gbps", 1e-6, 1e6)) s.guarantee_bps = *g * 1e9;
    if (auto c = number(t, path, "cap_gbps", 1e-6, 1e6)) s.cap_bps = *c * 1e9;
    if (std::string why = alloc::check(s); !why.empty()) fail(&t, path, why);
    return s;
  }

  PolicyRule rule(const toml::table& t, std::string_view path) const {
    check_keys(t, path, {"src_hosts", "dst_hosts", "dst_ports", "endpoint", "keys", "class",
                         "top_class", "tenant"});
    PolicyRule r;
    r.line = static_cast<int>(t.source().begin.line);
    r.src_hosts = names(t, path, "src_hosts");
    r.dst_hosts = names(t, path, "dst_hosts");
    r.endpoint_prefix = text(t, path, "endpoint");
    r.keys = names(t, path, "keys");
    if (const toml::node* n = t.get("dst_ports")) ports(*n, key(path, "dst_ports"), &r);
    r.default_class = cls(t, path, "class");
    r.top_class = cls(t, path, "top_class");
    r.tenant = text(t, path, "tenant");
    if (r.default_class && r.top_class && *r.default_class < *r.top_class) {
      fail(&t, path, "class is above top_class");
    }
    if (!r.default_class && !r.top_class && r.tenant.empty()) {
      fail(&t, path, "sets nothing (give class, top_class or tenant)");
    }
    return r;
  }

  // 8080 or "8000-8100".
  void ports(const toml::node& n, const std::string& k, PolicyRule* r) const {
    long lo = 0, hi = 0;
    if (const auto* i = n.as_integer()) {
      lo = hi = static_cast<long>(i->get());
    } else if (const auto* s = n.as_string()) {
      const std::string& v = s->get();
      char* end = nullptr;
      errno = 0;
      lo = std::strtol(v.c_str(), &end, 10);
      hi = lo;
      if (*end == '-') hi = std::strtol(end + 1, &end, 10);
      // The whole string: a NUL inside ("80\u0000x") must not end it early.
      if (errno != 0 || end != v.c_str() + v.size() || v.empty()) {
        fail(&n, k, "expected PORT or \"LO-HI\"");
      }
    } else {
      fail(&n, k, "expected PORT or \"LO-HI\"");
    }
    if (lo < 1 || hi > 65535 || lo > hi) fail(&n, k, "ports must be 1-65535, low to high");
    r->dst_port_lo = static_cast<std::uint16_t>(lo);
    r->dst_port_hi = static_cast<std::uint16_t>(hi);
  }

  OperatorPolicy load(const toml::table& root) const {
    check_keys(root, "", {"defaults", "tenants", "rule"});
    OperatorPolicy p;
    p.source = source;
    if (const toml::node* n = root.get("defaults")) {
      const auto* d = n->as_table();
      if (d == nullptr) fail(n, "defaults", "expected a table");
      check_keys(*d, "defaults", {"class", "top_class", "tenant_weight"});
      p.default_class = cls(*d, "defaults", "class");
      p.top_class = cls(*d, "defaults", "top_class");
      if (auto w = number(*d, "defaults", "tenant_weight", alloc::kMinWeight, alloc::kMaxWeight)) {
        p.default_tenant.weight = *w;
      }
      if (p.default_class && p.top_class && *p.default_class < *p.top_class) {
        fail(d, "defaults", "class is above top_class");
      }
    }
    if (const toml::node* n = root.get("tenants")) {
      const auto* ts = n->as_table();
      if (ts == nullptr) fail(n, "tenants", "expected a table of tenants");
      for (auto&& [name, v] : *ts) {
        const std::string path = "tenants." + std::string(name.str());
        const auto* t = v.as_table();
        if (t == nullptr) fail(&v, path, "expected a table");
        if (name.str().size() > 255) fail(&v, path, "a tenant name has at most 255 bytes");
        p.tenants.emplace(std::string(name.str()), tenant(*t, path, p.default_tenant));
      }
    }
    if (const toml::node* n = root.get("rule")) {
      const auto* rules = n->as_array();
      if (rules == nullptr) fail(n, "rule", "expected [[rule]] tables");
      for (std::size_t i = 0; i < rules->size(); ++i) {
        const toml::node& e = (*rules)[i];
        const std::string path = "rule[" + std::to_string(i) + "]";
        const auto* t = e.as_table();
        if (t == nullptr) fail(&e, path, "expected a table");
        p.rules.push_back(rule(*t, path));
      }
    }
    return p;
  }

};

}  // namespace

OperatorPolicy parse_policy(std::string_view text, const std::string& source) {
  return Reader(source).load(TomlReader::parse(text, source));
}

OperatorPolicy load_policy_file(const std::string& path) {
  const std::string text = TomlReader::read_file(path, kMaxPolicyBytes);
  return parse_policy(text, path);
}

}  // namespace flowtune::daemon
