#include "flowtune/daemon/config_file.h"

#include <algorithm>
#include <charconv>

#include "toml_reader.h"

namespace flowtune::daemon {

namespace {

// Flags that take no value.
bool is_switch_flag(std::string_view key) { return key == "mpi"; }

std::string fail_at(const std::string& path, std::uint32_t line, std::string_view key, const std::string& why) {
  return path + ":" + std::to_string(line) + ": key '" + std::string(key) + "': " + why;
}

std::string shortest(double d) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, d);
  return std::string(buf, r.ptr);
}

// A scalar as the flag's value text; false when the node is not one.
bool scalar_text(const toml::node& n, std::string* out) {
  if (const auto* s = n.as_string()) *out = s->get();
  else if (const auto* i = n.as_integer()) *out = std::to_string(i->get());
  else if (const auto* f = n.as_floating_point()) *out = shortest(f->get());
  else if (const auto* b = n.as_boolean()) *out = b->get() ? "on" : "off";
  else return false;
  return true;
}

// One key's entry (a switch set to false gives none).
void add_entry(const std::string& path, std::string_view key, const toml::node& n, std::vector<ConfigEntry>* out) {
  const auto line = static_cast<std::uint32_t>(n.source().begin.line);
  if (key == "config" || key == "check-config" || key == "help" || key.starts_with("-")) {
    throw ConfigError(fail_at(path, line, key, "not a setting a file can hold"));
  }
  ConfigEntry e{std::string(key), "--" + std::string(key), {}, line, is_switch_flag(key)};
  if (e.is_switch) {
    const auto* b = n.as_boolean();
    if (b == nullptr) throw ConfigError(fail_at(path, line, key, "a switch: true or false"));
    if (b->get()) out->push_back(e);
    return;
  }
  if (const auto* a = n.as_array()) {
    for (std::size_t i = 0; i < a->size(); ++i) {
      std::string item;
      if (!scalar_text(*a->get(i), &item)) throw ConfigError(fail_at(path, line, key, "an array of strings or numbers"));
      e.value += (i == 0 ? "" : ",") + item;
    }
  } else if (!scalar_text(n, &e.value)) {
    throw ConfigError(fail_at(path, line, key, "a string, number, boolean or array"));
  }
  out->push_back(std::move(e));
}

}  // namespace

std::vector<ConfigEntry> read_config_file(const std::string& path) {
  constexpr std::size_t kMaxBytes = 1 << 20;
  const toml::table doc = TomlReader::parse(TomlReader::read_file(path, kMaxBytes), path);
  std::vector<ConfigEntry> out;
  for (const auto& [key, node] : doc) {
    if (const auto* t = node.as_table()) {
      for (const auto& [inner, n] : *t) {
        if (n.is_table() || n.is_array_of_tables()) {
          throw ConfigError(fail_at(path, static_cast<std::uint32_t>(n.source().begin.line), inner.str(),
                                    "tables group keys one level deep only"));
        }
        add_entry(path, inner.str(), n, &out);
      }
      continue;
    }
    add_entry(path, key.str(), node, &out);
  }
  // The document's order is by key; a person reads the file in line order.
  std::stable_sort(out.begin(), out.end(), [](const ConfigEntry& a, const ConfigEntry& b) { return a.line < b.line; });
  for (std::size_t i = 0; i < out.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (out[j].key == out[i].key) {
        throw ConfigError(fail_at(path, out[i].line, out[i].key, "given again (first on line " +
                                                                     std::to_string(out[j].line) + ")"));
      }
    }
  }
  return out;
}

std::string where(const std::string& path, const ConfigEntry& e) {
  return path + ":" + std::to_string(e.line) + ": key '" + e.key + "'";
}

}  // namespace flowtune::daemon
