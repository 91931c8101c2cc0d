#include "flowtune/metrics/control_collector.h"

#include <chrono>
#include <thread>

#include "flowtune/metrics/family.h"

namespace flowtune::metrics {

using nlohmann::json;

namespace {
constexpr std::string_view kControlTag = "flowtune-ctl";  // as wire::kControlTag
}  // namespace

json ask_control(zmq::socket_t& s, const std::string& request, long timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    s.send(zmq::buffer(kControlTag), zmq::send_flags::sndmore);
    s.send(zmq::buffer(request), zmq::send_flags::none);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
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

ControlCollector::ControlCollector(zmq::context_t& ctx, std::string endpoint, std::vector<std::string> requests,
                                   const Spec& up, std::span<const Row> rows, long timeout_ms,
                                   const curve::ClientKeys* keys)
    : ctx_(ctx), endpoint_(std::move(endpoint)), requests_(std::move(requests)), up_(up), rows_(rows),
      timeout_ms_(timeout_ms) {
  if (keys != nullptr) keys_ = std::make_unique<curve::ClientKeys>(*keys);
}

std::vector<prometheus::MetricFamily> ControlCollector::Collect() const {
  const std::lock_guard<std::mutex> lock(mu_);
  std::vector<json> replies;
  try {
    // A socket per scrape: a reply that came too late for one scrape must
    // not be read as the next one's.
    zmq::socket_t s(ctx_, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    if (keys_ && curve::apply_client(s.handle(), *keys_) != 0) throw zmq::error_t();
    s.connect(endpoint_);
    for (const std::string& r : requests_) {
      json j = ask_control(s, r, timeout_ms_);
      if (j.is_discarded() && replies.empty()) break;
      replies.push_back(j.is_discarded() ? json::object() : std::move(j));
    }
  } catch (const zmq::error_t&) {
    replies.clear();
  }
  prometheus::MetricFamily up = family(up_);
  add(up, replies.empty() ? 0.0 : 1.0);
  if (replies.empty()) return {up};
  std::vector<prometheus::MetricFamily> out = families(rows_, replies);
  out.insert(out.begin(), std::move(up));
  return out;
}

}  // namespace flowtune::metrics
