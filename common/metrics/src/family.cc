#include "flowtune/metrics/family.h"

#include <cstring>

namespace flowtune::metrics {

const char* to_string(Type t) {
  switch (t) {
    case Type::kCounter: return "counter";
    case Type::kGauge: return "gauge";
    case Type::kHistogram: return "histogram";
  }
  return "unknown";
}

const Spec* find(std::span<const Spec> table, const std::string& name) {
  for (const Spec& s : table) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

prometheus::MetricFamily family(const Spec& spec) {
  prometheus::MetricFamily f;
  f.name = spec.name;
  f.help = spec.help;
  switch (spec.type) {
    case Type::kCounter: f.type = prometheus::MetricType::Counter; break;
    case Type::kGauge: f.type = prometheus::MetricType::Gauge; break;
    case Type::kHistogram: f.type = prometheus::MetricType::Histogram; break;
  }
  return f;
}

namespace {

prometheus::ClientMetric& sample(prometheus::MetricFamily& f, const Labels& labels) {
  prometheus::ClientMetric& m = f.metric.emplace_back();
  for (const auto& [k, v] : labels) m.label.push_back({k, v});
  return m;
}

}  // namespace

void add(prometheus::MetricFamily& f, double value, const Labels& labels) {
  prometheus::ClientMetric& m = sample(f, labels);
  if (f.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
}

void add(prometheus::MetricFamily& f, const Buckets& b, const Labels& labels) {
  prometheus::ClientMetric& m = sample(f, labels);
  m.histogram.sample_count = b.count;
  m.histogram.sample_sum = b.sum_s;
  for (std::size_t i = 0; i < b.upper_bounds_s.size() && i < b.cumulative.size(); ++i) {
    m.histogram.bucket.push_back({b.cumulative[i], b.upper_bounds_s[i]});
  }
}

}  // namespace flowtune::metrics
