#include "flowtune/daemon/network.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>

#include "flowtune/common/assert.h"
#include "toml_reader.h"

namespace flowtune::daemon {
namespace {

using alloc::HostId;
using alloc::LinkId;
using alloc::Topology;

constexpr std::size_t kMaxNameLength = 64;
constexpr const char* kKinds = R"("big_switch", "two_tier" or "explicit")";

// Names show up in logs and on the command line, so they must be printable as
// one word.
bool valid_name(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameLength) return false;
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (std::isspace(u) || std::iscntrl(u)) return false;
  }
  return true;
}

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

const char* type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a floating-point number";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
      return "a date/time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

std::string indexed(std::string_view path, std::size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

std::uint64_t route_key(HostId src, HostId dst) { return (std::uint64_t{src} << 32) | dst; }

}  // namespace

// Reads one document. Every check reports the file, the line of the node at
// fault (or of its table when a key is missing) and the key path, because a
// config error is fixed by a person reading the message, not by a program.
struct Network::Loader : TomlReader {
  Network net;
  // Where each name set in the file came from, for errors. Sparse: a
  // two-tier network may have millions of hosts with default names.
  struct Source {
    const toml::node* node;
    std::string key;
  };
  std::unordered_map<HostId, Source> name_source;

  const toml::node& require(const toml::table& t, std::string_view path,
                            std::string_view key) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) fail(&t, join(path, key), "missing");
    return *n;
  }

  [[noreturn]] void wrong_type(const toml::node& n, std::string_view key,
                               std::string_view expected) const {
    fail(&n, key, "expected " + std::string(expected) + ", got " + type_name(n));
  }

  // An integer in [lo, hi]; `dflt` when absent, or an error when there is none.
  std::uint32_t count(const toml::table& t, std::string_view path, std::string_view key,
                      std::uint32_t lo, std::uint32_t hi,
                      std::optional<std::uint32_t> dflt = std::nullopt) const {
    if (dflt && t.get(key) == nullptr) return *dflt;
    const toml::node& n = require(t, path, key);
    std::string full = join(path, key);
    const auto* v = n.as_integer();
    if (v == nullptr) wrong_type(n, full, "an integer");
    std::int64_t x = v->get();
    if (x < lo || x > hi) {
      fail(&n, full,
           std::to_string(x) + " is out of range [" + std::to_string(lo) + ", " +
               std::to_string(hi) + "]");
    }
    return static_cast<std::uint32_t>(x);
  }

  // A link capacity in Gbit/s (integer or fractional), returned in bit/s.
  // `allow_zero` is for values where 0 means "derive it".
  double gbps(const toml::node& n, std::string_view key, bool allow_zero = false) const {
    double g = 0;
    if (const auto* i = n.as_integer()) {
      g = static_cast<double>(i->get());
    } else if (const auto* f = n.as_floating_point()) {
      g = f->get();
    } else {
      wrong_type(n, key, "a number of Gbit/s");
    }
    if (allow_zero && g == 0) return 0;
    if (!std::isfinite(g) || g <= 0) {
      fail(&n, key, number(g) + " Gbit/s: must be a finite number > 0");
    }
    check_capacity(g * 1e9, &n, key);
    return g * 1e9;
  }

  // Uses the engine's own range check, so the accepted range is stated once
  // (topology.cc), and reports it at the key that set the capacity.
  void check_capacity(double bps, const toml::node* at, std::string_view key) const {
    try {
      (void)Topology::explicit_links({bps});
    } catch (const std::invalid_argument& e) {
      fail(at, key, number(bps / 1e9) + " Gbit/s: " + e.what());
    }
  }

  std::string read_string(const toml::node& n, std::string_view key) const {
    const auto* s = n.as_string();
    if (s == nullptr) wrong_type(n, key, "a string");
    return s->get();
  }

  std::string read_name(const toml::node& n, std::string_view key) const {
    std::string s = read_string(n, key);
    if (!valid_name(s)) {
      fail(&n, key,
           quoted(s) + " is not a valid name (1-" + std::to_string(kMaxNameLength) +
               " characters, no whitespace)");
    }
    return s;
  }

  // An optional array of tables ([[key]]); nullptr when absent.
  const toml::array* tables(const toml::table& t, std::string_view key) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) return nullptr;
    const toml::array* a = n->as_array();
    if (a == nullptr || (!a->empty() && !a->is_array_of_tables())) {
      wrong_type(*n, key, "an array of tables ([[" + std::string(key) + "]])");
    }
    return a;
  }

  void load(const toml::table& root) {
    const toml::node* kn = root.get("kind");
    if (kn == nullptr) fail(&root, "kind", std::string("missing; one of ") + kKinds);
    const toml::node& k = *kn;
    std::string kind = read_string(k, "kind");
    if (kind == "big_switch") {
      load_big_switch(root);
    } else if (kind == "two_tier") {
      load_two_tier(root);
    } else if (kind == "explicit") {
      load_explicit(root);
    } else {
      fail(&k, "kind", quoted(kind) + " is not one of " + kKinds);
    }
  }

  void load_big_switch(const toml::table& root) {
    check_keys(root, "", {"kind", "host_gbps", "hosts", "spare_hosts", "host"});
    std::uint32_t hosts = count(root, "", "hosts", 1, Topology::kMaxHosts);
    std::uint32_t spare = count(root, "", "spare_hosts", 0, Topology::kMaxHosts, 0);
    double bps = gbps(require(root, "", "host_gbps"), "host_gbps");
    if (std::uint64_t{hosts} + spare > Topology::kMaxHosts) {
      fail(root.get("spare_hosts"), "spare_hosts",
           "hosts + spare_hosts exceeds " + std::to_string(Topology::kMaxHosts));
    }
    try {
      net = Network::big_switch(hosts, bps, spare);
    } catch (const ConfigError& e) {
      fail(root.get("hosts"), "hosts", e.what());
    }
    load_named_hosts(root);
  }

  void load_two_tier(const toml::table& root) {
    check_keys(root, "",
               {"kind", "racks", "hosts_per_rack", "spines", "host_gbps", "spine_gbps", "host"});
    alloc::TwoTierSpec spec;
    spec.racks = count(root, "", "racks", 1, Topology::kMaxHosts);
    spec.hosts_per_rack = count(root, "", "hosts_per_rack", 1, Topology::kMaxHosts);
    spec.spines = count(root, "", "spines", 1, Topology::kMaxHosts);
    spec.host_link_bps = gbps(require(root, "", "host_gbps"), "host_gbps");
    if (const toml::node* s = root.get("spine_gbps")) {
      spec.spine_link_bps = gbps(*s, "spine_gbps", /*allow_zero=*/true);
    }
    const std::uint64_t hosts = std::uint64_t{spec.racks} * spec.hosts_per_rack;
    if (hosts < 2 || hosts > Topology::kMaxHosts) {
      fail(root.get("hosts_per_rack"), "hosts_per_rack",
           "racks * hosts_per_rack = " + std::to_string(hosts) + " hosts; must be in [2, " +
               std::to_string(Topology::kMaxHosts) + "]");
    }
    if (spec.spine_link_bps == 0) {
      double full = spec.hosts_per_rack * spec.host_link_bps / spec.spines;
      check_capacity(full, root.get("spines"), "spine_gbps (full bisection: hosts_per_rack * "
                                               "host_gbps / spines)");
    }
    try {
      net.topology_ = Topology::two_tier(spec);
    } catch (const std::invalid_argument& e) {
      fail(root.get("kind"), "kind", e.what());
    }
    net.num_hosts_ = static_cast<std::uint32_t>(hosts);
    net.host_names_.resize(hosts);
    for (HostId h = 0; h < hosts; ++h) {
      net.host_names_[h] = "r" + std::to_string(h / spec.hosts_per_rack) + "h" +
                           std::to_string(h % spec.hosts_per_rack);
    }
    load_named_hosts(root);
  }

  // Non-explicit kinds: [[host]] entries rename hosts and give them addresses.
  void load_named_hosts(const toml::table& root) {
    const toml::array* entries = tables(root, "host");
    std::vector<std::pair<HostId, const toml::table*>> placed;
    std::unordered_map<HostId, std::size_t> entry_of;  // host -> [[host]] entry
    if (entries != nullptr) {
      for (std::size_t i = 0; i < entries->size(); ++i) {
        const toml::table& t = *(*entries)[i].as_table();
        std::string path = indexed("host", i);
        check_keys(t, path, {"name", "addresses", "index"});
        auto pos = static_cast<std::uint32_t>(std::min<std::size_t>(i, UINT32_MAX));
        if (t.get("index") == nullptr && pos >= net.num_hosts_) {
          fail(&t, path, "entry " + std::to_string(i) + " has no host (only " +
                             std::to_string(net.num_hosts_) + " hosts); give an index");
        }
        HostId h = count(t, path, "index", 0, net.num_hosts_ - 1, pos);
        if (auto [it, fresh] = entry_of.emplace(h, i); !fresh) {
          fail(t.get("index") ? t.get("index") : &t, join(path, "index"),
               "host " + std::to_string(h) + " is already configured by " +
                   indexed("host", it->second));
        }
        if (const toml::node* n = t.get("name")) {
          net.host_names_[h] = read_name(*n, join(path, "name"));
          name_source[h] = {n, join(path, "name")};
        }
        placed.emplace_back(h, &t);
      }
    }
    register_names();
    for (std::size_t i = 0; i < placed.size(); ++i) {
      load_addresses(*placed[i].second, indexed("host", i), placed[i].first);
    }
    register_name_addresses();
  }

  // Registers every host name, reporting a clash at whichever of the two
  // names came from the file (default names cannot clash with each other).
  void register_names() {
    net.by_name_.clear();
    for (HostId h = 0; h < net.num_hosts_; ++h) {
      const std::string& n = net.host_names_[h];
      auto [it, fresh] = net.by_name_.emplace(n, h);
      if (fresh) continue;
      HostId other = it->second;
      if (auto mine = name_source.find(h); mine != name_source.end()) {
        fail(mine->second.node, mine->second.key,
             quoted(n) + " is already the name of host " + std::to_string(other));
      }
      const Source& theirs = name_source.at(other);
      fail(theirs.node, theirs.key,
           quoted(n) + " is also the default name of host " + std::to_string(h));
    }
  }

  void load_addresses(const toml::table& t, std::string_view path, HostId h) {
    const toml::node* n = t.get("addresses");
    if (n == nullptr) return;
    std::string key = join(path, "addresses");
    const toml::array* a = n->as_array();
    if (a == nullptr) wrong_type(*n, key, "an array of strings");
    for (std::size_t i = 0; i < a->size(); ++i) {
      const toml::node& e = (*a)[i];
      std::string ekey = indexed(key, i);
      std::string s = read_string(e, ekey);
      std::optional<std::uint32_t> ip = parse_ipv4(s);
      if (!ip) fail(&e, ekey, quoted(s) + " is not an IPv4 address");
      auto [it, fresh] = net.by_ip_.emplace(*ip, h);
      if (!fresh) {
        fail(&e, ekey,
             s + " is already an address of host " + std::to_string(it->second) + " (" +
                 quoted(net.host_names_[it->second]) + ")");
      }
    }
  }

  // A host named by a dotted quad also has that address (as with add_host()),
  // so find_host() cannot give two answers for one string.
  void register_name_addresses() {
    for (HostId h = 0; h < net.num_hosts_; ++h) {
      std::optional<std::uint32_t> ip = parse_ipv4(net.host_names_[h]);
      if (!ip) continue;
      auto [it, fresh] = net.by_ip_.emplace(*ip, h);
      if (!fresh && it->second != h) {
        const Source& src = name_source.at(h);  // Default names are never dotted quads.
        fail(src.node, src.key,
             quoted(net.host_names_[h]) + " is already an address of host " +
                 std::to_string(it->second) + " (" + quoted(net.host_names_[it->second]) + ")");
      }
    }
  }

  void load_explicit(const toml::table& root) {
    check_keys(root, "", {"kind", "link", "host", "route", "default_route"});
    load_links(root);
    load_explicit_hosts(root);
    if (const toml::node* d = root.get("default_route")) {
      const auto* b = d->as_boolean();
      if (b == nullptr) wrong_type(*d, "default_route", "a boolean");
      net.explicit_default_route_ = b->get();
    }
    if (const toml::array* routes = tables(root, "route")) {
      for (std::size_t i = 0; i < routes->size(); ++i) {
        load_route(*(*routes)[i].as_table(), indexed("route", i));
      }
    }
  }

  void load_links(const toml::table& root) {
    const toml::array* links = tables(root, "link");
    if (links == nullptr || links->empty()) {
      fail(&root, "link", "an explicit topology needs at least one [[link]]");
    }
    std::vector<double> caps;
    std::unordered_map<std::string, std::string> seen;  // name -> key path
    for (std::size_t i = 0; i < links->size(); ++i) {
      const toml::table& t = *(*links)[i].as_table();
      std::string path = indexed("link", i);
      check_keys(t, path, {"name", "gbps"});
      const toml::node& n = require(t, path, "name");
      std::string nm = read_name(n, join(path, "name"));
      auto [it, fresh] = seen.emplace(nm, path);
      if (!fresh) {
        fail(&n, join(path, "name"), quoted(nm) + " is already the name of " + it->second);
      }
      caps.push_back(gbps(require(t, path, "gbps"), join(path, "gbps")));
      net.link_names_.push_back(std::move(nm));
    }
    net.topology_ = Topology::explicit_links(std::move(caps));
  }

  std::optional<LinkId> find_link(std::string_view link) const {
    for (LinkId l = 0; l < net.link_names_.size(); ++l) {
      if (net.link_names_[l] == link) return l;
    }
    return std::nullopt;
  }

  LinkId link_ref(const toml::table& t, std::string_view path, std::string_view key) const {
    const toml::node& n = require(t, path, key);
    return link_ref(n, join(path, key));
  }

  LinkId link_ref(const toml::node& n, std::string_view key) const {
    std::string s = read_string(n, key);
    std::optional<LinkId> l = find_link(s);
    if (!l) fail(&n, key, "no [[link]] named " + quoted(s));
    return *l;
  }

  void load_explicit_hosts(const toml::table& root) {
    const toml::array* hosts = tables(root, "host");
    if (hosts == nullptr || hosts->size() < 2) {
      fail(&root, "host", "an explicit topology needs at least two [[host]] entries");
    }
    if (hosts->size() > Topology::kMaxHosts) {
      fail(&root, "host", "more than " + std::to_string(Topology::kMaxHosts) + " hosts");
    }
    net.num_hosts_ = static_cast<std::uint32_t>(hosts->size());
    for (HostId h = 0; h < net.num_hosts_; ++h) {
      const toml::table& t = *(*hosts)[h].as_table();
      std::string path = indexed("host", h);
      check_keys(t, path, {"name", "addresses", "up", "down"});
      std::string nm = "h" + std::to_string(h);
      if (const toml::node* n = t.get("name")) {
        nm = read_name(*n, join(path, "name"));
        name_source[h] = {n, join(path, "name")};
      }
      net.host_names_.push_back(std::move(nm));
      net.explicit_up_.push_back(link_ref(t, path, "up"));
      net.explicit_down_.push_back(link_ref(t, path, "down"));
    }
    register_names();
    for (HostId h = 0; h < net.num_hosts_; ++h) {
      load_addresses(*(*hosts)[h].as_table(), indexed("host", h), h);
    }
    register_name_addresses();
  }

  HostId host_ref(const toml::table& t, std::string_view path, std::string_view key) const {
    const toml::node& n = require(t, path, key);
    std::string full = join(path, key);
    std::string s = read_string(n, full);
    std::optional<HostId> h = net.find_host(s);
    if (!h) fail(&n, full, "no [[host]] named " + quoted(s));
    return *h;
  }

  // The engine's Path holds at most kMaxPathLinks links and a link counted
  // twice would be charged twice for one flow, so both are checked here, once,
  // instead of on every path() call.
  void load_route(const toml::table& t, const std::string& path) {
    check_keys(t, path, {"src", "dst", "via"});
    HostId src = host_ref(t, path, "src");
    HostId dst = host_ref(t, path, "dst");
    if (src == dst) fail(t.get("dst"), join(path, "dst"), "a route needs two distinct hosts");
    std::vector<LinkId> via;
    std::vector<LinkId> full{net.explicit_up_[src]};
    if (const toml::node* v = t.get("via")) {
      std::string key = join(path, "via");
      const toml::array* a = v->as_array();
      if (a == nullptr) wrong_type(*v, key, "an array of link names");
      if (a->size() + 2 > alloc::kMaxPathLinks) {
        fail(v, key,
             std::to_string(a->size()) + " links plus the source's up and destination's down "
             "links exceed " + std::to_string(alloc::kMaxPathLinks) + " links per path");
      }
      for (std::size_t i = 0; i < a->size(); ++i) via.push_back(link_ref((*a)[i], indexed(key, i)));
    }
    full.insert(full.end(), via.begin(), via.end());
    // As in path(): hosts on one shared link cross it once.
    if (full.back() != net.explicit_down_[dst]) full.push_back(net.explicit_down_[dst]);
    for (std::size_t i = 0; i < full.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (full[i] == full[j]) {
          fail(&t, path,
               "path " + quoted(net.host_names_[src]) + " -> " + quoted(net.host_names_[dst]) +
                   " uses link " + quoted(net.link_names_[full[i]]) + " twice");
        }
      }
    }
    auto [it, fresh] = net.routes_.emplace(route_key(src, dst), std::move(via));
    if (!fresh) {
      fail(&t, path,
           "a route from " + quoted(net.host_names_[src]) + " to " +
               quoted(net.host_names_[dst]) + " is already given");
    }
  }
};

