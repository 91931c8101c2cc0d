// The network the allocator schedules: a Topology (links and capacities) plus
// the names and IPv4 addresses that map an endpoint's view of a flow (its
// host identity, a 5-tuple) onto host ids and paths. Loaded from a TOML file
// (docs/topology.md has the format) or built from flags as a big switch.
//
// Unknown hosts: a big switch may reserve spare host slots; add_host() then
// places a newly seen host in the next free slot with the default capacity,
// so the engine's links never change after start-up. release_host() gives an
// added host's slot back once nothing uses it (the allocator counts its
// endpoints and flows), so peers that come and go cannot use up the slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "flowtune/alloc/topology.h"
#include "flowtune/common/ipv4.h"

namespace flowtune::daemon {

// A configuration error: the message names the file, line and key at fault.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// parse_ipv4() and format_ipv4() are flowtune/common/ipv4.h's.

class Network {
 public:
  // A big switch of `hosts` configured hosts named h0..h{n-1}, plus `spare`
  // slots for add_host(). Throws ConfigError on bad sizes or capacity.
  static Network big_switch(std::uint32_t hosts, double host_link_bps, std::uint32_t spare = 0);
  // Throws ConfigError (file:line: key: reason) on any error.
  static Network from_toml_file(const std::string& path);
  static Network from_toml_string(std::string_view text, const std::string& source_name);

  const alloc::Topology& topology() const { return topology_; }
  // Host ids are below this (configured, added, and slots released since).
  std::uint32_t num_hosts() const { return num_hosts_; }
  // Hosts a name or address finds now: configured plus added, less released.
  std::uint32_t live_hosts() const { return num_hosts_ - static_cast<std::uint32_t>(free_.size()); }
  // Whether id `h` names a host now (not a released slot).
  bool has_host(alloc::HostId h) const { return h < num_hosts_ && !host_names_[h].empty(); }
  const std::string& host_name(alloc::HostId h) const { return host_names_[h]; }

  // A host by name, or by any of its IPv4 addresses in dotted-quad form.
  std::optional<alloc::HostId> find_host(std::string_view name_or_ip) const;
  std::optional<alloc::HostId> find_host_by_ip(std::uint32_t ip) const;
  // Adds a host (named `name`; if `name` is a dotted quad it is also the
  // host's address) in the next spare slot. nullopt when no slot is left.
  std::optional<alloc::HostId> add_host(std::string_view name);
  // Frees the slot of a host add_host() placed, forgetting its name and
  // address (a later add_host() may reuse the id); false, and nothing
  // changes, for a configured host or an id that names none.
  bool release_host(alloc::HostId h);
  std::uint32_t spare_slots() const;

  // Path of a flow between two known, distinct hosts; hash picks the ECMP
  // spine in a two-tier network. nullopt when the explicit topology has no
  // route between them.
  std::optional<alloc::Path> path(alloc::HostId src, alloc::HostId dst, std::uint64_t hash) const;
  // FlowBlock sites (racks) of a host, for alloc::FlowSpec.
  std::uint32_t site_of_host(alloc::HostId h) const;

  std::string link_name(alloc::LinkId l) const;

 private:
  // Reads a parsed TOML document into a Network (network.cc); nested so that
  // toml++ stays out of this header.
  struct Loader;
  // Lets find_host() look names up by string_view without a copy.
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  alloc::Topology topology_;
  std::uint32_t num_hosts_ = 0;
  std::vector<std::string> host_names_;  // "" for a released slot
  std::vector<bool> added_;                // by id: placed by add_host()
  std::vector<alloc::HostId> free_;        // released slots, reused first
  std::unordered_map<std::string, alloc::HostId, NameHash, std::equal_to<>> by_name_;
  std::unordered_map<std::uint32_t, alloc::HostId> by_ip_;
  // Explicit topologies: each host's uplink/downlink, link names, and routes
  // (extra links between a source's uplink and a destination's downlink).
  std::vector<alloc::LinkId> explicit_up_;
  std::vector<alloc::LinkId> explicit_down_;
  std::vector<std::string> link_names_;
  std::unordered_map<std::uint64_t, std::vector<alloc::LinkId>> routes_;  // key src<<32|dst
  bool explicit_default_route_ = true;
};

}  // namespace flowtune::daemon
