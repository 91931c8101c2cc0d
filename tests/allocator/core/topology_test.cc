// Topology: path shapes, link counts and capacities, ECMP spine choice, sites,
// and constructor validation. Paths are checked structurally (distinct links,
// which links are shared by which flows) and through link_name(), not against
// the link-numbering formula in topology.cc.
#include "flowtune/alloc/topology.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace flowtune::alloc {
namespace {

std::vector<LinkId> links_of(const Path& p) { return {p.begin(), p.end()}; }

TwoTierSpec small_two_tier() {
  TwoTierSpec s;
  s.racks = 3;
  s.hosts_per_rack = 4;
  s.spines = 5;
  s.host_link_bps = 10e9;
  s.spine_link_bps = 25e9;
  return s;
}

TEST(Topology, BigSwitchPathIsSourceUplinkThenDestinationDownlink) {
  Topology t = Topology::big_switch(6, 40e9);
  for (HostId src = 0; src < 6; ++src) {
    for (HostId dst = 0; dst < 6; ++dst) {
      if (src == dst) continue;
      Path p = t.path(src, dst, /*flow_hash=*/src * 7919 + dst);
      ASSERT_EQ(p.size, 2);
      EXPECT_EQ(p.links[0], t.host_uplink(src));
      EXPECT_EQ(p.links[1], t.host_downlink(dst));
      EXPECT_EQ(t.link_name(p.links[0]), "host" + std::to_string(src) + ".up");
      EXPECT_EQ(t.link_name(p.links[1]), "host" + std::to_string(dst) + ".down");
    }
  }
}

TEST(Topology, BigSwitchHasOneUplinkAndOneDownlinkPerHost) {
  Topology t = Topology::big_switch(7, 25e9);
  EXPECT_EQ(t.kind(), TopologyKind::kBigSwitch);
  EXPECT_EQ(t.num_hosts(), 7u);
  EXPECT_EQ(t.num_links(), 14u);
  std::set<LinkId> all;
  for (HostId h = 0; h < 7; ++h) {
    all.insert(t.host_uplink(h));
    all.insert(t.host_downlink(h));
  }
  EXPECT_EQ(all.size(), 14u);  // every host link is its own link
  for (LinkId l = 0; l < t.num_links(); ++l) EXPECT_EQ(t.capacity_bps(l), 25e9);
  // A big switch's sites are its hosts.
  EXPECT_EQ(t.num_sites(), 7u);
  for (HostId h = 0; h < 7; ++h) EXPECT_EQ(t.site_of_host(h), h);
}

TEST(Topology, TwoTierInterRackPathHasFourDistinctLinks) {
  Topology t = Topology::two_tier(small_two_tier());
  // Host 1 is in rack 0, host 9 in rack 2 (4 hosts per rack).
  for (std::uint32_t spine = 0; spine < 5; ++spine) {
    Path p = t.path_via(1, 9, spine);
    ASSERT_EQ(p.size, 4);
    std::vector<LinkId> v = links_of(p);
    EXPECT_EQ(std::set<LinkId>(v.begin(), v.end()).size(), 4u);
    for (LinkId l : v) EXPECT_LT(l, t.num_links());
    EXPECT_EQ(p.links[0], t.host_uplink(1));
    EXPECT_EQ(p.links[3], t.host_downlink(9));
    EXPECT_EQ(t.link_name(p.links[1]), "rack0->spine" + std::to_string(spine));
    EXPECT_EQ(t.link_name(p.links[2]), "spine" + std::to_string(spine) + "->rack2");
    EXPECT_EQ(t.capacity_bps(p.links[0]), 10e9);
    EXPECT_EQ(t.capacity_bps(p.links[1]), 25e9);
    EXPECT_EQ(t.capacity_bps(p.links[2]), 25e9);
    EXPECT_EQ(t.capacity_bps(p.links[3]), 10e9);
  }
}

TEST(Topology, TwoTierIntraRackPathHasTwoLinks) {
  Topology t = Topology::two_tier(small_two_tier());
  for (std::uint32_t rack = 0; rack < 3; ++rack) {
    HostId a = rack * 4;
    HostId b = rack * 4 + 3;
    for (std::uint64_t hash : {0ull, 1ull, 12345ull, ~0ull}) {
      Path p = t.path(a, b, hash);
      ASSERT_EQ(p.size, 2);
      EXPECT_EQ(p.links[0], t.host_uplink(a));
      EXPECT_EQ(p.links[1], t.host_downlink(b));
    }
  }
}

TEST(Topology, TwoTierSpineLinksAreSharedExactlyByFlowsOnTheSameRackAndSpine) {
  // Given every inter-rack (src, dst, spine) path,
  // Expect: the rack->spine link identifies (source rack, spine) and the
  // spine->rack link identifies (spine, destination rack), one to one.
  Topology t = Topology::two_tier(small_two_tier());
  std::map<LinkId, std::pair<std::uint32_t, std::uint32_t>> up_owner;
  std::map<LinkId, std::pair<std::uint32_t, std::uint32_t>> down_owner;
  std::set<LinkId> host_links;
  for (HostId h = 0; h < t.num_hosts(); ++h) {
    host_links.insert(t.host_uplink(h));
    host_links.insert(t.host_downlink(h));
  }
  for (HostId src = 0; src < t.num_hosts(); ++src) {
    for (HostId dst = 0; dst < t.num_hosts(); ++dst) {
      if (t.site_of_host(src) == t.site_of_host(dst)) continue;
      for (std::uint32_t k = 0; k < t.num_spines(); ++k) {
        Path p = t.path_via(src, dst, k);
        ASSERT_EQ(p.size, 4);
        EXPECT_EQ(host_links.count(p.links[1]), 0u);
        EXPECT_EQ(host_links.count(p.links[2]), 0u);
        auto up = std::make_pair(t.site_of_host(src), k);
        auto down = std::make_pair(k, t.site_of_host(dst));
        auto [it_up, new_up] = up_owner.emplace(p.links[1], up);
        EXPECT_EQ(it_up->second, up) << "link " << p.links[1];
        auto [it_down, new_down] = down_owner.emplace(p.links[2], down);
        EXPECT_EQ(it_down->second, down) << "link " << p.links[2];
      }
    }
  }
  // 3 racks x 5 spines in each direction, all different from each other.
  EXPECT_EQ(up_owner.size(), 15u);
  EXPECT_EQ(down_owner.size(), 15u);
  std::set<LinkId> spine_links;
  for (auto& [l, o] : up_owner) spine_links.insert(l);
  for (auto& [l, o] : down_owner) spine_links.insert(l);
  EXPECT_EQ(spine_links.size(), 30u);
}

TEST(Topology, TwoTierLinkCountIsHostLinksPlusSpineLinks) {
  TwoTierSpec s = small_two_tier();
  Topology t = Topology::two_tier(s);
  EXPECT_EQ(t.kind(), TopologyKind::kTwoTier);
  EXPECT_EQ(t.num_hosts(), 12u);
  EXPECT_EQ(t.num_spines(), 5u);
  // 2 per host + 2 per (rack, spine) pair.
  EXPECT_EQ(t.num_links(), 2u * 12 + 2u * 3 * 5);
  int host_links = 0;
  int spine_links = 0;
  for (LinkId l = 0; l < t.num_links(); ++l) {
    if (t.capacity_bps(l) == 10e9) ++host_links;
    if (t.capacity_bps(l) == 25e9) ++spine_links;
  }
  EXPECT_EQ(host_links, 24);
  EXPECT_EQ(spine_links, 30);
}

TEST(Topology, TwoTierDefaultSpineCapacityGivesFullBisection) {
  TwoTierSpec s;
  s.racks = 2;
  s.hosts_per_rack = 16;
  s.spines = 4;
  s.host_link_bps = 10e9;
  s.spine_link_bps = 0;
  Topology t = Topology::two_tier(s);
  Path p = t.path_via(0, 20, 3);
  ASSERT_EQ(p.size, 4);
  // 16 hosts x 10 Gbit/s spread over 4 spines.
  EXPECT_EQ(t.capacity_bps(p.links[1]), 40e9);
  EXPECT_EQ(t.capacity_bps(p.links[2]), 40e9);
}

TEST(Topology, TwoTierSiteIsTheRack) {
  Topology t = Topology::two_tier(small_two_tier());
  EXPECT_EQ(t.num_sites(), 3u);
  const std::uint32_t expected[12] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2};
  for (HostId h = 0; h < 12; ++h) EXPECT_EQ(t.site_of_host(h), expected[h]) << "host " << h;
}