Network Network::big_switch(std::uint32_t hosts, double host_link_bps, std::uint32_t spare) {
  // Hosts may all arrive at run time (add_host), but a network of fewer than
  // two host slots could carry no flow.
  if (std::uint64_t{hosts} + spare < 2) {
    throw ConfigError("big switch: needs at least two hosts (configured plus spare)");
  }
  if (std::uint64_t{hosts} + spare > Topology::kMaxHosts) {
    throw ConfigError("big switch: hosts + spare slots exceed " +
                      std::to_string(Topology::kMaxHosts));
  }
  Network n;
  try {
    n.topology_ = Topology::big_switch(hosts + spare, host_link_bps);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("big switch: ") + e.what());
  }
  n.num_hosts_ = hosts;
  n.host_names_.reserve(hosts);
  for (HostId h = 0; h < hosts; ++h) {
    n.host_names_.push_back("h" + std::to_string(h));
    n.by_name_.emplace(n.host_names_.back(), h);
  }
  return n;
}

Network Network::from_toml_file(const std::string& path) {
  // A topology of 100,000 hosts is a few megabytes.
  constexpr std::size_t kMaxTopologyBytes = 64u << 20;
  return from_toml_string(TomlReader::read_file(path, kMaxTopologyBytes), path);
}

Network Network::from_toml_string(std::string_view text, const std::string& source_name) {
  const toml::table root = TomlReader::parse(text, source_name);
  Loader loader{{source_name}, Network{}, {}};
  loader.load(root);
  return std::move(loader.net);
}

