#include "flowtune/metrics/json_rows.h"

#include <string>
#include <string_view>

#include "flowtune/metrics/family.h"

namespace flowtune::metrics {

namespace {

using nlohmann::json;

const json* at(const json& doc, std::string_view pointer) {
  if (!doc.is_object() && !doc.is_array()) return nullptr;
  try {
    const json::json_pointer p{std::string(pointer)};
    return doc.contains(p) ? &doc.at(p) : nullptr;
  } catch (const json::exception&) {
    return nullptr;
  }
}

void add_scalar(prometheus::MetricFamily& f, const json* v, double scale, const Labels& labels = {}) {
  if (v == nullptr) return;
  if (v->is_boolean()) {
    add(f, v->get<bool>() ? 1.0 : 0.0, labels);
  } else if (v->is_number()) {
    add(f, v->get<double>() * scale, labels);
  }
}

void add_histogram(prometheus::MetricFamily& f, const json* h, double scale) {
  if (h == nullptr || !h->is_object()) return;
  Buckets b;
  b.count = h->value("count", std::uint64_t{0});
  b.sum_s = h->value("sum_ns", 0.0) * scale;
  for (const json& le : h->value("le_ns", json::array())) b.upper_bounds_s.push_back(le.get<double>() * scale);
  for (const json& c : h->value("cumulative", json::array())) b.cumulative.push_back(c.get<std::uint64_t>());
  add(f, b);
}

void add_each(prometheus::MetricFamily& f, const Row& r, const json& doc) {
  const json* items = at(doc, r.pointer);
  if (items == nullptr || !items->is_array()) return;
  for (const json& item : *items) {
    if (!item.is_object()) continue;
    const json* name = at(item, std::string("/") + r.label_from);
    if (name == nullptr) continue;
    add_scalar(f, at(item, std::string("/") + r.each), r.scale,
               {{r.spec.labels, name->is_string() ? name->get<std::string>() : name->dump()}});
  }
}

void add_labelled(prometheus::MetricFamily& f, const Row& r, const json& doc) {
  const std::string label = r.spec.labels;
  const std::string_view all = r.pointer;
  if (all.find('|') != std::string_view::npos) {
    std::size_t from = 0;
    while (from <= all.size()) {
      const std::size_t bar = std::min(all.find('|', from), all.size());
      const std::string_view p = all.substr(from, bar - from);
      add_scalar(f, at(doc, p), r.scale, {{label, std::string(p.substr(p.rfind('/') + 1))}});
      from = bar + 1;
    }
    return;
  }
  const json* v = at(doc, all);
  if (v == nullptr) return;
  if (v->is_object()) {
    for (const auto& [k, x] : v->items()) add_scalar(f, &x, r.scale, {{label, k}});
  } else if (v->is_array()) {
    for (std::size_t i = 0; i < v->size(); ++i) add_scalar(f, &(*v)[i], r.scale, {{label, std::to_string(i)}});
  }
}

void add_row(prometheus::MetricFamily& f, const Row& r, const json& doc) {
  if (r.spec.type == Type::kHistogram) {
    add_histogram(f, at(doc, r.pointer), r.scale);
  } else if (r.each != nullptr) {
    add_each(f, r, doc);
  } else if (*r.spec.labels != '\0') {
    add_labelled(f, r, doc);
  } else if (r.equals != nullptr) {
    const json* v = at(doc, r.pointer);
    if (v != nullptr && v->is_string()) add(f, v->get<std::string>() == r.equals ? 1.0 : 0.0);
  } else {
    add_scalar(f, at(doc, r.pointer), r.scale);
  }
}

}  // namespace

std::vector<prometheus::MetricFamily> families(std::span<const Row> rows, const std::vector<json>& replies) {
  std::vector<prometheus::MetricFamily> out;
  for (const Row& r : rows) {
    if (r.reply >= replies.size()) continue;
    prometheus::MetricFamily f = family(r.spec);
    add_row(f, r, replies[r.reply]);
    if (!f.metric.empty()) out.push_back(std::move(f));
  }
  return out;
}

std::vector<Spec> specs(const Spec& up, std::span<const Row> rows) {
  std::vector<Spec> out = {up};
  for (const Row& r : rows) out.push_back(r.spec);
  return out;
}

}  // namespace flowtune::metrics
