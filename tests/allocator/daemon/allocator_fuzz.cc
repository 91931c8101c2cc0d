// libFuzzer target over message decoding + handling: the input is a script of
// operations on one Allocator (raw frames from a few peers, well-formed
// messages built from input bytes so deep states are reachable, iterations,
// time jumps, bad frame counts; starts with coflow ids, planned under a
// coflow policy the first byte picks, as is the lease tick's slice). After
// every operation:
//   - nothing crashed, leaked or tripped a sanitizer;
//   - the flow count equals the flows listed, and the endpoints' holds equal
//     the holders listed (one socket written by several endpoints is one flow);
//   - every added host slot's charges are counted by the sources charged,
//     and none stays charged once no endpoint or flow is left;
//   - every emitted message survives the real codec;
//   - after an iteration, the rates endpoints hold (last sent) fit every
//     link's real capacity (threshold slack included; F-NORM).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "flowtune/daemon/allocator.h"
#include "flowtune/wire/codec.h"

namespace {

using namespace flowtune;

constexpr std::uint32_t kHosts = 6;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "allocator_fuzz: %s\n", what);
  std::abort();
}

struct Reader {
  std::span<const std::uint8_t> in;
  std::size_t pos = 0;
  bool done() const { return pos >= in.size(); }
  std::uint8_t byte() { return done() ? 0 : in[pos++]; }
  std::span<const std::uint8_t> take(std::size_t n) {
    n = std::min(n, in.size() - pos);
    auto s = in.subspan(pos, n);
    pos += n;
    return s;
  }
};

wire::FlowletStart start_from(Reader& r) {
  wire::FlowletStart s;
  s.flow_key = 1 + r.byte() % 16u;  // keys on the wire start at 1
  const std::uint8_t b = r.byte();
  if (b & 1) {
    // Addresses 10.0.0.x, some unknown.
    s.endpoints = wire::FiveTuple{0x0a000000u + r.byte() % 8, 0x0a000000u + r.byte() % 8,
                                  r.byte(), 80, 6};
  } else {
    s.endpoints = wire::HostPair{r.byte() % (kHosts + 1), r.byte() % (kHosts + 1)};
  }
  s.weight = (b & 2) ? 1.0f : static_cast<float>(1 + r.byte() % 8);
  s.coflow_id = (b >> 2) & 3;  // 0 = none; planned when the allocator has a coflow policy
  s.bytes = r.byte();
  return s;
}

std::vector<std::uint8_t> structured(Reader& r) {
  wire::EndpointMessage m;
  const int n = 1 + r.byte() % 4;
  for (int i = 0; i < n && !r.done(); ++i) {
    switch (r.byte() % 7) {
      case 0:
        if (i == 0) {
          m.events.emplace_back(wire::Hello{"ep" + std::to_string(r.byte() % 4),
                                            "h" + std::to_string(r.byte() % (kHosts + 1))});
        }
        break;
      case 1: m.events.emplace_back(start_from(r)); break;
      case 2: m.events.emplace_back(wire::FlowletEnd{1 + r.byte() % 16u}); break;
      case 3: m.events.emplace_back(wire::Heartbeat{}); break;
      case 4: {
        wire::Resync rs;
        const int k = r.byte() % 6;
        for (int j = 0; j < k; ++j) rs.flows.push_back(start_from(r));
        m.events.emplace_back(std::move(rs));
        break;
      }
      case 5: m.events.emplace_back(wire::RateRequest{{1 + r.byte() % 16u, 1 + r.byte() % 16u}}); break;
      case 6: {
        const std::uint64_t bytes = r.byte() * 4096u;
        m.events.emplace_back(wire::Progress{{{1 + r.byte() % 16u, bytes, bytes / (1 + r.byte() % 4u)}}});
        break;
      }
    }
  }
  // A digest, right or wrong: a mismatch is answered, never trusted.
  if (!r.done() && (r.byte() & 1)) m.digest = wire::StateDigest{r.byte() % 4u, r.byte()};
  return wire::encode(m);
}

