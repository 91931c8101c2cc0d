// The allocator's Prometheus metrics (--metrics ADDR:PORT; docs/operate.md
// lists them). They are read from the replies flowtune-ctl reads ("status",
// "histograms", "links": control.h), asked over the allocator's own
// listener, so the exposition and `flowtune-ctl status` show the same
// counters from one source and the loop's state is read only by the loop.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <zmq.hpp>

#include "flowtune/common/curve.h"
#include "flowtune/metrics/spec.h"

namespace flowtune::daemon {

// Where a metric's value is read from.
enum class MetricFrom {
  kStatus,      // the status reply, at `pointer`
  kHistograms,  // the histograms reply, at `pointer`
  kLinks,       // each link of the links page: `pointer` in the link, labelled by its name
  kLinksPage,   // the links page itself, at `pointer`
  kRole,        // 1 while the allocator serves (active), 0 in standby
};

// A row of the allocator's metric table. `pointer` is a JSON pointer; with
// labels, it names an object (one sample per member, labelled by its key),
// an array (one per element, labelled by its index), or several pointers
// joined by '|' (one sample each, labelled by the pointer's last part).
struct AllocatorMetric {
  metrics::Spec spec;
  MetricFrom from;
  const char* pointer;
  double scale = 1;  // from the reply's unit to the metric's (ns -> seconds: 1e-9)
};

std::span<const AllocatorMetric> allocator_metric_table();
// The specs alone, for the doc check (metrics/doc_table.h).
std::vector<metrics::Spec> allocator_metric_specs();
// Members of status's "counters" deliberately not exported, each with its
// reason in metric_table.cc ("events" is a sum of exported counters).
std::span<const char* const> allocator_counters_not_exported();

// The replies, as flowtune-ctl gets them.
struct AllocatorReplies {
  nlohmann::json status, histograms, links;
};
// The exposition of the replies: every family of the table, plus
// flowtune_allocator_up (1 here).
std::vector<prometheus::MetricFamily> allocator_metrics(const AllocatorReplies& r);

// Asks the allocator at `endpoint` on every scrape (from the exposer's
// thread, with a socket of its own). With CURVE on, it speaks the
// allocator's own key pair, which must then be among its --curve-ctl keys.
// An allocator that does not answer within timeout_ms is exposed as
// flowtune_allocator_up 0 alone.
class AllocatorCollector : public prometheus::Collectable {
 public:
  AllocatorCollector(zmq::context_t& ctx, std::string endpoint, std::size_t max_links,
                     long timeout_ms, const curve::ClientKeys* keys);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  // The reply to `request`, or a discarded json when none came in time.
  nlohmann::json ask(zmq::socket_t& s, const std::string& request) const;
  zmq::context_t& ctx_;
  std::string endpoint_;
  std::size_t max_links_;
  long timeout_ms_;
  std::unique_ptr<curve::ClientKeys> keys_;
  mutable std::mutex mu_;  // one scrape at a time
};

}  // namespace flowtune::daemon
