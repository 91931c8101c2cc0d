// Building Prometheus metric families from a daemon's table (spec.h): a
// family per spec, samples added by value, so a collector never spells a
// name, a type or a help text itself.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/metric_family.h>

#include "flowtune/metrics/spec.h"

namespace flowtune::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

// An empty family for `spec` (name, help, type).
prometheus::MetricFamily family(const Spec& spec);

// One sample of a counter or gauge family (per its type).
void add(prometheus::MetricFamily& f, double value, const Labels& labels = {});

// One histogram sample: cumulative counts for each upper bound (seconds),
// the total count and the sum (seconds).
struct Buckets {
  std::vector<double> upper_bounds_s;
  std::vector<std::uint64_t> cumulative;
  std::uint64_t count = 0;
  double sum_s = 0;
};
void add(prometheus::MetricFamily& f, const Buckets& b, const Labels& labels = {});

}  // namespace flowtune::metrics
