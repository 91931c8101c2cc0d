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
  // The rate while the host has no rated flow (new flowlets start before
  // their rates arrive): the link by default.
  double idle_bps = 0;  // 0 = link_bps
  // When the host's last rated flow ends, its rate is kept this long before
  // the idle rate: a flowlet that starts meanwhile (the shim ends one each
  // time a socket's queue drains between writes) leaves at the host's last
  // allocation, not at the link rate, until its own rate arrives.
  std::uint64_t idle_hold_us = 100'000;
  // The tbf's bucket, bytes: two full frames. A bucket larger than the
  // GSO packets a socket hands down lets them through whole, and all hosts
  // idling with full buckets then burst together into a shared port (with
  // 16 KB: 1.5% of packets dropped in coflow rounds, against none); one that
  // varies with the rate can strand a packet queued under a larger one
  // (tbf never sends a packet larger than its bucket).
  std::uint32_t burst_bytes = 3028;
  std::uint64_t lease_us = 1'000'000;  // until a refresh: then unshaped
};

// Throws std::invalid_argument naming the field.
void validate(const PacerConfig& c);

class HostPacer {
 public:
  explicit HostPacer(const PacerConfig& c) : c_(c) {}

  // A message from the allocator; returns the new shaping rate (bit/s) when
  // it changed.
  std::optional<double> on_message(const wire::AllocatorMessage& m, std::uint64_t now_us);
  // The lease lapsed (the allocator is silent): back to the link rate; or
  // the idle hold ended: the idle rate.
  std::optional<double> on_tick(std::uint64_t now_us);
  // When on_tick() has work next; UINT64_MAX when nothing is due.
  std::uint64_t next_tick_us() const {
    return std::min(leased_ ? lease_until_us_ : UINT64_MAX, idle_at_us_);
  }

  // Wire bit/s that carries `host_rate` payload bytes/s, within [floor, link].
  double shaping_bps(std::uint64_t host_rate) const;
  double current_bps() const { return current_bps_; }
  std::uint64_t host_rate() const { return host_rate_; }
  bool leased() const { return leased_; }

 private:
  std::optional<double> set(double bps);

  PacerConfig c_;
  std::uint64_t host_rate_ = 0;
  bool leased_ = false;
  std::uint64_t lease_until_us_ = 0;
  std::uint64_t idle_at_us_ = UINT64_MAX;  // the idle hold ends
  double current_bps_ = -1;  // nothing applied yet
};

// Keeps DEV's egress shaped through one long-lived `tc -batch` (a fork per
// change would cost more than the change): a two-band prio qdisc at the
// root, whose first band (unshaped) takes the traffic to the allocator
// (a u32 filter on its address and port) and whose second, everything else,
// goes through the tbf. Control messages must not wait behind the host's
// own data: a flowlet's start would reach the allocator only after the
// bytes queued before it, and its rate come back that much later. Must run
// in the host's network namespace with CAP_NET_ADMIN.
enum class Qdisc {
  kTbf,  // one tbf at the root: the tightest bound, control traffic shaped too
  kHtb,  // htb: the data class at the rate, control traffic in a class of its own
};

class Shaper {
 public:
  // Installs the qdiscs with the tbf at `bps`, the link rate (with htb, both
  // classes may use it all: htb only classifies); control_ip (IPv4, host order)
  // and control_port name the allocator (0: no control band). Throws
  // std::runtime_error with tc's reason.
  Shaper(std::string dev, Qdisc qdisc, std::uint32_t burst_bytes, double bps,
         std::uint32_t control_ip, std::uint16_t control_port);
  ~Shaper();  // removes the qdisc: the device is back to its default
  Shaper(const Shaper&) = delete;
  Shaper& operator=(const Shaper&) = delete;

  // False when tc has gone away (the reason on stderr).
  bool set(double bps);
  std::uint64_t changes() const { return changes_; }

 private:
  std::string line(const char* verb, double bps) const;

  std::string dev_;
  Qdisc qdisc_;
  std::uint32_t burst_;
  FILE* tc_ = nullptr;
  std::uint64_t changes_ = 0;
};

}  // namespace flowtune::pacer
