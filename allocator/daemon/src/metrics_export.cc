// The allocator's exposition built from flowtune-ctl's replies, by the
// metric table (metric_table.cc).
#include "flowtune/daemon/metrics.h"

#include <string_view>

#include "flowtune/metrics/family.h"

namespace flowtune::daemon {

namespace {

using nlohmann::json;

// The value at `pointer`, or nullptr when absent (a section that is off:
// auth without CURVE, standby_pair outside a pair, the heap not weighed).
const json* at(const json& doc, std::string_view pointer) {
  if (!doc.is_object() && !doc.is_array()) return nullptr;
  try {
    const json::json_pointer p{std::string(pointer)};
    return doc.contains(p) ? &doc.at(p) : nullptr;
  } catch (const json::exception&) {
    return nullptr;
  }
}

// A JSON number or boolean as a sample; false for anything else.
bool number(const json* v, double scale, double* out) {
  if (v == nullptr) return false;
  if (v->is_boolean()) {
    *out = v->get<bool>() ? 1 : 0;
    return true;
  }
  if (!v->is_number()) return false;
  *out = v->get<double>() * scale;
  return true;
}

void add_scalar(prometheus::MetricFamily& f, const json* v, double scale,
                const metrics::Labels& labels = {}) {
  double x = 0;
  if (number(v, scale, &x)) metrics::add(f, x, labels);
}

// A labelled metric from one JSON object, array or '|'-list of pointers.
void add_labelled(prometheus::MetricFamily& f, const AllocatorMetric& m, const json& doc) {
  const std::string label = m.spec.labels;
  const std::string_view all = m.pointer;
  if (all.find('|') != std::string_view::npos) {
    std::size_t from = 0;
    while (from <= all.size()) {
      const std::size_t bar = std::min(all.find('|', from), all.size());
      const std::string_view p = all.substr(from, bar - from);
      add_scalar(f, at(doc, p), m.scale, {{label, std::string(p.substr(p.rfind('/') + 1))}});
      from = bar + 1;
    }
    return;
  }
  const json* v = at(doc, all);
  if (v == nullptr) return;
  if (v->is_object()) {
    for (const auto& [k, x] : v->items()) add_scalar(f, &x, m.scale, {{label, k}});
  } else if (v->is_array()) {
    for (std::size_t i = 0; i < v->size(); ++i) add_scalar(f, &(*v)[i], m.scale, {{label, std::to_string(i)}});
  }
}

void add_histogram(prometheus::MetricFamily& f, const json* h, double scale) {
  if (h == nullptr || !h->is_object()) return;
  metrics::Buckets b;
  b.count = h->value("count", std::uint64_t{0});
  b.sum_s = h->value("sum_ns", 0.0) * scale;
  for (const json& le : h->value("le_ns", json::array())) b.upper_bounds_s.push_back(le.get<double>() * scale);
  for (const json& c : h->value("cumulative", json::array())) b.cumulative.push_back(c.get<std::uint64_t>());
  metrics::add(f, b);
}

void add_links(prometheus::MetricFamily& f, const AllocatorMetric& m, const json& page) {
  const json* links = at(page, "/links");
  if (links == nullptr || !links->is_array()) return;
  for (const json& l : *links) {
    add_scalar(f, at(l, m.pointer), m.scale, {{m.spec.labels, l.value("name", std::string())}});
  }
}

}  // namespace

std::vector<prometheus::MetricFamily> allocator_metrics(const AllocatorReplies& r) {
  std::vector<prometheus::MetricFamily> out;
  for (const AllocatorMetric& m : allocator_metric_table()) {
    prometheus::MetricFamily f = metrics::family(m.spec);
    const std::string_view name = m.spec.name;
    if (name == "flowtune_allocator_up") {
      metrics::add(f, 1);
    } else if (m.from == MetricFrom::kRole) {
      metrics::add(f, r.status.value("role", std::string()) == "active" ? 1 : 0);
    } else if (m.from == MetricFrom::kHistograms) {
      add_histogram(f, at(r.histograms, m.pointer), m.scale);
    } else if (m.from == MetricFrom::kLinks) {
      add_links(f, m, r.links);
    } else if (m.from == MetricFrom::kLinksPage) {
      add_scalar(f, at(r.links, m.pointer), m.scale);
    } else if (*m.spec.labels != '\0') {
      add_labelled(f, m, r.status);
    } else {
      add_scalar(f, at(r.status, m.pointer), m.scale);
    }
    // A family without samples (a section that is off) is left out.
    if (!f.metric.empty()) out.push_back(std::move(f));
  }
  return out;
}

}  // namespace flowtune::daemon
