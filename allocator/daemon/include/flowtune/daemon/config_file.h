// flowtune-allocator --config FILE.toml: the daemon's flags as a file.
// Every key is a flag's name without the dashes, with the flag's value:
//
//   listen = "tcp://0.0.0.0:5555"
//   [engine]                 # tables only group keys; their names are free
//   threads = 4
//   early-rates = "on"       # or true / false
//   [relays]
//   relay-from = ["10.1.0.0/16", "10.2.0.0/16"]
//
// A string, integer or float is the flag's value; an array is joined with
// commas (as --relay-from takes it); true on a switch (mpi) gives the
// switch and false leaves it out; on any other flag true and false are
// "on" and "off". The daemon then parses these as flags, before its command
// line, so a flag given on the command line overrides the file's key, and a
// bad value is refused as the flag's would be, naming the file, line and key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flowtune::daemon {

struct ConfigEntry {
  std::string key;    // as written ("threads"; a table's keys without the table)
  std::string flag;   // "--threads"
  std::string value;  // "" for a switch
  std::uint32_t line = 0;
  bool is_switch = false;
};

// The file's entries in file order. Throws ConfigError "FILE:LINE: key
// 'K': why" for a key no flag can take (nested tables, dates, "config",
// "check-config", "help"), and "FILE:LINE:COL: why" for bad TOML.
std::vector<ConfigEntry> read_config_file(const std::string& path);

// "FILE:LINE: key 'K'", for errors about an entry's value.
std::string where(const std::string& path, const ConfigEntry& e);

}  // namespace flowtune::daemon
