#include "flowtune/alloc/topology.h"

#include <cmath>
#include <stdexcept>

#include "flowtune/common/assert.h"

namespace flowtune::alloc {
namespace {

// Link layout of a two-tier network with N hosts, R racks and S spines:
//   [0, N)                 host h -> its ToR           ("up")
//   [N, 2N)                ToR -> host h               ("down")
//   [2N, 2N + R*S)         ToR r -> spine k, at 2N + r*S + k
//   [2N + R*S, 2N + 2R*S)  spine k -> ToR r, at 2N + R*S + r*S + k
// A big switch is the first two ranges only.

// The engine's accepted capacity range (engine.h: kMinRateBps..kMaxRateBps).
void require_positive(double v, const char* what) {
  if (!(v >= 1e3 && v <= 1e15)) {
    throw std::invalid_argument(std::string(what) + " must be between 1e3 and 1e15 bits/s");
  }
}

std::uint64_t mix64(std::uint64_t x) {
  // SplitMix64 finalizer: full avalanche, so consecutive ports spread over spines.
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

std::uint64_t ecmp_hash(const FiveTuple& t) {
  std::uint64_t a = (std::uint64_t{t.src_ip} << 32) | t.dst_ip;
  std::uint64_t b = (std::uint64_t{t.src_port} << 24) | (std::uint64_t{t.dst_port} << 8) |
                    t.protocol;
  return mix64(mix64(a) ^ b);
}

Topology Topology::big_switch(std::uint32_t hosts, double host_link_bps) {
  if (hosts < 2) throw std::invalid_argument("a big switch needs at least 2 hosts");
  if (hosts > kMaxHosts) throw std::invalid_argument("too many hosts (at most 2^24)");
  require_positive(host_link_bps, "host link capacity");
  Topology t;
  t.kind_ = TopologyKind::kBigSwitch;
  t.hosts_ = hosts;
  t.racks_ = hosts;
  t.sites_ = hosts;
  t.capacity_bps_.assign(2 * std::size_t{hosts}, host_link_bps);
  return t;
}

Topology Topology::two_tier(const TwoTierSpec& s) {
  if (s.racks < 1 || s.hosts_per_rack < 1 || s.spines < 1) {
    throw std::invalid_argument("two-tier racks, hosts per rack and spines must be >= 1");
  }
  const std::uint64_t hosts = std::uint64_t{s.racks} * s.hosts_per_rack;
  if (hosts < 2) throw std::invalid_argument("a two-tier network needs at least 2 hosts");
  if (hosts > kMaxHosts) throw std::invalid_argument("too many hosts (at most 2^24)");
  if (std::uint64_t{s.racks} * s.spines > kMaxHosts) {
    throw std::invalid_argument("too many racks x spines (at most 2^24)");
  }
  require_positive(s.host_link_bps, "host link capacity");
  double spine_bps = s.spine_link_bps;
  if (spine_bps == 0) spine_bps = s.hosts_per_rack * s.host_link_bps / s.spines;
  require_positive(spine_bps, "spine link capacity");
  Topology t;
  t.kind_ = TopologyKind::kTwoTier;
  t.hosts_ = s.racks * s.hosts_per_rack;
  t.hosts_per_rack_ = s.hosts_per_rack;
  t.racks_ = s.racks;
  t.spines_ = s.spines;
  t.sites_ = s.racks;
  t.capacity_bps_.assign(2 * std::size_t{t.hosts_}, s.host_link_bps);
  t.capacity_bps_.resize(t.capacity_bps_.size() + 2 * std::size_t{s.racks} * s.spines,
                         spine_bps);
  return t;
}

Topology Topology::explicit_links(std::vector<double> capacities_bps) {
  for (double c : capacities_bps) require_positive(c, "link capacity");
  Topology t;
  t.kind_ = TopologyKind::kExplicit;
  t.capacity_bps_ = std::move(capacities_bps);
  return t;
}

std::uint32_t Topology::site_of_host(HostId h) const {
  FT_ASSERT(h < hosts_, h, hosts_);
  return h / hosts_per_rack_;
}

std::vector<LinkSite> Topology::link_sites() const {
  std::vector<LinkSite> out(num_links());
  if (kind_ == TopologyKind::kExplicit) return out;
  for (HostId h = 0; h < hosts_; ++h) {
    out[host_uplink(h)] = {site_of_host(h), true};
    out[host_downlink(h)] = {site_of_host(h), false};
  }
  const std::size_t base = 2 * std::size_t{hosts_}, rs = std::size_t{racks_} * spines_;
  for (std::size_t i = 0; i < rs; ++i) {
    out[base + i] = {static_cast<std::uint32_t>(i / spines_), true};
    out[base + rs + i] = {static_cast<std::uint32_t>(i / spines_), false};
  }
  return out;
}

LinkId Topology::host_uplink(HostId h) const {
  FT_ASSERT(h < hosts_, h, hosts_);
  return h;
}

LinkId Topology::host_downlink(HostId h) const {
  FT_ASSERT(h < hosts_, h, hosts_);
  return hosts_ + h;
}

Path Topology::path(HostId src, HostId dst, std::uint64_t flow_hash) const {
  std::uint32_t spine = spines_ == 0 ? 0 : static_cast<std::uint32_t>(flow_hash % spines_);
  return path_via(src, dst, spine);
}

Path Topology::path_via(HostId src, HostId dst, std::uint32_t spine) const {
  FT_ASSERT(kind_ != TopologyKind::kExplicit, "explicit topologies take paths per flow");
  FT_ASSERT(src < hosts_ && dst < hosts_ && src != dst, src, dst, hosts_);
  Path p;
  p.push(host_uplink(src));
  std::uint32_t sr = site_of_host(src);
  std::uint32_t dr = site_of_host(dst);
  if (kind_ == TopologyKind::kTwoTier && sr != dr) {
    FT_ASSERT(spine < spines_, spine, spines_);
    LinkId base = 2 * hosts_;
    p.push(base + sr * spines_ + spine);
    p.push(base + racks_ * spines_ + dr * spines_ + spine);
  }
  p.push(host_downlink(dst));
  return p;
}

std::string Topology::link_name(LinkId l) const {
  FT_ASSERT(l < num_links(), l, num_links());
  if (kind_ == TopologyKind::kExplicit) return "link" + std::to_string(l);
  if (l < hosts_) return "host" + std::to_string(l) + ".up";
  if (l < 2 * hosts_) return "host" + std::to_string(l - hosts_) + ".down";
  std::uint32_t i = l - 2 * hosts_;
  std::uint32_t rs = racks_ * spines_;
  if (i < rs) {
    return "rack" + std::to_string(i / spines_) + "->spine" + std::to_string(i % spines_);
  }
  i -= rs;
  return "spine" + std::to_string(i % spines_) + "->rack" + std::to_string(i / spines_);
}

}  // namespace flowtune::alloc
