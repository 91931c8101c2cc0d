// ZeroMQ CURVE keys as Flowtune's tools keep them (docs/security.md).
//
// A key file is text: `public-key = "Z85"` and, in a secret file,
// `secret-key = "Z85"` (40 characters each, libzmq's Z85), `#` comments, and
// in an allow-list entry `hosts = [...]` (read by the allocator only). The
// secret file must not be readable or writable by others: a key anyone on
// the machine can read authenticates anyone.
//
// Clients (libflowtune, flowtune-run, flowtune-pacer, flowtune-ctl) turn
// CURVE on when they are given the allocator's public key
// (FLOWTUNE_CURVE_SERVER: the key or its file) and then need their own pair
// (FLOWTUNE_CURVE_KEY: a secret file; or FLOWTUNE_CURVE_SECRET: the secret
// key itself, whose public half is derived).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <string_view>

#include <zmq.h>

#include "flowtune/common/result.h"
#include "flowtune/common/sys.h"

namespace flowtune::curve {

inline constexpr std::size_t kZ85KeyChars = 40;
// Key files are a few lines; anything longer is not one.
inline constexpr std::size_t kMaxKeyFileBytes = 64 * 1024;

struct KeyPair {
  std::string public_key;  // Z85
  std::string secret_key;  // Z85; empty in a public file
};

// What a client needs to speak CURVE to the allocator.
struct ClientKeys {
  std::string server_public;
  KeyPair own;
  // Where server_public was read from (empty: given as the key itself).
  // A client follows the file when the allocator's key rotates
  // (follow_server_key).
  std::string server_file;
};

// Empty if `z85` is a well-formed 40-character Z85 key; else why not.
inline std::string key_error(std::string_view z85) {
  if (z85.size() != kZ85KeyChars) {
    return "a key is " + std::to_string(kZ85KeyChars) + " Z85 characters, got " +
           std::to_string(z85.size());
  }
  std::uint8_t raw[32];
  const std::string s(z85);
  if (zmq_z85_decode(raw, s.c_str()) == nullptr) return "not a Z85 key";
  return {};
}

// The public half of a Z85 secret key; empty if libzmq cannot derive it.
inline std::string public_of(const std::string& secret_z85) {
  char pub[kZ85KeyChars + 1] = {};
  if (zmq_curve_public(pub, secret_z85.c_str()) != 0) return {};
  return pub;
}

namespace detail {

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The value of `name = "..."` in `text`, unquoted; empty if absent.
inline std::string field(const std::string& text, std::string_view name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::string_view l = trim(line);
    if (l.empty() || l.front() == '#') continue;
    const std::size_t eq = l.find('=');
    if (eq == std::string_view::npos || trim(l.substr(0, eq)) != name) continue;
    std::string_view v = trim(l.substr(eq + 1));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    return std::string(v);
  }
  return {};
}

}  // namespace detail

// The key pair in a key file, or why it cannot be used. With need_secret
// the file must hold a secret key matching its public key and be private to
// its owner. (Symbolic links are followed: secret stores mount keys that
// way.)
inline Result<KeyPair> load_key_file(const std::string& path, bool need_secret) {
  ReadBounds b{.max_bytes = kMaxKeyFileBytes, .too_large = "too large for a key file"};
  if (need_secret) {
    b.forbidden_mode = S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH;
    b.forbidden_why = "a secret key file must be private to its owner (chmod 600)";
  }
  Result<std::string> text = read_bounded(path, b);
  if (!text) return std::move(text).error();
  KeyPair k;
  k.public_key = detail::field(*text, "public-key");
  k.secret_key = detail::field(*text, "secret-key");
  const auto bad = [&](const std::string& why) { return fail(ErrorCause::kInvalid, path + ": " + why); };
  if (k.public_key.empty() && k.secret_key.empty()) return bad("holds no public-key or secret-key");
  if (need_secret && k.secret_key.empty()) return bad("holds no secret-key");
  if (!k.secret_key.empty()) {
    if (std::string e = key_error(k.secret_key); !e.empty()) return bad("secret-key: " + e);
    const std::string derived = public_of(k.secret_key);
    if (k.public_key.empty()) k.public_key = derived;
    if (k.public_key != derived) return bad("public-key is not the secret key's public half");
  }
  if (std::string e = key_error(k.public_key); !e.empty()) return bad("public-key: " + e);
  return k;
}

