// Network: the TOML loader (each kind built as Topology builds it, every class
// of config error reported with file, line and key), host lookup by name and
// address, spare slots, explicit routes, and strict IPv4 parsing. Topologies
// are checked against Topology's own constructors and paths; explicit paths
// against link names written in the test.
#include "flowtune/daemon/network.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowtune::daemon {
namespace {

using alloc::HostId;
using alloc::LinkId;
using alloc::Path;
using alloc::Topology;

Network load(std::string_view text) { return Network::from_toml_string(text, "net.toml"); }

// The message of the ConfigError that loading `text` throws ("" if none).
std::string error_of(std::string_view text) {
  try {
    load(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Passes when loading `text` fails with "net.toml:LINE: KEY: ..." and the
// message contains `detail`.
::testing::AssertionResult fails_at(std::string_view text, int line, std::string_view key,
                                    std::string_view detail = "") {
  std::string msg = error_of(text);
  std::string prefix = "net.toml:" + std::to_string(line) + ": " + std::string(key) + ": ";
  if (msg.rfind(prefix, 0) != 0) {
    return ::testing::AssertionFailure() << "message \"" << msg << "\" does not start with \""
                                         << prefix << "\"";
  }
  if (msg.find(detail) == std::string::npos) {
    return ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << detail << "\"";
  }
  return ::testing::AssertionSuccess();
}

std::vector<LinkId> links_of(const Path& p) { return {p.begin(), p.end()}; }

std::vector<std::string> link_names_of(const Network& n, const std::optional<Path>& p) {
  std::vector<std::string> names;
  if (p) {
    for (LinkId l : *p) names.push_back(n.link_name(l));
  }
  return names;
}

std::uint32_t ip(std::string_view s) { return parse_ipv4(s).value(); }

// parse_ipv4 / format_ipv4 (flowtune/common/ipv4.h): tests/common/ipv4_test.cc.

// ---- Network::big_switch and add_host ----

TEST(NetworkBigSwitch, NamesHostsAndMatchesTopologyWithSpareSlots) {
  Network n = Network::big_switch(4, 10e9, /*spare=*/2);
  Topology want = Topology::big_switch(6, 10e9);
  EXPECT_EQ(n.num_hosts(), 4u);
  EXPECT_EQ(n.spare_slots(), 2u);
  EXPECT_EQ(n.topology().capacities_bps(), want.capacities_bps());
  for (HostId h = 0; h < 4; ++h) {
    EXPECT_EQ(n.host_name(h), "h" + std::to_string(h));
    EXPECT_EQ(n.find_host("h" + std::to_string(h)), h);
  }
  ASSERT_TRUE(n.path(1, 3, 99).has_value());
  EXPECT_EQ(links_of(*n.path(1, 3, 99)), links_of(want.path(1, 3, 99)));
  // Host links carry the host's name; spare slots keep the topology's.
  EXPECT_EQ(n.link_name(want.host_uplink(2)), "h2.up");
  EXPECT_EQ(n.link_name(want.host_downlink(3)), "h3.down");
  EXPECT_EQ(n.link_name(want.host_uplink(5)), want.link_name(want.host_uplink(5)));
  EXPECT_EQ(n.add_host("web1"), 4u);
  EXPECT_EQ(n.link_name(want.host_downlink(4)), "web1.down");
}

TEST(NetworkBigSwitch, RejectsBadSizesAndCapacities) {
  EXPECT_THROW(Network::big_switch(0, 10e9, 1), ConfigError);
  EXPECT_THROW(Network::big_switch(1, 10e9), ConfigError);
  EXPECT_NO_THROW(Network::big_switch(0, 10e9, 4));  // every host arrives at run time
  EXPECT_THROW(Network::big_switch(4, 0), ConfigError);
  EXPECT_THROW(Network::big_switch(4, 1e16), ConfigError);
  EXPECT_THROW(Network::big_switch(4, std::nan("")), ConfigError);
  EXPECT_THROW(Network::big_switch(Topology::kMaxHosts, 10e9, 1), ConfigError);
}

TEST(NetworkAddHost, FillsSpareSlotsThenReturnsNullopt) {
  Network n = Network::big_switch(2, 10e9, /*spare=*/2);
  EXPECT_EQ(n.path(0, 2, 0), std::nullopt);  // Slot 2 is not a host yet.

  EXPECT_EQ(n.add_host("10.0.0.9"), 2u);
  EXPECT_EQ(n.add_host("late-comer"), 3u);
  EXPECT_EQ(n.num_hosts(), 4u);
  EXPECT_EQ(n.spare_slots(), 0u);
  EXPECT_EQ(n.add_host("one-too-many"), std::nullopt);
  EXPECT_EQ(n.num_hosts(), 4u);

  EXPECT_EQ(n.host_name(2), "10.0.0.9");
  EXPECT_EQ(n.find_host("10.0.0.9"), 2u);
  EXPECT_EQ(n.find_host_by_ip(ip("10.0.0.9")), 2u);
  EXPECT_EQ(n.find_host("late-comer"), 3u);
  EXPECT_EQ(n.find_host_by_ip(ip("10.0.0.10")), std::nullopt);
  Topology want = Topology::big_switch(4, 10e9);
  ASSERT_TRUE(n.path(0, 3, 5).has_value());
  EXPECT_EQ(links_of(*n.path(0, 3, 5)), links_of(want.path(0, 3, 5)));
  EXPECT_EQ(n.path(0, 4, 5), std::nullopt);
}

TEST(NetworkAddHost, ReturnsTheExistingIdForAKnownNameOrAddress) {
  Network n = load(R"(
kind = "big_switch"
hosts = 2
host_gbps = 10
spare_hosts = 1
[[host]]
name = "web"
addresses = ["10.0.0.1"]
)");
  EXPECT_EQ(n.add_host("web"), 0u);
  EXPECT_EQ(n.add_host("10.0.0.1"), 0u);
  EXPECT_EQ(n.add_host("h1"), 1u);
  EXPECT_EQ(n.spare_slots(), 1u);
}

TEST(NetworkAddHost, RefusesNamesThatCouldNotBeConfigured) {
  Network n = Network::big_switch(2, 10e9, /*spare=*/1);
  EXPECT_EQ(n.add_host(""), std::nullopt);
  EXPECT_EQ(n.add_host("two words"), std::nullopt);
  EXPECT_EQ(n.add_host(std::string(65, 'x')), std::nullopt);
  EXPECT_EQ(n.spare_slots(), 1u);
  EXPECT_EQ(n.add_host(std::string(64, 'x')), 2u);
}

TEST(NetworkAddHost, HasNoSlotsInTwoTierOrExplicitNetworks) {
  Network two = load("kind = \"two_tier\"\nracks = 2\nhosts_per_rack = 2\nspines = 1\n"
                     "host_gbps = 10\n");
  EXPECT_EQ(two.spare_slots(), 0u);
  EXPECT_EQ(two.add_host("new"), std::nullopt);
  Network ex = load(R"(
kind = "explicit"
[[link]]
name = "l"
gbps = 1
[[host]]
up = "l"
down = "l"
[[host]]
up = "l"
down = "l"
)");
  EXPECT_EQ(ex.spare_slots(), 0u);
  EXPECT_EQ(ex.add_host("new"), std::nullopt);
}

// ---- TOML: the three kinds ----

TEST(NetworkToml, BigSwitchMatchesTopologyAndNamesHostsByIndex) {
  Network n = load(R"(
kind = "big_switch"
hosts = 3
host_gbps = 0.1
spare_hosts = 1

[[host]]
name = "web1"
addresses = ["10.0.0.1", "192.168.1.1"]

[[host]]
index = 2
name = "db"
)");
  Topology want = Topology::big_switch(4, 0.1e9);
  EXPECT_EQ(n.topology().kind(), alloc::TopologyKind::kBigSwitch);
  EXPECT_EQ(n.topology().capacities_bps(), want.capacities_bps());
  EXPECT_EQ(n.num_hosts(), 3u);
  EXPECT_EQ(n.spare_slots(), 1u);
  EXPECT_EQ(n.host_name(0), "web1");
  EXPECT_EQ(n.host_name(1), "h1");
  EXPECT_EQ(n.host_name(2), "db");
  EXPECT_EQ(n.find_host("web1"), 0u);
  EXPECT_EQ(n.find_host("10.0.0.1"), 0u);
  EXPECT_EQ(n.find_host("192.168.1.1"), 0u);
  EXPECT_EQ(n.find_host_by_ip(ip("192.168.1.1")), 0u);
  EXPECT_EQ(n.find_host("db"), 2u);
  EXPECT_EQ(n.find_host("h2"), std::nullopt);  // Renamed.
  EXPECT_EQ(n.find_host("10.0.0.2"), std::nullopt);
  for (HostId s = 0; s < 3; ++s) {
    for (HostId d = 0; d < 3; ++d) {
      if (s == d) {
        EXPECT_EQ(n.path(s, d, 0), std::nullopt);
        continue;
      }
      ASSERT_TRUE(n.path(s, d, 7).has_value());
      EXPECT_EQ(links_of(*n.path(s, d, 7)), links_of(want.path(s, d, 7)));
      EXPECT_EQ(n.site_of_host(s), want.site_of_host(s));
    }
  }
}

TEST(NetworkToml, TwoTierMatchesTopologyIncludingEcmpSpines) {
  Network n = load(R"(
kind = "two_tier"
racks = 3
hosts_per_rack = 2
spines = 2
host_gbps = 10
spine_gbps = 5
[[host]]
index = 5
addresses = ["10.2.0.6"]
)");
  alloc::TwoTierSpec spec;
  spec.racks = 3;
  spec.hosts_per_rack = 2;
  spec.spines = 2;
  spec.host_link_bps = 10e9;
  spec.spine_link_bps = 5e9;
  Topology want = Topology::two_tier(spec);
  EXPECT_EQ(n.topology().kind(), alloc::TopologyKind::kTwoTier);
  EXPECT_EQ(n.topology().capacities_bps(), want.capacities_bps());
  EXPECT_EQ(n.num_hosts(), 6u);
  EXPECT_EQ(n.host_name(0), "r0h0");
  EXPECT_EQ(n.host_name(3), "r1h1");
  EXPECT_EQ(n.find_host("r2h1"), 5u);
  EXPECT_EQ(n.find_host("10.2.0.6"), 5u);
  for (HostId s = 0; s < 6; ++s) {
    EXPECT_EQ(n.site_of_host(s), want.site_of_host(s));
    for (HostId d = 0; d < 6; ++d) {
      if (s == d) continue;
      for (std::uint64_t hash : {0u, 1u, 12345u}) {
        ASSERT_TRUE(n.path(s, d, hash).has_value());
        EXPECT_EQ(links_of(*n.path(s, d, hash)), links_of(want.path(s, d, hash)));
      }
    }
  }
  for (LinkId l = 2 * 6; l < want.num_links(); ++l) EXPECT_EQ(n.link_name(l), want.link_name(l));
  EXPECT_EQ(n.link_name(want.host_uplink(3)), "r1h1.up");
}

TEST(NetworkToml, TwoTierWithoutSpineGbpsHasFullBisection) {
  for (std::string_view extra : {"", "spine_gbps = 0\n"}) {
    Network n = load("kind = \"two_tier\"\nracks = 2\nhosts_per_rack = 4\nspines = 2\n"
                     "host_gbps = 10\n" +
                     std::string(extra));
    // Spine links follow the 2 * 8 host links: 4 * 10 / 2 = 20 Gbit/s each.
    ASSERT_EQ(n.topology().num_links(), 16u + 8u);
    for (LinkId l = 16; l < 24; ++l) EXPECT_EQ(n.topology().capacity_bps(l), 20e9);
  }
}

constexpr std::string_view kTriangle = R"(kind = "explicit"
[[link]]
name = "a.up"
gbps = 10
[[link]]
name = "b.down"
gbps = 10
[[link]]
name = "core"
gbps = 2.5
[[link]]
name = "b.up"
gbps = 10
[[link]]
name = "a.down"
gbps = 10
[[host]]
name = "a"
addresses = ["10.0.0.1"]
up = "a.up"
down = "a.down"
[[host]]
name = "b"
up = "b.up"
down = "b.down"
[[route]]
src = "a"
dst = "b"
via = ["core"]
)";

TEST(NetworkToml, ExplicitBuildsNamedLinksAndRoutes) {
  Network n = load(kTriangle);
  EXPECT_EQ(n.topology().kind(), alloc::TopologyKind::kExplicit);
  EXPECT_EQ(n.topology().capacities_bps(), (std::vector<double>{10e9, 10e9, 2.5e9, 10e9, 10e9}));
  EXPECT_EQ(n.num_hosts(), 2u);
  EXPECT_EQ(n.find_host("a"), 0u);
  EXPECT_EQ(n.find_host("10.0.0.1"), 0u);
  EXPECT_EQ(link_names_of(n, n.path(0, 1, 0)),
            (std::vector<std::string>{"a.up", "core", "b.down"}));
  // No route from b to a: the default path is b's uplink then a's downlink.
  EXPECT_EQ(link_names_of(n, n.path(1, 0, 0)), (std::vector<std::string>{"b.up", "a.down"}));
  EXPECT_EQ(n.path(0, 0, 0), std::nullopt);
  EXPECT_EQ(n.path(0, 2, 0), std::nullopt);
  EXPECT_EQ(n.site_of_host(1), 0u);
}

TEST(NetworkToml, ExplicitWithoutDefaultRouteReachesOnlyRoutedPairs) {
  Network n = load("default_route = false\n" + std::string(kTriangle));
  EXPECT_EQ(link_names_of(n, n.path(0, 1, 0)),
            (std::vector<std::string>{"a.up", "core", "b.down"}));
  EXPECT_EQ(n.path(1, 0, 0), std::nullopt);
}

TEST(NetworkToml, ExplicitHostsOnOneSharedLinkCrossItOnce) {
  Network n = load(R"(
kind = "explicit"
[[link]]
name = "bus"
gbps = 1
[[host]]
up = "bus"
down = "bus"
[[host]]
up = "bus"
down = "bus"
)");
  EXPECT_EQ(n.host_name(1), "h1");
  EXPECT_EQ(link_names_of(n, n.path(0, 1, 0)), (std::vector<std::string>{"bus"}));
}

// ---- TOML: errors name file, line and key ----

TEST(NetworkTomlErrors, SyntaxErrorsNameFileLineAndColumn) {
  std::string msg = error_of("kind = \"big_switch\"\nhosts = = 3\n");
  EXPECT_EQ(msg.rfind("net.toml:2:", 0), 0u) << msg;
  EXPECT_NE(msg.find("net.toml:2:9: "), std::string::npos) << msg;
}

TEST(NetworkTomlErrors, MissingOrUnknownKindIsRejected) {
  EXPECT_TRUE(fails_at("hosts = 3\n", 1, "kind", "missing"));
  EXPECT_TRUE(fails_at("\nkind = \"ring\"\n", 2, "kind", "\"ring\" is not one of"));
  EXPECT_TRUE(fails_at("kind = 3\n", 1, "kind", "expected a string, got an integer"));
}

TEST(NetworkTomlErrors, UnknownKeysAreTyposAndListTheAllowedKeys) {
  EXPECT_TRUE(fails_at("kind = \"big_switch\"\nhots = 3\nhost_gbps = 1\n", 2, "hots",
                       "unknown key (allowed: kind, host_gbps, hosts, spare_hosts, host)"));
  EXPECT_TRUE(fails_at("kind = \"big_switch\"\nhosts = 3\nhost_gbps = 1\n[[host]]\n"
                       "name = \"x\"\nadresses = []\n",
                       6, "host[0].adresses", "allowed: name, addresses, index"));
  // host_gbps means nothing in an explicit network, where links carry gbps.
  EXPECT_TRUE(fails_at("host_gbps = 10\n" + std::string(kTriangle), 1, "host_gbps",
                       "allowed: kind, link, host, route, default_route"));
}

TEST(NetworkTomlErrors, WrongTypesNameTheExpectedType) {
  const std::string bs = "kind = \"big_switch\"\n";
  EXPECT_TRUE(fails_at(bs + "hosts = \"8\"\nhost_gbps = 1\n", 2, "hosts",
                       "expected an integer, got a string"));
  EXPECT_TRUE(fails_at(bs + "hosts = 8.0\nhost_gbps = 1\n", 2, "hosts",
                       "expected an integer, got a floating-point number"));
  EXPECT_TRUE(fails_at(bs + "hosts = 8\nhost_gbps = \"10\"\n", 3, "host_gbps", "got a string"));
  EXPECT_TRUE(fails_at(bs + "hosts = 8\nhost_gbps = 1\nhost = 3\n", 4, "host",
                       "array of tables"));
  EXPECT_TRUE(fails_at(bs + "hosts = 8\nhost_gbps = 1\n[[host]]\naddresses = \"10.0.0.1\"\n", 5,
                       "host[0].addresses", "expected an array of strings, got a string"));
  EXPECT_TRUE(fails_at(bs + "hosts = 8\nhost_gbps = 1\n[[host]]\naddresses = [1]\n", 5,
                       "host[0].addresses[0]", "expected a string, got an integer"));
  EXPECT_TRUE(fails_at("default_route = 1\n" + std::string(kTriangle), 1, "default_route",
                       "expected a boolean"));
}

TEST(NetworkTomlErrors, ZeroNegativeAndNonFiniteSizesAreRejected) {
  const std::string bs = "kind = \"big_switch\"\n";
  EXPECT_TRUE(fails_at(bs + "hosts = 0\nhost_gbps = 1\n", 2, "hosts", "0 is out of range [1, "));
  EXPECT_TRUE(fails_at(bs + "hosts = -4\nhost_gbps = 1\n", 2, "hosts", "out of range"));
  EXPECT_TRUE(fails_at(bs + "hosts = 4\nspare_hosts = -1\nhost_gbps = 1\n", 3, "spare_hosts",
                       "out of range [0, "));
  for (std::string_view g : {"0", "-10", "inf", "nan", "-0.5"}) {
    EXPECT_TRUE(fails_at(bs + "hosts = 4\nhost_gbps = " + std::string(g) + "\n", 3, "host_gbps",
                         "must be a finite number > 0"))
        << g;
  }
  // Below the engine's 1e3 bit/s floor: the engine's own range check, at the key.
  EXPECT_TRUE(fails_at(bs + "hosts = 4\nhost_gbps = 1e-9\n", 3, "host_gbps", "between 1e3"));
  EXPECT_TRUE(fails_at(bs + "hosts = 1\nhost_gbps = 1\n", 2, "hosts", "at least two hosts"));
  const std::string tt = "kind = \"two_tier\"\nhosts_per_rack = 4\nspines = 2\nhost_gbps = 1\n";
  EXPECT_TRUE(fails_at(tt + "racks = 0\n", 5, "racks", "out of range"));
  EXPECT_TRUE(fails_at(tt + "racks = 2\nspine_gbps = -1\n", 6, "spine_gbps", "> 0"));
  EXPECT_TRUE(fails_at(tt + "racks = 2\nspine_gbps = 2e6\n", 6, "spine_gbps", "between 1e3"));
  EXPECT_TRUE(fails_at("kind = \"explicit\"\n[[link]]\nname = \"l\"\ngbps = 0\n", 4, "link[0].gbps",
                       "> 0"));
}

TEST(NetworkTomlErrors, MoreThanMaxHostsIsRejected) {
  const std::string too_many = std::to_string(Topology::kMaxHosts + 1);
  EXPECT_TRUE(fails_at("kind = \"big_switch\"\nhosts = " + too_many + "\nhost_gbps = 1\n", 2,
                       "hosts", "out of range"));
  EXPECT_TRUE(fails_at("kind = \"big_switch\"\nhosts = 16777215\nspare_hosts = 2\nhost_gbps = 1\n",
                       3, "spare_hosts", "exceeds 16777216"));
  EXPECT_TRUE(fails_at("kind = \"two_tier\"\nracks = 4097\nhosts_per_rack = 4096\n"
                       "spines = 1\nhost_gbps = 1\n",
                       3, "hosts_per_rack", "must be in [2, 16777216]"));
}

TEST(NetworkTomlErrors, InvalidAddressNamesTheEntryAndTheString) {
  std::string msg = error_of(R"(kind = "big_switch"
hosts = 4
host_gbps = 10
[[host]]
addresses = ["10.0.0.1"]
[[host]]
addresses = ["10.0.0.2", "10.0.0.300"]
)");
  EXPECT_EQ(msg, "net.toml:7: host[1].addresses[1]: \"10.0.0.300\" is not an IPv4 address");
}

TEST(NetworkTomlErrors, DuplicateAddressesAreRejected) {
  const std::string bs = "kind = \"big_switch\"\nhosts = 4\nhost_gbps = 10\n";
  EXPECT_TRUE(fails_at(bs + "[[host]]\naddresses = [\"10.0.0.1\"]\n[[host]]\n"
                            "addresses = [\"10.0.0.1\"]\n",
                       7, "host[1].addresses[0]", "already an address of host 0 (\"h0\")"));
  EXPECT_TRUE(fails_at(bs + "[[host]]\naddresses = [\"10.0.0.1\", \"10.0.0.1\"]\n", 5,
                       "host[0].addresses[1]", "already an address of host 0"));
  // A host named by a dotted quad has that address, so it clashes too.
  EXPECT_TRUE(fails_at(bs + "[[host]]\naddresses = [\"10.0.0.1\"]\n[[host]]\n"
                            "name = \"10.0.0.1\"\n",
                       7, "host[1].name", "already an address of host 0"));
}

TEST(NetworkTomlErrors, DuplicateHostNamesAreRejectedIncludingDefaultNames) {
  const std::string bs = "kind = \"big_switch\"\nhosts = 4\nhost_gbps = 10\n";
  EXPECT_TRUE(fails_at(bs + "[[host]]\nname = \"web\"\n[[host]]\nname = \"web\"\n", 7,
                       "host[1].name", "\"web\" is already the name of host 0"));
  // Host 0 takes the default name of host 3, which keeps it.
  EXPECT_TRUE(fails_at(bs + "[[host]]\nname = \"h3\"\n", 5, "host[0].name",
                       "\"h3\" is also the default name of host 3"));
  // Host 3 takes the default name of host 1.
  EXPECT_TRUE(fails_at(bs + "[[host]]\nindex = 3\nname = \"h1\"\n", 6, "host[0].name",
                       "already the name of host 1"));
}

TEST(NetworkTomlErrors, InvalidHostNamesAreRejected) {
  const std::string bs = "kind = \"big_switch\"\nhosts = 4\nhost_gbps = 10\n[[host]]\n";
  for (std::string bad : {std::string(""), std::string("two words"), std::string("tab\\there"),
                          std::string(65, 'n')}) {
    EXPECT_TRUE(fails_at(bs + "name = \"" + bad + "\"\n", 5, "host[0].name",
                         "is not a valid name (1-64 characters, no whitespace)"))
        << bad;
  }
  EXPECT_NO_THROW(load(bs + "name = \"" + std::string(64, 'n') + "\"\n"));
}

TEST(NetworkTomlErrors, HostIndexesMustBeInRangeAndUnique) {
  const std::string bs = "kind = \"big_switch\"\nhosts = 2\nhost_gbps = 10\nspare_hosts = 4\n";
  // Spare slots are for add_host(), not for configuration.
  EXPECT_TRUE(fails_at(bs + "[[host]]\nindex = 2\n", 6, "host[0].index", "out of range [0, 1]"));
  EXPECT_TRUE(fails_at(bs + "[[host]]\nindex = -1\n", 6, "host[0].index", "out of range"));
  EXPECT_TRUE(fails_at(bs + "[[host]]\nname = \"x\"\n[[host]]\nindex = 0\n", 8, "host[1].index",
                       "host 0 is already configured by host[0]"));
  EXPECT_TRUE(fails_at(bs + "[[host]]\n[[host]]\n[[host]]\nname = \"third\"\n", 7, "host[2]",
                       "give an index"));
}

TEST(NetworkTomlErrors, ExplicitLinksMustBeNamedOnceAndPresent) {
  EXPECT_TRUE(fails_at("kind = \"explicit\"\n", 1, "link", "at least one [[link]]"));
  EXPECT_TRUE(fails_at("kind = \"explicit\"\n[[link]]\nname = \"l\"\ngbps = 1\n[[link]]\n"
                       "name = \"l\"\ngbps = 2\n",
                       6, "link[1].name", "\"l\" is already the name of link[0]"));
  EXPECT_TRUE(fails_at("kind = \"explicit\"\n[[link]]\ngbps = 1\n", 2, "link[0].name", "missing"));
  EXPECT_TRUE(fails_at("kind = \"explicit\"\n[[link]]\nname = \"l\"\ngbps = 1\n[[host]]\n"
                       "up = \"l\"\ndown = \"l\"\n",
                       1, "host", "at least two [[host]]"));
}

TEST(NetworkTomlErrors, ExplicitHostsNeedKnownUpAndDownLinks) {
  const std::string links = "kind = \"explicit\"\n[[link]]\nname = \"l\"\ngbps = 1\n";
  EXPECT_TRUE(fails_at(links + "[[host]]\nup = \"l\"\ndown = \"m\"\n[[host]]\nup = \"l\"\n"
                               "down = \"l\"\n",
                       7, "host[0].down", "no [[link]] named \"m\""));
  EXPECT_TRUE(fails_at(links + "[[host]]\nup = \"l\"\n[[host]]\nup = \"l\"\ndown = \"l\"\n", 5,
                       "host[0].down", "missing"));
  EXPECT_TRUE(fails_at(links + "[[host]]\nup = \"l\"\ndown = \"l\"\nindex = 0\n[[host]]\n"
                               "up = \"l\"\ndown = \"l\"\n",
                       8, "host[0].index", "allowed: name, addresses, up, down"));
}

TEST(NetworkTomlErrors, RoutesMustReferToKnownHostsAndLinks) {
  const std::string t(kTriangle);
  EXPECT_TRUE(fails_at(t + "[[route]]\nsrc = \"a\"\ndst = \"zed\"\n", 32, "route[1].dst",
                       "no [[host]] named \"zed\""));
  EXPECT_TRUE(fails_at(t + "[[route]]\nsrc = \"b\"\ndst = \"a\"\nvia = [\"core\", \"nope\"]\n", 33,
                       "route[1].via[1]", "no [[link]] named \"nope\""));
  EXPECT_TRUE(fails_at(t + "[[route]]\nsrc = \"b\"\n", 30, "route[1].dst", "missing"));
  EXPECT_TRUE(fails_at(t + "[[route]]\nsrc = \"b\"\ndst = \"b\"\n", 32, "route[1].dst",
                       "two distinct hosts"));
  // Hosts may be named by address in routes too.
  EXPECT_NO_THROW(load(t + "[[route]]\nsrc = \"b\"\ndst = \"10.0.0.1\"\n"));
}

TEST(NetworkTomlErrors, RoutesHoldAtMostFourLinksNoneTwice) {
  const std::string t(kTriangle);
  EXPECT_TRUE(fails_at(t + "[[route]]\nsrc = \"b\"\ndst = \"a\"\nvia = [\"core\", \"a.up\", "
                           "\"b.down\"]\n",
                       33, "route[1].via", "exceed 4 links per path"));
  EXPECT_TRUE(fails_at(t + "[[route]]\nsrc = \"b\"\ndst = \"a\"\nvia = [\"core\", \"b.up\"]\n",
                       30, "route[1]", "uses link \"b.up\" twice"));
  EXPECT_TRUE(fails_at(t + "[[route]]\nsrc = \"a\"\ndst = \"b\"\n", 30, "route[1]",
                       "a route from \"a\" to \"b\" is already given"));
  // Four links is the limit, not an error.
  Network n = load(t + "[[route]]\nsrc = \"b\"\ndst = \"a\"\nvia = [\"core\", \"a.up\"]\n");
  EXPECT_EQ(link_names_of(n, n.path(1, 0, 0)),
            (std::vector<std::string>{"b.up", "core", "a.up", "a.down"}));
}

TEST(NetworkTomlErrors, UnreadableFileNamesThePath) {
  try {
    Network::from_toml_file("/nonexistent/net.toml");
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("/nonexistent/net.toml: cannot open", 0), 0u)
        << e.what();
  }
}

// Only a regular file of bounded size is read: a FIFO would block the
// daemon's start forever, /dev/zero would fill its memory, a directory
// would read as nothing.
TEST(NetworkTomlErrors, OnlyRegularFilesAreRead) {
  auto error_of = [](const std::string& path) {
    try {
      Network::from_toml_file(path);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no ConfigError");
  };
  EXPECT_EQ(error_of("/dev/zero"), "/dev/zero: not a regular file");
  EXPECT_EQ(error_of("/tmp"), "/tmp: not a regular file");
  char dir[] = "/tmp/ft-net-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string fifo = std::string(dir) + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of(fifo), fifo + ": not a regular file");  // returns: no writer needed
  ::unlink(fifo.c_str());
  // Past the bound (64 MiB), refused without parsing.
  const std::string big = std::string(dir) + "/big.toml";
  {
    std::FILE* f = std::fopen(big.c_str(), "w");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(::ftruncate(::fileno(f), (64 << 20) + 1), 0);
    std::fclose(f);
  }
  EXPECT_NE(error_of(big).find("larger than 67108864 bytes"), std::string::npos) << error_of(big);
  ::unlink(big.c_str());
  ::rmdir(dir);
}

// ---- examples/topologies ----

std::string example(std::string_view name) {
  return std::string(FT_SOURCE_DIR) + "/examples/topologies/" + std::string(name);
}

TEST(NetworkExamples, BigSwitchLoads) {
  Network n = Network::from_toml_file(example("bigswitch.toml"));
  EXPECT_EQ(n.num_hosts(), 8u);
  EXPECT_EQ(n.spare_slots(), 8u);
  EXPECT_EQ(n.topology().capacities_bps(), Topology::big_switch(16, 10e9).capacities_bps());
  EXPECT_EQ(n.find_host("192.168.1.1"), n.find_host("web1"));
  EXPECT_EQ(n.find_host("db"), 7u);
}

TEST(NetworkExamples, TwoTierIsThePapersNetwork) {
  Network n = Network::from_toml_file(example("two_tier.toml"));
  Topology want = Topology::two_tier(alloc::TwoTierSpec{});  // Defaults: 9 x 16, 4 spines.
  EXPECT_EQ(n.num_hosts(), 144u);
  EXPECT_EQ(n.topology().num_spines(), 4u);
  EXPECT_EQ(n.topology().capacities_bps(), want.capacities_bps());
  EXPECT_EQ(n.topology().capacity_bps(2 * 144), 40e9);
  EXPECT_EQ(n.find_host("10.1.8.16"), 143u);
  EXPECT_EQ(n.find_host("r1h0"), 16u);
}

TEST(NetworkExamples, ExplicitParkingLotRoutesOnlyItsPairs) {
  Network n = Network::from_toml_file(example("explicit.toml"));
  HostId a = n.find_host("a").value();
  HostId b = n.find_host("b").value();
  HostId c = n.find_host("10.0.0.3").value();
  HostId d = n.find_host("d").value();
  EXPECT_EQ(link_names_of(n, n.path(a, b, 0)),
            (std::vector<std::string>{"a.up", "core1", "core2", "b.down"}));
  EXPECT_EQ(link_names_of(n, n.path(c, d, 0)),
            (std::vector<std::string>{"c.up", "core2", "d.down"}));
  EXPECT_EQ(n.path(a, c, 0), std::nullopt);
  EXPECT_EQ(n.path(b, a, 0), std::nullopt);
}

}  // namespace
}  // namespace flowtune::daemon
