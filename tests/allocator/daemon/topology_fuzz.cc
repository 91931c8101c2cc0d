// libFuzzer target over the topology file parser: the input is the text of a
// --topology file (Network::from_toml_string, what from_toml_file reads).
// Checked, beyond nothing crashing or tripping a sanitizer:
//   - a refused file throws ConfigError (no other exception) whose message
//     names the file and says more ("fuzz.toml:LINE: key: reason");
//   - an accepted network is usable: every host's name finds that host, every
//     link has a name and a capacity in the engine's range, and paths between
//     hosts hold 1-4 distinct links that exist.
// Work is bounded by the harness, not the input's length: a 40-byte file may
// ask for 2^24 hosts (a legal network, and gigabytes under ASan), so files
// whose top-level counts (hosts, spare_hosts, racks, hosts_per_rack, spines)
// add up to more than kMaxSlots hosts or links are skipped; counts the
// parser refuses as out of range are kept, they cost nothing. Run with
// -max_len=4096.
#include <toml++/toml.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "flowtune/alloc/engine.h"
#include "flowtune/daemon/network.h"

namespace {

using namespace flowtune;

constexpr std::int64_t kMaxSlots = 4096;
constexpr std::uint32_t kMaxChecked = 256;  // hosts and links looked at per network

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "topology_fuzz: %s\n", what);
  std::abort();
}

// A top-level count as the parser would take it; 1 when absent, out of
// range (refused early) or not an integer.
std::int64_t count(const toml::table& root, std::string_view key) {
  const auto* i = root.get(key) == nullptr ? nullptr : root.get(key)->as_integer();
  if (i == nullptr || i->get() < 0 || i->get() > alloc::Topology::kMaxHosts) return 1;
  return std::max<std::int64_t>(i->get(), 1);
}

// Whether the document asks for a large network.
bool too_big(const toml::table& root) {
  const std::int64_t racks = count(root, "racks");
  return count(root, "hosts") + count(root, "spare_hosts") > kMaxSlots ||
         racks * count(root, "hosts_per_rack") > kMaxSlots ||
         racks * count(root, "spines") > kMaxSlots;
}

void check_path(const daemon::Network& net, alloc::HostId s, alloc::HostId d, std::uint64_t hash) {
  const auto p = net.path(s, d, hash);
  if (!p) {
    if (net.topology().kind() != alloc::TopologyKind::kExplicit) {
      fail("a switched network has no path between two hosts");
    }
    return;
  }
  if (p->size < 1 || p->size > alloc::kMaxPathLinks) fail("a path has 0 or too many links");
  std::set<alloc::LinkId> seen;
  for (alloc::LinkId l : *p) {
    if (l >= net.topology().num_links()) fail("a path names a link that does not exist");
    if (!seen.insert(l).second) fail("a path crosses a link twice");
  }
}

void check(const daemon::Network& net) {
  const alloc::Topology& t = net.topology();
  if (net.num_hosts() < 1 || net.live_hosts() != net.num_hosts()) fail("bad host count");
  if (t.num_links() < 1) fail("a network without links");
  for (alloc::LinkId l = 0; l < t.num_links() && l < kMaxChecked; ++l) {
    if (net.link_name(l).empty()) fail("a link without a name");
    const double c = t.capacity_bps(l);
    if (!(c >= alloc::kMinRateBps && c <= alloc::kMaxRateBps)) fail("a capacity out of range");
  }
  const std::uint32_t n = std::min(net.num_hosts(), kMaxChecked);
  for (alloc::HostId h = 0; h < n; ++h) {
    const std::string& name = net.host_name(h);
    if (name.empty()) fail("a configured host without a name");
    const auto found = net.find_host(name);
    if (!found || *found != h) fail("a host's name does not find it");
    (void)net.site_of_host(h);
  }
  for (alloc::HostId h = 0; h + 1 < n; ++h) {
    check_path(net, h, h + 1, h);
    check_path(net, h + 1, h, 7 * h);
  }
  if (net.num_hosts() >= 2) check_path(net, 0, net.num_hosts() - 1, 3);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    if (too_big(toml::parse(text))) return -1;  // not added to the corpus
  } catch (const toml::parse_error&) {
    // The parser under test refuses it too, with its reason.
  }
  try {
    const daemon::Network net = daemon::Network::from_toml_string(text, "fuzz.toml");
    check(net);
  } catch (const daemon::ConfigError& e) {
    const std::string_view what = e.what();
    if (what.substr(0, 10) != "fuzz.toml:" || what.size() <= 11) {
      std::fprintf(stderr, "topology_fuzz: reason: %s\n", e.what());
      fail("a refusal does not name the file and say why");
    }
  }
  return 0;
}
