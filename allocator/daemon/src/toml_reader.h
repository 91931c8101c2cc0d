// What every TOML file the daemon reads (topology, policy) reports on an
// error: the file, the line of the node at fault and the key path, because a
// config error is fixed by a person reading the message. Typos must not fall
// back to defaults, so every table lists the keys it accepts.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <toml++/toml.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>

#include "flowtune/daemon/network.h"

namespace flowtune::daemon {

struct TomlReader {
  std::string source;

  // The document, or ConfigError "SOURCE:LINE:COLUMN: what".
  static toml::table parse(std::string_view text, const std::string& source) {
    try {
      return toml::parse(text, source);
    } catch (const toml::parse_error& e) {
      throw ConfigError(source + ":" + std::to_string(e.source().begin.line) + ":" +
                        std::to_string(e.source().begin.column) + ": " +
                        std::string(e.description()));
    }
  }

  // The whole of `path`, or ConfigError: it must be a regular file (a FIFO
  // would block the daemon's start forever, /dev/zero would fill its
  // memory) of at most `max_bytes`.
  static std::string read_file(const std::string& path, std::size_t max_bytes) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) throw ConfigError(path + ": cannot open: " + std::strerror(errno));
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw ConfigError(path + ": cannot stat: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw ConfigError(path + ": not a regular file");
    std::string text;
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw ConfigError(path + ": cannot read: " + std::strerror(errno));
      if (n == 0) return text;
      if (text.size() + static_cast<std::size_t>(n) > max_bytes) {
        throw ConfigError(path + ": larger than " + std::to_string(max_bytes) + " bytes");
      }
      text.append(buf, static_cast<std::size_t>(n));
    }
  }

  static std::string join(std::string_view path, std::string_view key) {
    return path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
  }

  [[noreturn]] void fail(const toml::node* at, std::string_view key,
                         std::string_view reason) const {
    std::string msg = source;
    if (at != nullptr && at->source().begin.line > 0) {
      msg += ":" + std::to_string(at->source().begin.line);
    }
    msg += ": ";
    if (!key.empty()) msg += std::string(key) + ": ";
    msg += reason;
    throw ConfigError(msg);
  }

  void check_keys(const toml::table& t, std::string_view path,
                  std::initializer_list<std::string_view> allowed) const {
    for (auto&& [k, v] : t) {
      bool known = false;
      for (std::string_view a : allowed) known = known || k.str() == a;
      if (known) continue;
      std::string list;
      for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      fail(&v, join(path, k.str()), "unknown key (allowed: " + list + ")");
    }
  }
};

}  // namespace flowtune::daemon