std::optional<alloc::HostId> Network::find_host(std::string_view name_or_ip) const {
  if (auto it = by_name_.find(name_or_ip); it != by_name_.end()) return it->second;
  if (std::optional<std::uint32_t> ip = parse_ipv4(name_or_ip)) return find_host_by_ip(*ip);
  return std::nullopt;
}

std::optional<alloc::HostId> Network::find_host_by_ip(std::uint32_t ip) const {
  if (auto it = by_ip_.find(ip); it != by_ip_.end()) return it->second;
  return std::nullopt;
}

std::uint32_t Network::spare_slots() const {
  if (topology_.kind() == alloc::TopologyKind::kExplicit) return 0;
  return topology_.num_hosts() - num_hosts_ + static_cast<std::uint32_t>(free_.size());
}

std::optional<alloc::HostId> Network::add_host(std::string_view name) {
  if (std::optional<HostId> known = find_host(name)) return known;
  // Names arrive from endpoints; one that could not be written in a config
  // file is refused rather than registered.
  if (!valid_name(name) || spare_slots() == 0) return std::nullopt;
  HostId h = 0;
  if (!free_.empty()) {
    h = free_.back();
    free_.pop_back();
    host_names_[h] = name;
  } else {
    h = num_hosts_++;
    host_names_.emplace_back(name);
    added_.resize(num_hosts_, false);
  }
  added_[h] = true;
  by_name_.emplace(host_names_[h], h);
  if (std::optional<std::uint32_t> ip = parse_ipv4(name)) by_ip_.emplace(*ip, h);
  return h;
}

