// Metrics read from a daemon's JSON replies (the ones flowtune-ctl reads),
// by a table of rows: each row a metric (spec.h) and where its value is.
// One table per daemon generates its whole exposition.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>
#include <prometheus/metric_family.h>

#include "flowtune/metrics/spec.h"

namespace flowtune::metrics {

// Where a metric's samples are, in replies[reply]:
// - no labels: the number or boolean at `pointer` (a JSON pointer); with
//   `equals`, 1 when the string there equals it, else 0;
// - a histogram: {count, sum_ns, le_ns[], cumulative[]} at `pointer`;
// - one label, and `each`: `pointer` names an array of objects; each gives
//   a sample of its member `each`, labelled by its member `label_from`;
// - one label: an object at `pointer` (a sample per member, labelled by
//   its key), an array (per element, by index), or pointers joined by '|'
//   (one each, labelled by the pointer's last part).
// Values are multiplied by `scale` (ns to seconds: 1e-9). A value absent
// from the reply (a section that is off) gives no sample.
struct Row {
  Spec spec;
  std::size_t reply;
  const char* pointer;
  double scale = 1;
  const char* each = nullptr;
  const char* label_from = nullptr;
  const char* equals = nullptr;
};

// The families of `rows` from `replies`; a family with no sample is left out.
std::vector<prometheus::MetricFamily> families(std::span<const Row> rows,
                                               const std::vector<nlohmann::json>& replies);

// The specs of `rows`, after `up` (a collector's up gauge), for the doc
// check (doc_table.h).
std::vector<Spec> specs(const Spec& up, std::span<const Row> rows);

}  // namespace flowtune::metrics
