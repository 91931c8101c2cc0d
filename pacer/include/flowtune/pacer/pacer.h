// flowtune-pacer: one pacer per host for every socket on it. Each socket is
// paced by its own kernel timer (SO_MAX_PACING_RATE); when a busy CPU delays
// those timers they catch up together, and a new connection's first ten
// segments are never paced, so a host can emit well above the sum of its
// rates for a millisecond, which overflows a shallow switch buffer under
// incast. The pacer bounds the host as a whole: the allocator tells it the
// sum of the rates it gave the host's flows (wire: hello.hostPacer,
// AllocatorMessage.hostRate) and the pacer keeps a tbf on the host's egress
// at that sum, so the host never sends more than its rates plus one bucket,
// whatever its sockets' timers do. Without fq (this kernel has none) a qdisc
// is the only pacer shared by sockets; with fq and EDT a deployment would set
// the aggregate with an EDT BPF program instead.
//
// HostPacer is the pure part (what to shape to, when the lease lapses); the
// Shaper applies it with tc; main.cc speaks ZeroMQ.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "flowtune/wire/messages.h"

namespace flowtune::pacer {

struct PacerConfig {
  double link_bps = 1e9;  // the host's link, bit/s on the wire
  // Wire bytes per payload byte: rates are TCP payload, tbf counts frames
  // (1514 bytes carry 1448 of payload with timestamps).
  double overhead = 1514.0 / 1448.0;
  // Kept above the sum so the aggregate never throttles what the sockets'
  // own pacing lets out on average.
  // Measured: 0.01 with no floor kept 8 long flows' Jain index at 0.88
  // where 0.02 + 10 Mbit/s gave 0.77 and 0.10 worse (a host with a backlog
  // in its tbf sends at the tbf's rate, above its share, until it drains).
  double margin = 0.01;
  // Added for traffic the allocator does not schedule (mice, control); it
  // is given to every host, scheduled or not, so it costs fairness too.
  double floor_bps = 0;
  // An allocation is never shaped below this (0: no minimum). tbf arms its
  // timer for the next frame at the rate of the moment; should a change not
  // re-arm it, a raise after a cut to a tiny allocation would wait for that
  // timer (a frame at 100 kbit/s: 120 ms), and a minimum bounds the wait.
  // Off by default: no such stall was measured, and a full run with a
  // minimum of link / 100 dropped packets in 14 of 40 shallow rounds where
  // the run without had none.
  double min_bps = 0;
  // A lower rate is applied only once it is this fraction below the one in
  // force (raises always are): fewer tc calls while flows come and go. Off
  // by default: hosts' tbfs then add up past what the allocator scheduled
  // (5% on top of 97.3% of the wire), and coflow rounds dropped packets
  // again (up to 695 a round).
  double lower_hysteresis = 0;
  // A raise sets the tbf this fraction above what the allocation needs, so
  // the small raises that follow (flows joining, prices settling) fit
  // under it without another change. 0 (default): exactly the allocation.
  double raise_slack = 0;
  // The rate while the host has no rated flow (new flowlets start before
  // their rates arrive): the link by default.
  double idle_bps = 0;  // 0 = link_bps
  // When the host's last rated flow ends, its rate is kept this long before
  // the idle rate: a flowlet that starts meanwhile (the shim ends one each
  // time a socket's queue drains between writes) leaves at the host's last
  // allocation, not at the link rate, until its own rate arrives.
  std::uint64_t idle_hold_us = 100'000;
  // The tbf's bucket. At a rate R the bucket must cover the delay of the
  // tbf's own timer: tokens beyond the bucket are lost, so a host whose
  // timer fires D late is held to about bucket / (bucket / R + D). With the
  // constant two-frame bucket one flow alone on a host moved 635-787 Mbit/s
  // of its 930 in a full run, and one paced iperf3 flow through a 975 Mbit/s
  // tbf 604-646 Mbit/s against 866-871 with a 24 KB bucket. burst_us > 0
  // gives an allocated host burst_us at its rate (never less than
  // burst_bytes; an idle host keeps burst_bytes, so hosts that idled
  // together cannot burst together: 16 KB each dropped 1.5% of packets in
  // coflow rounds). tbf refills its bucket on every change, so each rate
  // change is a free bucket: without burst_gap_share, coflow rounds with
  // 200 us dropped 0.1-0.6% of packets in 3 of 5 sets against 1 of 5
  // without; with it, none in 3 sets. Off by default all the same: in the
  // testbed a fast host is held back by tbf splitting its GSO packets into
  // frames (per-frame CPU), which no bucket below 64 KB avoids
  // (docs/pacer.md).
  std::uint32_t burst_bytes = 3028;  // two full frames
  std::uint64_t burst_us = 0;        // 0: always burst_bytes
  // What bounds those free buckets: a change's bucket is at most this share
  // of what the rate sends in the time since the previous change (and never
  // below burst_bytes), so however often the rate changes the refills add at
  // most this share to the host's rate, plus one full bucket. A host whose
  // rate changes every millisecond (flowlets coming and going in incast)
  // keeps the small bucket; one whose rate holds for tens of milliseconds
  // (long flows) gets burst_us. 1: no bound (burst_us at every change).
  double burst_gap_share = 0.05;
  std::uint64_t lease_us = 1'000'000;  // until a refresh: then unshaped
};

// What the tbf is set to: rate (bit/s on the wire) and bucket (bytes).
struct Shape {
  double bps = 0;
  std::uint32_t burst_bytes = 0;
  bool operator==(const Shape&) const = default;
};

// Throws std::invalid_argument naming the field.
void validate(const PacerConfig& c);

// When the host's sockets should build small packets (Linux's
// net.ipv4.tcp_tso_rtt_log at 0). A socket with a small RTT otherwise
// sends up to 64 KB at a time however low its rate, which costs twice:
// the socket waits 64 KB / its rate before its next send, even after its
// rate is raised, and the packet sits 64 KB / the host's rate in the host's
// tbf, which inflates the socket's RTT and so holds its congestion window
// back. Small packets cost CPU per packet, which a fast host with many
// flows pays most. Each threshold 0 turns its test off.
struct PacketSizeRule {
  double flow_below_bps = 10e6;   // the flows' mean rate (64 KB: 52 ms)
  double host_below_bps = 100e6;  // the host's shaped rate (64 KB: 5 ms)
};

// Each test on from below its threshold, off again only at twice it (so a
// rate near one does not flip the setting at every change); small while
// either is on. Each test keeps its own state: one that never fired does not
// hold the other's decision.
struct PacketSizeState {
  bool by_flows = false;
  bool by_host = false;
  bool small() const { return by_flows || by_host; }
};
// The state after the flows' mean rate `flow_bps` and the host's shaped rate
// `host_bps` (host_bps < 0: no allocation, the host test is off).
PacketSizeState small_packets(PacketSizeState now, double flow_bps, double host_bps,
                              const PacketSizeRule& r);

class HostPacer {
 public:
  explicit HostPacer(const PacerConfig& c) : c_(c) {}