TEST(Topology, PathSpineIsFlowHashModuloSpines) {
  Topology t = Topology::two_tier(small_two_tier());
  const std::uint64_t hashes[] = {
      0, 1, 4, 5, 6, 99, 1000003, 0xffffffffffffffffull, 0x8000000000000001ull};
  for (std::uint64_t h : hashes) {
    const std::uint64_t spine = h % 5;
    Path p = t.path(2, 7, h);
    ASSERT_EQ(p.size, 4);
    EXPECT_EQ(t.link_name(p.links[1]), "rack0->spine" + std::to_string(spine)) << "hash " << h;
    EXPECT_EQ(t.link_name(p.links[2]), "spine" + std::to_string(spine) + "->rack1") << "hash " << h;
    Path q = t.path_via(2, 7, static_cast<std::uint32_t>(spine));
    EXPECT_EQ(links_of(p), links_of(q));
  }
}

TEST(Topology, EcmpHashSpreadsConsecutivePortsEvenlyOverSpines) {
  // 20,000 flows that differ only in the source port, hashed onto 4 and 7
  // spines. Each spine's share must be within 5% of even: for a fair hash the
  // standard deviation of a count is ~sqrt(n p (1-p)) ~ 61 of 5000 (4 spines),
  // so 5% (250) is four standard deviations.
  constexpr int kFlows = 20000;
  for (std::uint32_t spines : {4u, 7u}) {
    std::vector<int> count(spines, 0);
    for (int i = 0; i < kFlows; ++i) {
      FiveTuple ft;
      ft.src_ip = 0x0a000001;
      ft.dst_ip = 0x0a000102;
      ft.src_port = static_cast<std::uint16_t>(30000 + i);
      ft.dst_port = 5001;
      ++count[ecmp_hash(ft) % spines];
    }
    const double even = static_cast<double>(kFlows) / spines;
    for (std::uint32_t k = 0; k < spines; ++k) {
      EXPECT_NEAR(count[k], even, 0.05 * even) << "spine " << k << " of " << spines;
    }
  }
}

