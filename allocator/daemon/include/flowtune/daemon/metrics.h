// The allocator's Prometheus metrics (--metrics ADDR:PORT; docs/operate.md
// lists them). They are read from the replies flowtune-ctl reads ("status",
// "histograms", "links N": control.h), asked over the allocator's own
// listener by metrics::ControlCollector, so the exposition and
// `flowtune-ctl status` show the same counters from one source and the
// loop's state is read only by the loop.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <prometheus/metric_family.h>

#include "flowtune/metrics/json_rows.h"
#include "flowtune/metrics/spec.h"

namespace flowtune::daemon {

// The replies a scrape asks for, in allocator_metric_requests()'s order.
inline constexpr std::size_t kStatusReply = 0;
inline constexpr std::size_t kHistogramsReply = 1;
inline constexpr std::size_t kLinksReply = 2;

// flowtune_allocator_up, and the table of every other metric.
const metrics::Spec& allocator_up_spec();
std::span<const metrics::Row> allocator_metric_rows();
// Every spec, up first, for the doc check (metrics/doc_table.h).
std::vector<metrics::Spec> allocator_metric_specs();
// status, histograms, and links N unless max_links is 0 (--metrics-max-links).
std::vector<std::string> allocator_metric_requests(std::size_t max_links);
// Members of status's "counters" deliberately not exported, each with its
// reason in metric_table.cc ("events" is a sum of exported counters).
std::span<const char* const> allocator_counters_not_exported();

// The replies, as flowtune-ctl gets them, and the exposition built from
// them (every family of the table but up).
struct AllocatorReplies {
  nlohmann::json status, histograms, links;
};
std::vector<prometheus::MetricFamily> allocator_metrics(const AllocatorReplies& r);

}  // namespace flowtune::daemon