  // A message from the allocator; returns the new shape when it changed.
  std::optional<Shape> on_message(const wire::AllocatorMessage& m, std::uint64_t now_us);
  // The lease lapsed (the allocator is silent): back to the link rate; or
  // the idle hold ended: the idle rate.
  std::optional<Shape> on_tick(std::uint64_t now_us);
  // When on_tick() has work next; UINT64_MAX when nothing is due.
  std::uint64_t next_tick_us() const {
    return std::min(leased_ ? lease_until_us_ : UINT64_MAX, idle_at_us_);
  }

  // Wire bit/s that carries `host_rate` payload bytes/s, within [floor, link].
  double shaping_bps(std::uint64_t host_rate) const;
  // The bucket at `bps` for an allocation applied `gap_us` after the
  // previous change (PacerConfig::burst_us, burst_gap_share); an unallocated
  // host gets burst_bytes.
  std::uint32_t bucket_bytes(double bps, bool allocated,
                             std::uint64_t gap_us = UINT64_MAX) const;
  double current_bps() const { return current_.bps; }
  std::uint32_t current_burst() const { return current_.burst_bytes; }
  std::uint64_t host_rate() const { return host_rate_; }
  // The flows' rate a packet-size decision goes by (small_packets): the
  // mean payload rate of the host's rated flows, as each socket is paced
  // at its own rate; the shaped rate while the host has none (or an older
  // allocator does not say how many).
  double mean_flow_bps() const {
    return host_flows_ > 0 ? static_cast<double>(host_rate_) * 8.0 / host_flows_ : current_.bps;
  }
  // The packet-size state after this pacer's rates: unchanged before any
  // shape is applied (nothing is known yet); the host test only while the
  // host has an allocation (an idle or lapsed host runs at its idle or link
  // rate, which says nothing of its flows).
  PacketSizeState packet_size(PacketSizeState now, const PacketSizeRule& r) const {
    if (current_.bps < 0) return now;
    return small_packets(now, mean_flow_bps(), allocated_ ? current_.bps : -1, r);
  }
  bool leased() const { return leased_; }

