#include "socket_policy.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "flowtune/common/ipv4.h"
#include "flowtune/wire/messages.h"

namespace flowtune::preload {
namespace {

constexpr std::uint32_t kMaxDeadlineMs = 86'400'000;

template <class T>
std::optional<T> integer(std::string_view s, T lo, T hi) {
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

std::optional<float> weight_of(std::string_view s) {
  const std::string str(s);
  char* end = nullptr;
  const double w = std::strtod(str.c_str(), &end);
  if (str.empty() || end != str.c_str() + str.size() ||
      !(w >= wire::kMinWeight && w <= wire::kMaxWeight)) {
    return std::nullopt;
  }
  return static_cast<float>(w);
}

std::optional<Cidr> cidr_of(std::string_view s) {
  const auto slash = s.find('/');
  const auto ip = parse_ipv4(s.substr(0, slash));
  if (!ip) return std::nullopt;
  int bits = 32;
  if (slash != std::string_view::npos) {
    const auto b = integer<int>(s.substr(slash + 1), 0, 32);
    if (!b) return std::nullopt;
    bits = *b;
  }
  const std::uint32_t mask = bits == 0 ? 0 : ~std::uint32_t{0} << (32 - bits);
  return Cidr{*ip & mask, mask};
}

std::optional<PortRange> ports_of(std::string_view s) {
  const auto dash = s.find('-');
  const auto lo = integer<std::uint16_t>(s.substr(0, dash), 1, 65535);
  if (!lo) return std::nullopt;
  if (dash == std::string_view::npos) return PortRange{*lo, *lo};
  const auto hi = integer<std::uint16_t>(s.substr(dash + 1), *lo, 65535);
  if (!hi) return std::nullopt;
  return PortRange{*lo, *hi};
}

// 0 means none on the wire, and the allocator keeps the top bit for
// flowlets without a coflow (each its own): ids are 1 to 2^63 - 1.
constexpr const char* kCoflowRange = "a coflow is an id of 1 to 9223372036854775807";
std::optional<std::uint64_t> coflow_of(std::string_view s) {
  return integer<std::uint64_t>(s, 1, (std::uint64_t{1} << 63) - 1);
}

bool valid_tenant(std::string_view s) { return !s.empty() && s.size() <= wire::kMaxTextBytes; }

// One key=value word into *r; the reason on failure.
const char* apply_word(std::string_view key, std::string_view value, PolicyRule* r) {
  if (key == "dst" || key == "src") {
    const auto c = cidr_of(value);
    if (!c) return "an address is a.b.c.d or a.b.c.d/BITS";
    (key == "dst" ? r->dst : r->src) = c;
  } else if (key == "dport" || key == "sport") {
    const auto p = ports_of(value);
    if (!p) return "a port is 1-65535, a range LO-HI";
    (key == "dport" ? r->dport : r->sport) = p;
  } else if (key == "class") {
    r->priority_class = integer<int>(value, 0, FT_NUM_CLASSES - 1);
    if (!r->priority_class) return "a class is 0 (highest) to 7";
  } else if (key == "weight") {
    r->weight = weight_of(value);
    if (!r->weight) return "a weight is a number in [1e-6, 1e6]";
  } else if (key == "tenant") {
    if (!valid_tenant(value)) return "a tenant is a name of 1-256 bytes";
    r->tenant = std::string(value);
  } else if (key == "deadline-ms") {
    r->deadline_ms = integer<std::uint32_t>(value, 1, kMaxDeadlineMs);
    if (!r->deadline_ms) return "a deadline is 1 to 86400000 ms";
  } else if (key == "coflow") {
    r->coflow_id = coflow_of(value);
    if (!r->coflow_id) return kCoflowRange;
  } else {
    return "keys are dst, src, dport, sport, class, weight, tenant, deadline-ms, coflow";
  }
  return nullptr;
}

bool parse_rules(std::string_view text, std::vector<PolicyRule>* out, std::string* error) {
  std::size_t index = 0;
  while (!text.empty()) {
    const auto semi = text.find(';');
    std::string_view rule = text.substr(0, semi);
    text = semi == std::string_view::npos ? std::string_view() : text.substr(semi + 1);
    ++index;
    PolicyRule r;
    bool any = false;
    while (!rule.empty()) {
      const auto sep = rule.find_first_of(" ,\t");
      const std::string_view word = rule.substr(0, sep);
      rule = sep == std::string_view::npos ? std::string_view() : rule.substr(sep + 1);
      if (word.empty()) continue;
      const auto eq = word.find('=');
      const char* why = eq == std::string_view::npos
                            ? "a word is key=value"
                            : apply_word(word.substr(0, eq), word.substr(eq + 1), &r);
      if (why != nullptr) {
        *error = "FLOWTUNE_RULES: rule " + std::to_string(index) + ", '" + std::string(word) +
                 "': " + why;
        return false;
      }
      any = true;
    }
    if (any) out->push_back(std::move(r));  // empty rules (";;", a trailing ';') are nothing
  }
  return true;
}

bool set(const char* v) { return v != nullptr && *v != '\0'; }

}  // namespace

SocketPolicy PolicyConfig::for_socket(const SocketEnds& s) const {
  SocketPolicy p = defaults;
  for (const PolicyRule& r : rules) {
    if (r.src && !(s.v4 && r.src->contains(s.src))) continue;
    if (r.dst && !(s.v4 && r.dst->contains(s.dst))) continue;
    if (r.sport && !r.sport->contains(s.sport)) continue;
    if (r.dport && !r.dport->contains(s.dport)) continue;
    if (r.priority_class) p.priority_class = *r.priority_class;
    if (r.weight) p.weight = *r.weight;
    if (r.tenant) p.tenant = *r.tenant;
    if (r.deadline_ms) p.deadline_ms = *r.deadline_ms;
    if (r.coflow_id) p.coflow_id = *r.coflow_id;
    break;
  }
  return p;
}

PolicyEnv PolicyEnv::from_environment() {
  return {std::getenv("FLOWTUNE_CLASS"), std::getenv("FLOWTUNE_WEIGHT"),
          std::getenv("FLOWTUNE_TENANT"), std::getenv("FLOWTUNE_DEADLINE_MS"),
          std::getenv("FLOWTUNE_RULES"), std::getenv("FLOWTUNE_COFLOW")};
}

std::optional<PolicyConfig> parse_policy(const PolicyEnv& env, std::string* error) {
  PolicyConfig c;
  if (set(env.priority_class)) {
    const auto v = integer<int>(env.priority_class, 0, FT_NUM_CLASSES - 1);
    if (!v) {
      *error = std::string("FLOWTUNE_CLASS: '") + env.priority_class + "': a class is 0 (highest) to 7";
      return std::nullopt;
    }
    c.defaults.priority_class = *v;
  }
  if (set(env.weight)) {
    const auto v = weight_of(env.weight);
    if (!v) {
      *error = std::string("FLOWTUNE_WEIGHT: '") + env.weight + "': a weight is a number in [1e-6, 1e6]";
      return std::nullopt;
    }
    c.defaults.weight = *v;
  }
  if (set(env.tenant)) {
    if (!valid_tenant(env.tenant)) {
      *error = "FLOWTUNE_TENANT: a tenant is a name of 1-256 bytes";
      return std::nullopt;
    }
    c.defaults.tenant = env.tenant;
  }
  if (set(env.deadline_ms)) {
    const auto v = integer<std::uint32_t>(env.deadline_ms, 1, kMaxDeadlineMs);
    if (!v) {
      *error = std::string("FLOWTUNE_DEADLINE_MS: '") + env.deadline_ms +
               "': a deadline is 1 to 86400000 ms";
      return std::nullopt;
    }
    c.defaults.deadline_ms = *v;
  }
  if (set(env.coflow)) {
    const auto v = coflow_of(env.coflow);
    if (!v) {
      *error = std::string("FLOWTUNE_COFLOW: '") + env.coflow + "': " + kCoflowRange;
      return std::nullopt;
    }
    c.defaults.coflow_id = *v;
  }
  if (set(env.rules) && !parse_rules(env.rules, &c.rules, error)) return std::nullopt;
  return c;
}

}  // namespace flowtune::preload
