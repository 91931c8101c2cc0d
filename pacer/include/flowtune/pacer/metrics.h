// flowtune-pacer's Prometheus metrics (--metrics ADDR:PORT;
// docs/operate.md lists them). Two sources, each the one operators would
// read by hand: the kernel's own statistics of the pacer's qdisc (what
// `tc -s qdisc show dev DEV` prints: bytes, packets, drops, overlimits,
// backlog), read on each scrape, and what the pacer's loop last applied
// (PacerState: the shaped rate, its bucket, the allocator's host rate),
// which the loop stores and the exposer's thread loads.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "flowtune/metrics/spec.h"

namespace flowtune::pacer {

// Written by the pacer's loop (relaxed: each is read alone), read by scrapes.
struct PacerState {
  std::atomic<double> shaped_bps{0};           // DEV's rate now, bit/s on the wire
  std::atomic<std::uint32_t> burst_bytes{0};   // its bucket
  std::atomic<std::uint64_t> host_rate_bytes_per_sec{0};  // the allocator's sum for the host
  std::atomic<std::uint64_t> changes{0};       // tc changes made
  std::atomic<std::uint64_t> messages{0};      // allocator messages received
  std::atomic<bool> registered{false};         // the allocator accepted the hello
};

// The root qdisc's statistics from `tc -s -j qdisc show dev DEV`.
struct QdiscStats {
  std::string kind;
  std::uint64_t bytes = 0, packets = 0, drops = 0, overlimits = 0, requeues = 0;
  std::uint64_t backlog_bytes = 0, qlen = 0;
};
// nullopt when the text is not tc's JSON or holds no root qdisc.
std::optional<QdiscStats> root_qdisc(std::string_view tc_json);

// Every spec (flowtune_pacer_up first), for the doc check.
std::vector<metrics::Spec> pacer_metric_specs();

// The exposition from one reading of each source; qdisc nullopt: tc gave
// nothing (flowtune_pacer_up 0, and the loop's values alone).
std::vector<prometheus::MetricFamily> pacer_metrics(const PacerState& s, const std::optional<QdiscStats>& q,
                                                    const std::string& dev);

class PacerCollector : public prometheus::Collectable {
 public:
  PacerCollector(std::string dev, const PacerState& state) : dev_(std::move(dev)), state_(state) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::string dev_;
  const PacerState& state_;
};

}  // namespace flowtune::pacer