// A public key given as a key file or as its 40 Z85 characters. A file is
// looked for first: a path of 40 characters can be valid Z85 too. *file
// (if given) is set to the path when it was one, else cleared.
inline std::string read_public_key(const std::string& key_or_file, std::string* out,
                                   std::string* file = nullptr) {
  struct stat st{};
  const bool is_file = ::stat(key_or_file.c_str(), &st) == 0;
  if (file != nullptr) file->clear();
  if (!is_file && key_or_file.size() == kZ85KeyChars && key_error(key_or_file).empty()) {
    *out = key_or_file;
    return {};
  }
  Result<KeyPair> k = load_key_file(key_or_file, false);
  if (!k) return k.error().message;
  *out = k->public_key;
  if (file != nullptr) *file = key_or_file;
  return {};
}

// The allocator rotated its key (docs/security.md): a client whose
// connection failed reads the allocator's key file again. True when it now
// names another key, which *k then holds; false when it is unchanged; an
// Error when it cannot be read (the key in use stays).
inline Result<bool> follow_server_key(ClientKeys* k) {
  if (k->server_file.empty()) return false;
  std::string key;
  if (std::string e = read_public_key(k->server_file, &key); !e.empty()) {
    return fail(ErrorCause::kUnavailable, "the allocator's public key: " + e);
  }
  if (key == k->server_public) return false;
  k->server_public = key;
  return true;
}

// Whether a client speaks CURVE to the allocator, and with which keys.
struct ClientCurve {
  bool on = false;  // a server key was given (CURVE on)
  ClientKeys keys;  // when on
};

// Client keys from explicit values (empty: not given) falling back to the
// FLOWTUNE_CURVE_* variables. CURVE is off when no server key is given
// anywhere; an ErrorCause::kInvalid Error (or the key file's own) says why
// the keys given cannot be used.
inline Result<ClientCurve> client_keys(std::string server, std::string key_file) {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr ? v : "");
  };
  if (server.empty()) server = env("FLOWTUNE_CURVE_SERVER");
  if (key_file.empty()) key_file = env("FLOWTUNE_CURVE_KEY");
  const std::string secret = env("FLOWTUNE_CURVE_SECRET");
  const auto bad = [](std::string why) { return fail(ErrorCause::kInvalid, std::move(why)); };
  ClientCurve c;
  c.on = !server.empty();
  if (!c.on) {
    if (!key_file.empty() || !secret.empty()) {
      return bad(
          "a CURVE key was given but not the allocator's public key (FLOWTUNE_CURVE_SERVER)");
    }
    return c;
  }
  ClientKeys& k = c.keys;
  if (std::string why = read_public_key(server, &k.server_public, &k.server_file); !why.empty()) {
    return bad("the allocator's public key: " + why);
  }
  if (!key_file.empty()) {
    Result<KeyPair> own = load_key_file(key_file, true);
    if (!own) return std::move(own).error();
    k.own = std::move(own).value();
  } else if (!secret.empty()) {
    if (std::string why = key_error(secret); !why.empty()) {
      return bad("FLOWTUNE_CURVE_SECRET: " + why);
    }
    k.own = {public_of(secret), secret};
  } else {
    return bad("CURVE needs this client's key too (FLOWTUNE_CURVE_KEY or FLOWTUNE_CURVE_SECRET)");
  }
  return c;
}

// Makes a client socket speak CURVE with `k`; before connect. 0 or errno.
inline int apply_client(void* socket, const ClientKeys& k) {
  if (zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, k.server_public.c_str(), kZ85KeyChars) != 0 ||
      zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, k.own.public_key.c_str(), kZ85KeyChars) != 0 ||
      zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, k.own.secret_key.c_str(), kZ85KeyChars) != 0) {
    return zmq_errno();
  }
  return 0;
}

// Connects `socket` to `endpoint` again with keys `k`: libzmq applies
// security options only to connections made after them, so a new server
// key needs a disconnect and a connect. 0, or the zmq errno of the step
// that failed (the socket may then hold no connection to `endpoint`; the
// caller's retry covers it). A disconnect that finds no connection is not
// a failure.
inline int reconnect(void* socket, const ClientKeys& k, const std::string& endpoint) {
  if (int e = apply_client(socket, k); e != 0) return e;
  (void)zmq_disconnect(socket, endpoint.c_str());
  if (zmq_connect(socket, endpoint.c_str()) != 0) return zmq_errno();
  return 0;
}

// A new key pair, or empty members when libzmq has no CURVE.
inline KeyPair generate() {
  char pub[kZ85KeyChars + 1] = {};
  char sec[kZ85KeyChars + 1] = {};
  if (zmq_curve_keypair(pub, sec) != 0) return {};
  return {pub, sec};
}

}  // namespace flowtune::curve
