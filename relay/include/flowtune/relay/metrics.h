// flowtune-relay's Prometheus metrics (--metrics ADDR:PORT;
// docs/operate.md lists them): read from its flowtune-ctl status reply by
// metrics::ControlCollector, so they are the counters status shows.
#pragma once

#include <span>
#include <vector>

#include "flowtune/metrics/json_rows.h"

namespace flowtune::relay {

const metrics::Spec& relay_up_spec();
std::span<const metrics::Row> relay_metric_rows();
// Every spec, up first, for the doc check.
std::vector<metrics::Spec> relay_metric_specs();

}  // namespace flowtune::relay
