// What every TOML file the daemon reads (topology, policy) reports on an
// error: the file, the line of the node at fault and the key path, because a
// config error is fixed by a person reading the message. Typos must not fall
// back to defaults, so every table lists the keys it accepts.
#pragma once

#include <toml++/toml.h>

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
