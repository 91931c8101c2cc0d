// AllocatorCollector: on each scrape, the allocator's status, histograms
// and links, asked over its own listener as flowtune-ctl asks them.
#include <chrono>
#include <thread>

#include "flowtune/daemon/metrics.h"
#include "flowtune/daemon/server.h"
#include "flowtune/metrics/family.h"

namespace flowtune::daemon {

using nlohmann::json;

AllocatorCollector::AllocatorCollector(zmq::context_t& ctx, std::string endpoint, std::size_t max_links,
                                       long timeout_ms, const curve::ClientKeys* keys)
    : ctx_(ctx), endpoint_(std::move(endpoint)), max_links_(max_links), timeout_ms_(timeout_ms) {
  if (keys != nullptr) keys_ = std::make_unique<curve::ClientKeys>(*keys);
}

// One request; a reply saying retry_ms (too many flowtune-ctl requests) is
// asked again after that wait, within the timeout.
json AllocatorCollector::ask(zmq::socket_t& s, const std::string& request) const {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  for (;;) {
    s.send(zmq::buffer(std::string_view(kControlTag)), zmq::send_flags::sndmore);
    s.send(zmq::buffer(request), zmq::send_flags::none);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::max(left, std::chrono::milliseconds(1)));
    zmq::message_t tag, body;
    if ((item.revents & ZMQ_POLLIN) == 0 || !s.recv(tag, zmq::recv_flags::dontwait) || !tag.more() ||
        !s.recv(body, zmq::recv_flags::dontwait)) {
      return json(json::value_t::discarded);
    }
    json j = json::parse(body.to_string_view(), nullptr, false);
    if (j.is_object() && j.contains("retry_ms") && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(j.value("retry_ms", 10)));
      continue;
    }
    if (j.is_object() && j.contains("error")) return json(json::value_t::discarded);
    return j;
  }
}

std::vector<prometheus::MetricFamily> AllocatorCollector::Collect() const {
  const std::lock_guard<std::mutex> lock(mu_);
  AllocatorReplies r;
  try {
    // A socket per scrape: a reply that came too late for one scrape
    // must not be read as the next one's.
    zmq::socket_t s(ctx_, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    if (keys_ && curve::apply_client(s.handle(), *keys_) != 0) throw zmq::error_t();
    s.connect(endpoint_);
    r.status = ask(s, "status");
    if (!r.status.is_discarded()) r.histograms = ask(s, "histograms");
    if (!r.status.is_discarded() && max_links_ > 0) r.links = ask(s, "links " + std::to_string(max_links_));
  } catch (const zmq::error_t&) {
    r.status = json(json::value_t::discarded);
  }
  if (r.status.is_discarded() || !r.status.is_object()) {
    prometheus::MetricFamily up = metrics::family(allocator_metric_table().front().spec);
    metrics::add(up, 0);
    return {up};
  }
  if (r.histograms.is_discarded()) r.histograms = json::object();
  if (r.links.is_discarded()) r.links = json::object();
  return allocator_metrics(r);
}

}  // namespace flowtune::daemon
