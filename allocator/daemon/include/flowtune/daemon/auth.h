// Who may talk to the allocator when CURVE is on (docs/security.md).
//
// The allocator holds a key pair (--curve-secret) and three allow-lists,
// each a directory of public key files (NAME.pub): endpoints
// (--curve-clients; each key bound to the hosts it may speak for),
// flowtune-ctl readers (--curve-ctl) and flowtune-ctl admins
// (--curve-admin; they may also reload). A key may sit in several lists and
// has the roles of all of them. The lists are re-read on SIGHUP and
// `flowtune-ctl reload`; a list that does not load leaves the old ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "flowtune/daemon/allocator.h"

namespace flowtune::daemon {

struct AuthConfig {
  std::string secret_file;  // the allocator's key pair; empty: CURVE off
  std::string clients_dir;  // endpoint keys, each with `hosts = [...]`
  std::string ctl_dir;      // read-only flowtune-ctl keys
  std::string admin_dir;    // flowtune-ctl keys that may also change state
  bool enabled() const { return !secret_file.empty(); }
};

enum Role : std::uint8_t { kRoleEndpoint = 1, kRoleRead = 2, kRoleAdmin = 4 };

struct KeyEntry {
  std::uint8_t roles = 0;
  Principal principal;  // key, name and (endpoint keys) hosts
};

// The allow-lists, by Z85 public key.
class KeyRing {
 public:
  // At most this many keys in all: the lists are read whole on each reload.
  static constexpr std::size_t kMaxKeys = 1u << 20;

  // Reads every NAME.pub in the configured directories. Throws ConfigError
  // naming the file and the reason (a malformed key, an endpoint key that
  // binds no host, a key listed twice in one directory).
  static KeyRing load(const AuthConfig& c);

  const KeyEntry* find(std::string_view z85) const;
  std::size_t count(Role r) const;
  std::size_t size() const { return by_key_.size(); }

 private:
  void read_dir(const std::string& dir, Role role);

  std::unordered_map<std::string, KeyEntry> by_key_;
};

}  // namespace flowtune::daemon
