// docs/operate.md lists every metric in a table per daemon, between
// `<!-- metrics:NAME -->` and `<!-- /metrics:NAME -->`, one row a metric:
//   | `flowtune_x_total` | counter | 1 | reason | what it counts |
// These functions read that table and compare it with the code's, so a
// test fails when either changes alone.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "flowtune/metrics/spec.h"

namespace flowtune::metrics {

struct DocRow {
  std::string name, type, unit, labels;
  int line = 0;
};

// The rows of table `section` in the markdown text; throws
// std::runtime_error when the markers are missing or a row is malformed
// (with its line).
std::vector<DocRow> doc_rows(const std::string& markdown, const std::string& section);

// Every disagreement between the doc's rows and the table, one line each
// ("doc line 12: flowtune_x has unit bytes, the code seconds"); empty when
// they agree.
std::vector<std::string> compare(const std::vector<DocRow>& doc, std::span<const Spec> table);

}  // namespace flowtune::metrics