bool Network::release_host(alloc::HostId h) {
  if (h >= added_.size() || !added_[h]) return false;
  by_name_.erase(host_names_[h]);
  if (std::optional<std::uint32_t> ip = parse_ipv4(host_names_[h])) by_ip_.erase(*ip);
  host_names_[h].clear();
  added_[h] = false;
  free_.push_back(h);
  return true;
}

std::optional<alloc::Path> Network::path(alloc::HostId src, alloc::HostId dst,
                                         std::uint64_t hash) const {
  if (src == dst || src >= num_hosts_ || dst >= num_hosts_) return std::nullopt;
  if (topology_.kind() != alloc::TopologyKind::kExplicit) return topology_.path(src, dst, hash);
  alloc::Path p;
  auto it = routes_.find(route_key(src, dst));
  if (it == routes_.end() && !explicit_default_route_) return std::nullopt;
  p.push(explicit_up_[src]);
  if (it != routes_.end()) {
    for (LinkId l : it->second) p.push(l);
  }
  // Hosts on one shared link (the up of one is the down of the other) cross it
  // once; load_route() rejected every other repeat.
  if (p.links[p.size - 1] != explicit_down_[dst]) p.push(explicit_down_[dst]);
  return p;
}

std::uint32_t Network::site_of_host(alloc::HostId h) const {
  FT_ASSERT(h < num_hosts_, h, num_hosts_);
  // Explicit topologies are a single site (Topology::num_sites() is 1).
  if (topology_.kind() == alloc::TopologyKind::kExplicit) return 0;
  return topology_.site_of_host(h);
}

std::string Network::link_name(alloc::LinkId l) const {
  if (topology_.kind() == alloc::TopologyKind::kExplicit) {
    FT_ASSERT(l < link_names_.size(), l, link_names_.size());
    return link_names_[l];
  }
  // Host links by the host's name, so operators read "web1.up", not "host7.up".
  const std::uint32_t slots = topology_.num_hosts();
  if (l < 2 * slots && has_host(l % slots)) {
    return host_names_[l % slots] + (l < slots ? ".up" : ".down");
  }
  return topology_.link_name(l);
}

}  // namespace flowtune::daemon
