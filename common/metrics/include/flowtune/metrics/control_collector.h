// The Collectable a daemon registers with its exposer: on each scrape it
// asks the daemon, over the daemon's own ZeroMQ listener and as
// flowtune-ctl does, the requests of its metric table (status, ...), and
// builds the exposition from the replies by that table (json_rows.h). So
// the metrics and flowtune-ctl read one source, and the daemon's state is
// only read by the daemon's loop.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <prometheus/collectable.h>
#include <zmq.hpp>

#include "flowtune/common/curve.h"
#include "flowtune/metrics/json_rows.h"

namespace flowtune::metrics {

// A reply naming "retry_ms" (too many requests) is asked again after that
// wait, within the timeout; one naming "error" counts as none.
nlohmann::json ask_control(zmq::socket_t& s, const std::string& request, long timeout_ms);

class ControlCollector : public prometheus::Collectable {
 public:
  // up: the gauge that is 1 when the daemon answered requests[0] within
  // timeout_ms, else 0 (and then the only sample). keys: CURVE, if on.
  ControlCollector(zmq::context_t& ctx, std::string endpoint, std::vector<std::string> requests,
                   const Spec& up, std::span<const Row> rows, long timeout_ms,
                   const curve::ClientKeys* keys = nullptr);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  zmq::context_t& ctx_;
  std::string endpoint_;
  std::vector<std::string> requests_;
  Spec up_;
  std::span<const Row> rows_;
  long timeout_ms_;
  std::unique_ptr<curve::ClientKeys> keys_;
  mutable std::mutex mu_;  // one scrape at a time
};

}  // namespace flowtune::metrics