TEST(Topology, EcmpHashDependsOnEveryField) {
  FiveTuple base;
  base.src_ip = 0x0a000001;
  base.dst_ip = 0x0a000002;
  base.src_port = 1234;
  base.dst_port = 80;
  base.protocol = 6;
  const std::uint64_t h = ecmp_hash(base);
  EXPECT_EQ(ecmp_hash(base), h);  // a pure function
  FiveTuple t = base;
  t.src_ip ^= 1;
  EXPECT_NE(ecmp_hash(t), h);
  t = base;
  t.dst_ip ^= 1;
  EXPECT_NE(ecmp_hash(t), h);
  t = base;
  t.src_port ^= 1;
  EXPECT_NE(ecmp_hash(t), h);
  t = base;
  t.dst_port ^= 1;
  EXPECT_NE(ecmp_hash(t), h);
  t = base;
  t.protocol = 17;
  EXPECT_NE(ecmp_hash(t), h);
  // Swapping the endpoints is a different flow (the reverse direction).
  t = base;
  std::swap(t.src_ip, t.dst_ip);
  std::swap(t.src_port, t.dst_port);
  EXPECT_NE(ecmp_hash(t), h);
}

TEST(Topology, ExplicitLinksKeepCapacitiesAndHaveOneSite) {
  Topology t = Topology::explicit_links({1e9, 2.5e9, 100e9});
  EXPECT_EQ(t.kind(), TopologyKind::kExplicit);
  EXPECT_EQ(t.num_links(), 3u);
  EXPECT_EQ(t.capacity_bps(0), 1e9);
  EXPECT_EQ(t.capacity_bps(1), 2.5e9);
  EXPECT_EQ(t.capacity_bps(2), 100e9);
  EXPECT_EQ(t.num_sites(), 1u);
  EXPECT_EQ(t.link_name(2), "link2");
}

