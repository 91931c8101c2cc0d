#include "flowtune/daemon/auth.h"

#include <dirent.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "flowtune/common/curve.h"
#include "flowtune/daemon/network.h"
#include "toml_reader.h"

namespace flowtune::daemon {
namespace {

constexpr std::size_t kMaxKeyFileBytes = curve::kMaxKeyFileBytes;
constexpr std::size_t kMaxHostsPerKey = 4096;
constexpr std::string_view kSuffix = ".pub";

// The NAME.pub files of `dir`, sorted (so errors and names are stable).
std::vector<std::string> key_files(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) throw ConfigError(dir + ": cannot open the key directory: " + std::strerror(errno));
  std::vector<std::string> names;
  while (const dirent* ent = ::readdir(d.get())) {
    const std::string_view n = ent->d_name;
    if (n.size() > kSuffix.size() && n.substr(n.size() - kSuffix.size()) == kSuffix) {
      names.emplace_back(n);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// One allow-list entry: `public-key = "Z85"` and, for an endpoint key,
// `hosts = ["h1", "10.0.0.2"]` or `["*"]`.
Principal read_entry(const std::string& path, std::string name, bool needs_hosts) {
  const TomlReader r{path};
  const toml::table t = TomlReader::parse(TomlReader::read_file(path, kMaxKeyFileBytes), path);
  r.check_keys(t, "", {"public-key", "secret-key", "hosts", "relay"});
  if (t.get("secret-key") != nullptr) {
    // An allow-list is read by the allocator only, but a secret there has
    // been copied where it does not belong: say so rather than use it.
    r.fail(t.get("secret-key"), "secret-key", "an allow-list holds public keys only (NAME.pub)");
  }
  Principal p;
  p.name = std::move(name);
  const toml::node* key = t.get("public-key");
  if (key == nullptr || !key->is_string()) r.fail(key, "public-key", "expected the key, a string");
  p.key = key->as_string()->get();
  if (std::string why = curve::key_error(p.key); !why.empty()) r.fail(key, "public-key", why);
  if (const toml::node* relay = t.get("relay"); relay != nullptr) {
    if (!needs_hosts) r.fail(relay, "relay", "only an endpoint key (--curve-clients) can be a relay's");
    if (!relay->is_boolean()) r.fail(relay, "relay", "expected true or false");
    p.relay = relay->as_boolean()->get();
  }
  const toml::node* hosts = t.get("hosts");
  if (hosts == nullptr) {
    if (needs_hosts) {
      r.fail(nullptr, "hosts",
             "an endpoint key must name the hosts it speaks for (hosts = [\"h1\"], or [\"*\"])");
    }
    return p;
  }
  const toml::array* list = hosts->as_array();
  if (list == nullptr || list->empty() || list->size() > kMaxHostsPerKey) {
    r.fail(hosts, "hosts", "expected a list of 1 to 4096 host names or addresses");
  }
  for (const toml::node& h : *list) {
    const auto* s = h.as_string();
    if (s == nullptr || s->get().empty() || s->get().size() > 255) {
      r.fail(&h, "hosts", "expected host names or addresses (strings of 1-255 bytes)");
    }
    if (s->get() == "*") p.any_host = true;
    else p.hosts.push_back(s->get());
  }
  return p;
}

}  // namespace

KeyRing KeyRing::load(const AuthConfig& c) {
  KeyRing ring;
  if (!c.clients_dir.empty()) ring.read_dir(c.clients_dir, kRoleEndpoint);
  if (!c.ctl_dir.empty()) ring.read_dir(c.ctl_dir, kRoleRead);
  if (!c.admin_dir.empty()) ring.read_dir(c.admin_dir, kRoleAdmin);
  return ring;
}

void KeyRing::read_dir(const std::string& dir, Role role) {
  std::unordered_map<std::string, std::string> here;  // key -> file, this directory
  for (const std::string& file : key_files(dir)) {
    const std::string path = dir + "/" + file;
    Principal p = read_entry(path, file.substr(0, file.size() - kSuffix.size()),
                             role == kRoleEndpoint);
    if (auto [it, fresh] = here.emplace(p.key, file); !fresh) {
      throw ConfigError(path + ": the same key as " + it->second);
    }
    if (by_key_.size() >= kMaxKeys) {
      throw ConfigError(dir + ": more than " + std::to_string(kMaxKeys) + " keys in all");
    }
    KeyEntry& e = by_key_[p.key];
    const std::uint8_t roles = role == kRoleAdmin ? (kRoleAdmin | kRoleRead) : role;
    if (e.roles == 0 || role == kRoleEndpoint) {
      // The endpoint list's entry carries the hosts; a ctl list's only
      // names the key when no endpoint list does.
      const std::uint8_t had = e.roles;
      e.principal = std::move(p);
      e.roles = had;
    }
    e.roles |= roles;
  }
}

const KeyEntry* KeyRing::find(std::string_view z85) const {
  const auto it = by_key_.find(std::string(z85));
  return it == by_key_.end() ? nullptr : &it->second;
}

std::size_t KeyRing::count(Role r) const {
  return static_cast<std::size_t>(std::count_if(
      by_key_.begin(), by_key_.end(), [r](const auto& kv) { return (kv.second.roles & r) != 0; }));
}

}  // namespace flowtune::daemon
