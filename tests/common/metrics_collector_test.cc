// metrics::ControlCollector and json_rows against a hand-made daemon: a
// ZeroMQ ROUTER in a thread answering flowtune-ctl requests with fixed
// JSON, and against no daemon at all.
#include "flowtune/metrics/control_collector.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "flowtune/metrics/family.h"

namespace flowtune::metrics {
namespace {

using nlohmann::json;

const Spec kUp = {"x_up", Type::kGauge, "1", "", "up"};
const Row kRows[] = {
    {{"x_flows", Type::kGauge, "1", "", "flows"}, 0, "/flows"},
    {{"x_errors_total", Type::kCounter, "1", "reason", "errors"}, 0, "/errors"},
    {{"x_role_active", Type::kGauge, "1", "", "role"}, 0, "/role", 1, nullptr, nullptr, "active"},
    {{"x_link_rate_bytes_per_second", Type::kGauge, "bytes/s", "link", "links"}, 1, "/links", 0.125, "bps", "name"},
    {{"x_absent", Type::kGauge, "1", "", "not in the reply"}, 0, "/nope"},
};

// Answers each request once per call of serve(): "status" and "links".
class FakeDaemon {
 public:
  explicit FakeDaemon(zmq::context_t& ctx) : router_(ctx, zmq::socket_type::router) {
    router_.bind("tcp://127.0.0.1:*");
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] {
      while (!stop_) {
        zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(20));
        if ((item.revents & ZMQ_POLLIN) == 0) continue;
        zmq::message_t id, tag, req;
        (void)router_.recv(id);
        (void)router_.recv(tag);
        (void)router_.recv(req);
        const std::string r = req.to_string();
        const json reply = r == "status" ? json{{"flows", 3}, {"errors", {{"a", 1}, {"b", 2}}}, {"role", "active"}}
                                         : json{{"links", {{{"name", "l0"}, {"bps", 800}}}}};
        router_.send(id, zmq::send_flags::sndmore);
        router_.send(tag, zmq::send_flags::sndmore);
        router_.send(zmq::buffer(reply.dump()), zmq::send_flags::none);
      }
    });
  }
  ~FakeDaemon() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  zmq::socket_t router_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

double gauge(const std::vector<prometheus::MetricFamily>& fams, const std::string& name, std::size_t i = 0) {
  for (const auto& f : fams) {
    if (f.name == name) return f.type == prometheus::MetricType::Counter ? f.metric.at(i).counter.value
                                                                         : f.metric.at(i).gauge.value;
  }
  ADD_FAILURE() << name << " not exposed";
  return -1;
}

TEST(ControlCollector, BuildsTheTableFromTheDaemonsReplies) {
  zmq::context_t ctx(1);
  FakeDaemon d(ctx);
  ControlCollector c(ctx, d.endpoint(), {"status", "links"}, kUp, kRows, 2000);
  const auto fams = c.Collect();
  ASSERT_EQ(fams.size(), 5u) << "up + 4 rows; the absent value gives no family";
  EXPECT_EQ(fams[0].name, "x_up");
  EXPECT_EQ(gauge(fams, "x_up"), 1);
  EXPECT_EQ(gauge(fams, "x_flows"), 3);
  EXPECT_EQ(gauge(fams, "x_errors_total", 1), 2);
  EXPECT_EQ(fams[2].metric[1].label[0].value, "b");
  EXPECT_EQ(gauge(fams, "x_role_active"), 1);
  EXPECT_EQ(gauge(fams, "x_link_rate_bytes_per_second"), 100) << "800 bit/s scaled to bytes/s";
  EXPECT_EQ(fams[4].metric[0].label[0].name, "link");
  EXPECT_EQ(fams[4].metric[0].label[0].value, "l0");
}

TEST(ControlCollector, SaysDownAloneWhenNoDaemonAnswers) {
  zmq::context_t ctx(1);
  ControlCollector c(ctx, "tcp://127.0.0.1:1", {"status"}, kUp, kRows, 100);
  const auto fams = c.Collect();
  ASSERT_EQ(fams.size(), 1u);
  EXPECT_EQ(fams[0].name, "x_up");
  EXPECT_EQ(fams[0].metric.at(0).gauge.value, 0);
}

}  // namespace
}  // namespace flowtune::metrics
