#include "flowtune/pacer/pacer.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <stdexcept>
#include <vector>

extern char** environ;

namespace flowtune::pacer {

void validate(const PacerConfig& c) {
  auto need = [](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(what);
  };
  need(c.link_bps >= 1e6 && std::isfinite(c.link_bps), "link rate must be at least 1 Mbit/s");
  need(c.overhead >= 1 && c.overhead <= 2, "overhead must be within [1, 2]");
  need(c.margin >= 0 && c.margin <= 1, "margin must be within [0, 1]");
  need(c.floor_bps >= 0 && c.floor_bps <= c.link_bps, "floor must be within [0, link rate]");
  need(c.idle_bps >= 0 && c.idle_bps <= c.link_bps, "idle rate must be within [0, link rate]");
  need(c.min_bps >= 0 && c.min_bps <= c.link_bps, "minimum rate must be within [0, link rate]");
  need(c.lower_hysteresis >= 0 && c.lower_hysteresis < 1, "hysteresis must be within [0, 1)");
  need(c.raise_slack >= 0 && c.raise_slack <= 1, "raise slack must be within [0, 1]");
  need(c.burst_bytes >= 1600 && c.burst_bytes <= (64u << 20),
       "burst must hold a full frame (1600 bytes at least) and at most 64 MiB");
  need(c.burst_us <= 1'000'000, "burst time must be at most 1 s");
  need(c.burst_gap_share > 0 && c.burst_gap_share <= 1, "burst gap share must be within (0, 1]");
  need(c.lease_us > 0, "lease must be positive");
}

namespace {
bool below(bool now, double bps, double threshold) {
  return threshold > 0 && bps >= 0 && bps < (now ? 2 : 1) * threshold;
}
}  // namespace

PacketSizeState small_packets(PacketSizeState now, double flow_bps, double host_bps,
                              const PacketSizeRule& r) {
  return {below(now.by_flows, flow_bps, r.flow_below_bps),
          below(now.by_host, host_bps, r.host_below_bps)};
}

double HostPacer::shaping_bps(std::uint64_t host_rate) const {
  if (host_rate == 0) return c_.idle_bps > 0 ? c_.idle_bps : c_.link_bps;
  const double wire = static_cast<double>(host_rate) * 8.0 * c_.overhead * (1.0 + c_.margin);
  const double lowest = std::max(c_.min_bps, c_.floor_bps);
  return std::clamp(wire + c_.floor_bps, std::min(lowest, c_.link_bps), c_.link_bps);
}

std::uint32_t HostPacer::bucket_bytes(double bps, bool allocated, std::uint64_t gap_us) const {
  if (!allocated || c_.burst_us == 0) return c_.burst_bytes;
  // tbf fills its bucket at every change: bound the fills by the gap.
  const double us = std::min(double(c_.burst_us), c_.burst_gap_share * double(gap_us));
  const double b = bps * us / 8e6;
  return static_cast<std::uint32_t>(std::clamp(b, double(c_.burst_bytes), double(64u << 20)));
}

std::optional<Shape> HostPacer::set(double bps, bool allocated, std::uint64_t now_us) {
  const std::uint64_t gap =
      changed_at_us_ == UINT64_MAX || now_us < changed_at_us_ ? UINT64_MAX : now_us - changed_at_us_;
  const Shape s{bps, bucket_bytes(bps, allocated, gap)};
  if (s == current_) return std::nullopt;
  // The same allocation again (a lease refresh) only grows the bucket:
  // shrinking it would be a change, and a fill, for nothing.
  if (allocated && allocated_ && s.bps == current_.bps && s.burst_bytes < current_.burst_bytes) {
    return std::nullopt;
  }
  current_ = s;
  allocated_ = allocated;
  changed_at_us_ = now_us;
  return s;
}

std::optional<Shape> HostPacer::on_message(const wire::AllocatorMessage& m,
                                           std::uint64_t now_us) {
  // Every message to a pacer carries the host's rate; it lasts a lease.
  const bool was_rated = leased_ && host_rate_ > 0;
  host_rate_ = m.host_rate;
  host_flows_ = m.host_flows;
  leased_ = true;
  lease_until_us_ = now_us + c_.lease_us;
  if (host_rate_ == 0 && c_.idle_hold_us > 0 && (was_rated || idle_at_us_ != UINT64_MAX)) {
    // Hold the last allocation for a while (PacerConfig::idle_hold_us).
    if (idle_at_us_ == UINT64_MAX) idle_at_us_ = now_us + c_.idle_hold_us;
    return std::nullopt;
  }
  idle_at_us_ = UINT64_MAX;
  const double want = shaping_bps(host_rate_);
  // A raise applies at once (the host must not be held below its
  // allocation); a small cut waits: every change costs a tc call and a
  // wake-up on a busy host, and a tbf a little above the allocation
  // loosens the bound only by that much.
  // After a raise the tbf sits up to raise_slack above the allocation it
  // was raised for: an allocation from that one up is no cut either.
  const bool in_band = raised_for_bps_ && want >= *raised_for_bps_;
  if (host_rate_ > 0 && was_rated && want < current_.bps &&
      (in_band || want >= current_.bps * (1 - c_.lower_hysteresis))) {
    return std::nullopt;
  }
  // A raise goes above the allocation by the slack, so that the raises
  // after it, up to that much, need no change.
  if (host_rate_ > 0 && was_rated && want > current_.bps && c_.raise_slack > 0) {
    const auto s = set(std::min(want * (1 + c_.raise_slack), c_.link_bps), true, now_us);
    if (s) raised_for_bps_ = want;
    return s;
  }
  raised_for_bps_.reset();
  return set(want, host_rate_ > 0, now_us);
}

std::optional<Shape> HostPacer::on_tick(std::uint64_t now_us) {
  if (now_us >= idle_at_us_) {
    idle_at_us_ = UINT64_MAX;
    raised_for_bps_.reset();
    if (host_rate_ == 0) return set(shaping_bps(0), false, now_us);
  }
  if (!leased_ || now_us < lease_until_us_) return std::nullopt;
  // The sockets' own caps lapse after the same lease: the host goes back
  // to TCP as a whole (with the link's bucket: unshaped, as far as it can be).
  leased_ = false;
  host_rate_ = 0;
  host_flows_ = 0;
  idle_at_us_ = UINT64_MAX;
  raised_for_bps_.reset();
  return set(c_.link_bps, true, now_us);
}

namespace {

// Runs argv, waits; its exit status, or -1 when it could not start.
// quiet: its standard error goes to /dev/null (a step allowed to fail).
int run(const std::vector<std::string>& args, bool quiet = false) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (quiet) posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string bits(double bps) { return std::to_string(std::llround(bps)) + "bit"; }

// Bytes tbf may queue: TCP small queues keep each socket's share small, so
// this only has to be large enough never to drop what the sockets hand it.
constexpr const char* kLimit = "8000000";

// htb's classes never borrow from each other here, so their quantum does
// not matter; set, it keeps tc from warning that rate / r2q is too big.
constexpr const char* kQuantum = " quantum 60000";

// The peak rate, in links: high enough that its bucket of frame_bytes refills
// between any two dequeues (3028 bytes at 1 Tbit/s: 24 ns), so only the
// bucket's size, never its rate, matters.
constexpr double kPeakTimes = 1000;

}  // namespace

std::string tbf_line(const std::string& dev, Qdisc qdisc, double link_bps,
                     std::uint32_t frame_bytes, const char* verb, const Shape& s) {
  // The tbf does the shaping in both layouts: it splits GSO packets larger
  // than its peak bucket into frames, where htb would send a 64 KB GSO
  // packet as one burst into the switch.
  const std::string where = qdisc == Qdisc::kTbf ? " root handle 1:" : " parent 1:2 handle 10:";
  return std::string("qdisc ") + verb + " dev " + dev + where + " tbf rate " + bits(s.bps) +
         " burst " + std::to_string(s.burst_bytes) + " peakrate " + bits(link_bps * kPeakTimes) +
         " mtu " + std::to_string(frame_bytes) + " limit " + kLimit;
}

Shaper::Shaper(std::string dev, Qdisc qdisc, double link_bps, std::uint32_t frame_bytes,
               Shape initial, std::uint32_t control_ip, std::uint16_t control_port)
    : dev_(std::move(dev)), qdisc_(qdisc), link_bps_(link_bps), frame_bytes_(frame_bytes) {
  if (dev_.empty() || dev_.find_first_of(" \t\n/") != std::string::npos) {
    throw std::runtime_error("bad device name '" + dev_ + "'");
  }
  const auto split = [](const std::string& l) {
    std::vector<std::string> v{"tc"};
    std::size_t i = 0;
    while (i < l.size()) {
      const std::size_t j = l.find(' ', i);
      v.push_back(l.substr(i, j - i));
      i = j == std::string::npos ? l.size() : j + 1;
    }
    return v;
  };
  // Class 1:2 (the default) is the host's data at its rate; 1:1, only by
  // the filters, is small packets and control traffic, never held behind it.
  std::vector<std::vector<std::string>> steps;
  // A root left by a pacer that was killed (SIGKILL) goes first: htb cannot
  // "replace" an htb in place (tc answers that change is not supported).
  (void)run({"tc", "qdisc", "del", "dev", dev_, "root"}, /*quiet=*/true);
  if (qdisc_ == Qdisc::kTbf) {
    steps.push_back(split(tbf_line(dev_, qdisc_, link_bps_, frame_bytes_, "replace", initial)));
  } else {
    // htb only classifies: both classes may use the whole link.
    steps = {{"tc", "qdisc", "add", "dev", dev_, "root", "handle", "1:", "htb", "default", "2"},
             split("class add dev " + dev_ + " parent 1: classid 1:2 htb rate " +
                   bits(link_bps_) + " ceil " + bits(link_bps_) + kQuantum),
             split(tbf_line(dev_, qdisc_, link_bps_, frame_bytes_, "add", initial)),
             split("class add dev " + dev_ + " parent 1: classid 1:1 htb rate " +
                   bits(link_bps_) + " ceil " + bits(link_bps_) + kQuantum)};
  }
  if (qdisc_ == Qdisc::kHtb) {
    // IPv4 total length (offset 2) or IPv6 payload length (offset 4) below
    // 256: a pure ACK, a request, a control message.
    steps.push_back(split("filter add dev " + dev_ + " parent 1: protocol ip prio 2 u32 match u16 0 0xff00 at 2 flowid 1:1"));
    steps.push_back(split("filter add dev " + dev_ + " parent 1: protocol ipv6 prio 3 u32 match u16 0 0xff00 at 4 flowid 1:1"));
  }
  if (qdisc_ == Qdisc::kHtb && control_ip != 0) {
    const std::string ip = std::to_string(control_ip >> 24) + "." +
                           std::to_string(control_ip >> 16 & 255) + "." +
                           std::to_string(control_ip >> 8 & 255) + "." +
                           std::to_string(control_ip & 255) + "/32";
    steps.push_back({"tc", "filter", "add", "dev", dev_, "parent", "1:", "protocol", "ip",
                     "prio", "1", "u32", "match", "ip", "dst", ip, "match", "ip", "dport",
                     std::to_string(control_port), "0xffff", "flowid", "1:1"});
  }
  for (const auto& step : steps) {
    const int rc = run(step);
    if (rc == 0) continue;
    (void)run({"tc", "qdisc", "del", "dev", dev_, "root"});
    throw std::runtime_error(
        rc < 0 ? "cannot run tc (is iproute2 installed?)"
               : "tc could not shape " + dev_ + " (" + step[1] + " " + step[2] +
                     "): does the device exist, and do we have CAP_NET_ADMIN?");
  }
  // A write to a tc that died must fail, not kill us.
  std::signal(SIGPIPE, SIG_IGN);
  tc_ = popen("exec tc -force -batch -", "w");
  if (tc_ == nullptr) throw std::runtime_error("cannot start tc -batch");
}

Shaper::~Shaper() {
  if (tc_ != nullptr) pclose(tc_);
  (void)run({"tc", "qdisc", "del", "dev", dev_, "root"});
}

bool Shaper::set(const Shape& s) {
  const std::string l = tbf_line(dev_, qdisc_, link_bps_, frame_bytes_, "change", s) + "\n";
  if (std::fputs(l.c_str(), tc_) < 0 || std::fflush(tc_) != 0) return false;
  ++changes_;
  return true;
}

}  // namespace flowtune::pacer
