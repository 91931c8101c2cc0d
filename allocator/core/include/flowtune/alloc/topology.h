// Topologies the engine allocates over: a big switch, a two-tier Clos, or an
// explicit list of links. A topology owns link capacities and turns a
// (source host, destination host, flow hash) into a path of 1-4 link ids, and
// names the "site" (rack) of each host so the engine can partition flows into
// FlowBlocks (paper §4). It holds no flow state.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "flowtune/common/assert.h"

namespace flowtune::alloc {

using LinkId = std::uint32_t;
using HostId = std::uint32_t;

inline constexpr int kMaxPathLinks = 4;

// A flow's path: link ids in travel order (host up, ToR up, ToR down, host down).
struct Path {
  std::array<LinkId, kMaxPathLinks> links{};
  std::uint8_t size = 0;

  void push(LinkId l) {
    FT_ASSERT(size < kMaxPathLinks, "a path holds at most 4 links", l);
    links[size++] = l;
  }
  const LinkId* begin() const { return links.data(); }
  const LinkId* end() const { return links.data() + size; }
};

// The fields an ECMP hash covers. Addresses and ports in host byte order.
struct FiveTuple {
  std::uint32_t src_ip = 0;
  std::uint32_t dst_ip = 0;
  std::uint16_t src_port = 0;
  std::uint16_t dst_port = 0;
  std::uint8_t protocol = 6;
};

// ECMP-style hash of a 5-tuple (a 64-bit mix, stable across releases and
// platforms: endpoints and the allocator must agree on it).
std::uint64_t ecmp_hash(const FiveTuple& t);

enum class TopologyKind { kExplicit, kBigSwitch, kTwoTier };

// The LinkBlock a link belongs to (paper §4, Fig. 4): the upward links of a
// site (host -> ToR, ToR -> spine) are crossed only by flows from that
// site, the downward ones (spine -> ToR, ToR -> host) only by flows to it.
struct LinkSite {
  std::uint32_t site = 0;
  bool up = true;
};

struct TwoTierSpec {
  std::uint32_t racks = 9;
  std::uint32_t hosts_per_rack = 16;
  std::uint32_t spines = 4;
  double host_link_bps = 10e9;
  // ToR<->spine link capacity; 0 means full bisection:
  // hosts_per_rack * host_link_bps / spines.
  double spine_link_bps = 0;
};

class Topology {
 public:
  // Throws std::invalid_argument on non-positive sizes or capacities, and on
  // networks of more than kMaxHosts hosts.
  static constexpr std::uint32_t kMaxHosts = 1u << 24;
  static Topology big_switch(std::uint32_t hosts, double host_link_bps);
  static Topology two_tier(const TwoTierSpec& spec);
  // Links only; paths are given per flow. num_sites is 1.
  static Topology explicit_links(std::vector<double> capacities_bps);

  TopologyKind kind() const { return kind_; }
  std::size_t num_links() const { return capacity_bps_.size(); }
  double capacity_bps(LinkId l) const { return capacity_bps_[l]; }
  const std::vector<double>& capacities_bps() const { return capacity_bps_; }
  std::string link_name(LinkId l) const;

  std::uint32_t num_hosts() const { return hosts_; }
  std::uint32_t num_spines() const { return spines_; }
  // Sites partition hosts for FlowBlocks: racks in a two-tier network, hosts in
  // a big switch, a single site for explicit topologies.
  std::uint32_t num_sites() const { return sites_; }
  std::uint32_t site_of_host(HostId h) const;

  // Every link's LinkBlock, in link order. An explicit topology (one site)
  // holds all its links upward of site 0.
  std::vector<LinkSite> link_sites() const;

  LinkId host_uplink(HostId h) const;
  LinkId host_downlink(HostId h) const;

  // Path from src to dst; in a two-tier network an inter-rack flow's spine is
  // flow_hash % spines. Requires src != dst, both < num_hosts(), and a
  // non-explicit topology.
  Path path(HostId src, HostId dst, std::uint64_t flow_hash) const;
  // Same with the spine given explicitly (ignored within a rack or a big switch).
  Path path_via(HostId src, HostId dst, std::uint32_t spine) const;

 private:
  TopologyKind kind_ = TopologyKind::kExplicit;
  std::vector<double> capacity_bps_;
  std::uint32_t hosts_ = 0;
  std::uint32_t hosts_per_rack_ = 1;
  std::uint32_t racks_ = 0;
  std::uint32_t spines_ = 0;
  std::uint32_t sites_ = 1;
};

}  // namespace flowtune::alloc
