// A metric as a daemon documents and exposes it: one table per daemon lists
// every metric once (name, type, unit, labels, meaning); the exposition is
// built from that table (family.h) and docs/operate.md's table is checked
// against it (doc_table.h), so neither can drift from the code.
#pragma once

#include <span>
#include <string>

namespace flowtune::metrics {

enum class Type { kCounter, kGauge, kHistogram };
const char* to_string(Type t);

struct Spec {
  const char* name;    // flowtune_<daemon>_..., Prometheus conventions
  Type type;
  const char* unit;    // as the doc table writes it: seconds, bytes, ratio, 1, ...
  const char* labels;  // comma-separated label names; "" for none
  const char* help;    // the meaning; also the exposition's HELP line
};

// The spec named `name` in `table`, or nullptr.
const Spec* find(std::span<const Spec> table, const std::string& name);

}  // namespace flowtune::metrics