// The diagonal exchange (allocator/mpi) sums a LinkBlock along one row or
// column of ranks: every path must climb through its source site's upward
// links and descend through its destination site's downward ones.
TEST(Topology, EveryPathClimbsItsSourceSitesLinksAndDescendsItsDestinations) {
  for (const Topology& t : {Topology::two_tier(small_two_tier()), Topology::big_switch(6, 10e9)}) {
    const std::vector<LinkSite> sites = t.link_sites();
    ASSERT_EQ(sites.size(), t.num_links());
    std::set<std::pair<std::uint32_t, bool>> seen;
    for (HostId src = 0; src < t.num_hosts(); ++src) {
      for (HostId dst = 0; dst < t.num_hosts(); ++dst) {
        if (src == dst) continue;
        for (std::uint32_t spine = 0; spine < std::max(t.num_spines(), 1u); ++spine) {
          const Path p = t.path_via(src, dst, spine);
          for (int i = 0; i < p.size; ++i) {
            const LinkSite s = sites[p.links[i]];
            const bool climbing = 2 * i < p.size;
            EXPECT_EQ(s.up, climbing) << t.link_name(p.links[i]);
            EXPECT_EQ(s.site, t.site_of_host(climbing ? src : dst)) << t.link_name(p.links[i]);
            seen.insert({s.site, s.up});
          }
        }
      }
    }
    EXPECT_EQ(seen.size(), 2 * std::size_t{t.num_sites()});  // each site both ways
  }
  for (const LinkSite& s : Topology::explicit_links({1e9, 2e9}).link_sites()) {
    EXPECT_EQ(s.site, 0u);
    EXPECT_TRUE(s.up);
  }
}

TEST(Topology, InvalidBigSwitchThrows) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_THROW(Topology::big_switch(0, 10e9), std::invalid_argument);
  EXPECT_THROW(Topology::big_switch(1, 10e9), std::invalid_argument);
  EXPECT_THROW(Topology::big_switch(2, 0), std::invalid_argument);
  EXPECT_THROW(Topology::big_switch(2, -10e9), std::invalid_argument);
  EXPECT_THROW(Topology::big_switch(2, nan), std::invalid_argument);
  EXPECT_THROW(Topology::big_switch(2, inf), std::invalid_argument);
  EXPECT_THROW(Topology::big_switch(2, 1), std::invalid_argument);  // below 1 kbit/s
  EXPECT_THROW(Topology::big_switch(2, 2e15), std::invalid_argument);  // above 1 Pbit/s
  EXPECT_NO_THROW(Topology::big_switch(2, 1e3));
  EXPECT_THROW(Topology::big_switch(Topology::kMaxHosts + 1, 10e9), std::invalid_argument);
}