 private:
  std::optional<Shape> set(double bps, bool allocated, std::uint64_t now_us);

  PacerConfig c_;
  std::uint64_t host_rate_ = 0;
  std::uint32_t host_flows_ = 0;
  bool leased_ = false;
  std::uint64_t lease_until_us_ = 0;
  std::uint64_t idle_at_us_ = UINT64_MAX;  // the idle hold ends
  Shape current_{-1, 0};  // nothing applied yet
  bool allocated_ = false;  // current_ is an allocation's shape
  // The allocation the last slack raise was for (current_ is up to
  // raise_slack above it); none when current_ came any other way.
  std::optional<double> raised_for_bps_;
  std::uint64_t changed_at_us_ = UINT64_MAX;  // the last change applied; none yet
};

// Keeps DEV's egress shaped through one long-lived `tc -batch` (a fork per
// change would cost more than the change). The tbf does the shaping in every
// layout. With htb, small packets (IP length below 256: pure ACKs,
// requests) and traffic to the allocator go around it (u32 filters into a
// class of their own): a host that receives far more than it sends would
// otherwise hold the ACKs of what it receives to the rate of what it sends,
// and a flowlet's start would wait behind the host's data. Must run in the
// host's network namespace with CAP_NET_ADMIN.
// (prio, which would do the same with less work, is not built into every
// kernel: not into the testbed's.)
enum class Qdisc {
  kTbf,  // one tbf at the root: every packet shaped, ACKs and control too (the default)
  kHtb,  // htb classifies: data to the tbf, small packets and control around it
};

// The tc batch line that sets DEV's tbf to `s` ("qdisc VERB dev DEV ... tbf
// ..."). Its peak bucket (frame_bytes at a peak rate far above the link, so
// never the limit) caps the packets tbf queues at frame_bytes: larger GSO
// packets are split into frames as they arrive. Without it tbf would queue
// them whole under a large bucket and never send them once the bucket
// shrank below them.
std::string tbf_line(const std::string& dev, Qdisc qdisc, double link_bps,
                     std::uint32_t frame_bytes, const char* verb, const Shape& s);

class Shaper {
 public:
  // Installs the qdiscs shaped to `initial`; link_bps is the device's rate
  // (with htb, both classes may use it all: htb only classifies), frame_bytes
  // the smallest bucket ever set. control_ip (IPv4, host order) and
  // control_port name the allocator (0: no control class). Throws
  // std::runtime_error with tc's reason.
  Shaper(std::string dev, Qdisc qdisc, double link_bps, std::uint32_t frame_bytes, Shape initial,
         std::uint32_t control_ip, std::uint16_t control_port);
  ~Shaper();  // removes the qdisc: the device is back to its default
  Shaper(const Shaper&) = delete;
  Shaper& operator=(const Shaper&) = delete;

  // False when tc has gone away (the reason on stderr).
  bool set(const Shape& s);
  std::uint64_t changes() const { return changes_; }
 private:
  std::string dev_;
  Qdisc qdisc_;
  double link_bps_;
  std::uint32_t frame_bytes_;
  FILE* tc_ = nullptr;
  std::uint64_t changes_ = 0;
};

}  // namespace flowtune::pacer