void check(daemon::Allocator& a, bool after_iteration) {
  std::size_t holds = 0;
  for (const auto& e : a.endpoints(0)) holds += e.flows;
  std::size_t holders = 0, listed = 0;
  for (const auto& f : a.flows(0, SIZE_MAX)) {
    if (f.holders < 1) fail("a listed flow has no holder");
    holders += f.holders;
    ++listed;
  }
  if (listed != a.num_flows()) fail("listed flows disagree with the engine");
  if (holds != holders) fail("endpoint flow counts disagree with the flows' holders");
  if (a.host_charges_by_slot() != a.host_charges_by_source()) {
    fail("host slots' charges disagree with their sources' counts");
  }
  if (a.num_endpoints() == 0 && a.num_flows() == 0 && a.host_charges_by_slot() != 0) {
    fail("host slots stay charged with nothing on them");
  }
  for (const auto& o : a.take_outbox()) {
    wire::AllocatorMessage back;
    if (!wire::decode(wire::encode(o.message), &back).ok()) fail("emitted message does not decode");
    for (const auto& r : o.message.rates) {
      if (r.bytes_per_sec == 0) fail("zero rate sent");
    }
  }
  if (!after_iteration) return;
  std::vector<double> held(a.network().topology().num_links(), 0);
  for (const auto& f : a.flows(0, SIZE_MAX)) {
    for (auto l : f.path) held[l] += f.sent_rate_bps;
  }
  for (std::size_t l = 0; l < held.size(); ++l) {
    // Rates are rounded to whole bytes/s: allow that much per flow.
    if (held[l] > a.network().topology().capacity_bps(static_cast<alloc::LinkId>(l)) + 64 * 8) {
      fail("rates held by endpoints exceed a link's capacity");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader r{{data, size}};
  daemon::AllocatorConfig c;
  c.max_messages_per_sec = 1000;
  c.max_flows_per_endpoint = 12;
  c.max_endpoints = 3;
  // Peers a and b share one address, c and d another: quotas small enough
  // to bind (flows and endpoints per source, and one added host each).
  c.max_flows_per_source = 20;
  c.max_endpoints_per_source = 2;
  c.max_hosts_per_source = 1;
  const std::uint8_t setup = r.byte();
  c.unknown_hosts = (setup & 1) ? daemon::UnknownHosts::kAdd : daemon::UnknownHosts::kReject;
  // A coflow policy for some inputs (the plan sets floors the iteration and
  // F-NORM must keep within every link), aging that matters at the script's
  // time steps for some of those.
  c.coflow_policy = static_cast<alloc::CoflowPolicy>((setup >> 1) & 3);
  c.coflow_share = (setup & 8) ? 1.0 : 0.7;
  c.coflow_aging_s = (setup & 16) ? 1e-3 : 0;
  // For half the inputs a tick's scan takes 1-13 flows a call, so scans
  // span several time steps with messages, iterations and compactions
  // between their calls.
  if (setup & 32) c.timer_slice = 1 + 4 * static_cast<std::uint32_t>(setup >> 6);
  daemon::Network net = daemon::Network::big_switch(kHosts - 2, 1e9, 2);
  daemon::Allocator a(std::move(net), c, 7, nullptr);
  std::uint64_t now = 1;
  while (!r.done()) {
    const std::uint8_t op = r.byte();
    const std::string peer(1, static_cast<char>('a' + op % 4));
    const std::string_view address = op % 4 < 2 ? "10.0.0.1" : "10.0.0.2";
    bool iterated = false;
    switch ((op >> 2) % 7) {
      case 0: {  // raw bytes
        const std::size_t n = r.byte();
        a.on_message(peer, r.take(n), now, nullptr, address);
        break;
      }
      case 1: a.on_message(peer, structured(r), now, nullptr, address); break;
      case 2:  // as the server's turn does: early rates for what started
        a.on_message(peer, structured(r), now, nullptr, address);
        a.tell_early_rates(now);
        break;
      case 3:
        for (int i = 0; i < 1 + r.byte() % 8 && a.busy(); ++i) a.iterate(now);
        iterated = true;
        break;
      case 4:
        now += static_cast<std::uint64_t>(r.byte()) * 20'000;
        if (now >= a.next_timer_us()) a.on_timer(now);
        break;
      case 5: a.on_bad_frames(peer, r.byte() % 5, now); break;
      case 6: a.compact_if_sparse(/*min_room=*/0); break;  // tables this small are never compacted by default
    }
    ++now;
    check(a, iterated);
  }
  return 0;
}