TEST(Topology, InvalidTwoTierThrows) {
  auto with = [](auto mutate) {
    TwoTierSpec s = small_two_tier();
    mutate(s);
    return s;
  };
  EXPECT_THROW(Topology::two_tier(with([](TwoTierSpec& s) { s.racks = 0; })),
               std::invalid_argument);
  EXPECT_THROW(Topology::two_tier(with([](TwoTierSpec& s) { s.hosts_per_rack = 0; })),
               std::invalid_argument);
  EXPECT_THROW(Topology::two_tier(with([](TwoTierSpec& s) { s.spines = 0; })),
               std::invalid_argument);
  EXPECT_THROW(Topology::two_tier(with([](TwoTierSpec& s) {
                 s.racks = 1;
                 s.hosts_per_rack = 1;
               })),
               std::invalid_argument);
  EXPECT_THROW(Topology::two_tier(with([](TwoTierSpec& s) { s.host_link_bps = 0; })),
               std::invalid_argument);
  EXPECT_THROW(Topology::two_tier(with([](TwoTierSpec& s) { s.host_link_bps = -1; })),
               std::invalid_argument);
  EXPECT_THROW(Topology::two_tier(with([](TwoTierSpec& s) {
                 s.host_link_bps = std::numeric_limits<double>::quiet_NaN();
               })),
               std::invalid_argument);
  EXPECT_THROW(Topology::two_tier(with([](TwoTierSpec& s) { s.spine_link_bps = -40e9; })),
               std::invalid_argument);
  EXPECT_THROW(Topology::two_tier(with([](TwoTierSpec& s) {
                 s.spine_link_bps = std::numeric_limits<double>::infinity();
               })),
               std::invalid_argument);
  // One rack of two hosts is the smallest valid two-tier network.
  EXPECT_NO_THROW(Topology::two_tier(with([](TwoTierSpec& s) {
    s.racks = 1;
    s.hosts_per_rack = 2;
  })));
}

TEST(Topology, TwoTierWithMoreHostsThanHostIdsCanNameThrows) {
  // Given 65,536 racks of 65,536 hosts: 2^32 hosts, more than num_hosts()
  // (32 bits) can count, and 2^33 host links, more than a LinkId can name.
  TwoTierSpec s;
  s.racks = 65536;
  s.hosts_per_rack = 65536;
  s.spines = 1;
  // Expect: rejected like any other impossible size, not a topology whose
  // host count silently wrapped around.
  EXPECT_THROW(
      {
        Topology t = Topology::two_tier(s);
        ADD_FAILURE() << "two_tier accepted 2^32 hosts: num_hosts()=" << t.num_hosts()
                      << " num_links()=" << t.num_links();
      },
      std::invalid_argument);
}

TEST(Path, HoldsUpToFourLinksInOrder) {
  Path p;
  EXPECT_EQ(p.size, 0);
  EXPECT_EQ(p.begin(), p.end());
  for (LinkId l : {7u, 3u, 9u, 1u}) p.push(l);
  EXPECT_EQ(links_of(p), (std::vector<LinkId>{7, 3, 9, 1}));
}

// Pushing a fifth link is a programming error (paths have at most
// kMaxPathLinks links) and must fail loudly, as FT_ASSERT does for the other
// preconditions. Writing past the array instead would land in Path::size and
// silently turn the path into a different, valid-looking one.
void push_links(Path& p, LinkId n) {
  for (LinkId l = 0; l < n; ++l) p.push(l + 10);
}

TEST(Path, PushingAFifthLinkFailsLoudly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Path p;
        push_links(p, kMaxPathLinks + 1);
        std::fprintf(stderr, "path now has size %d, links %u %u %u %u\n", p.size, p.links[0],
                     p.links[1], p.links[2], p.links[3]);
        std::exit(0);
      },
      "");
}

TEST(Topology, InvalidExplicitLinksThrow) {
  EXPECT_THROW(Topology::explicit_links({10e9, 0}), std::invalid_argument);
  EXPECT_THROW(Topology::explicit_links({-1e9}), std::invalid_argument);
  EXPECT_THROW(Topology::explicit_links({std::numeric_limits<double>::quiet_NaN()}),
               std::invalid_argument);
  EXPECT_THROW(Topology::explicit_links({std::numeric_limits<double>::infinity()}),
               std::invalid_argument);
}

}  // namespace
}  // namespace flowtune::alloc
