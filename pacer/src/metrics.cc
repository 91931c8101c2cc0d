// flowtune-pacer's metric table and its two sources (metrics.h).
#include "flowtune/pacer/metrics.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <nlohmann/json.hpp>

#include "flowtune/metrics/family.h"

namespace flowtune::pacer {

namespace {

using metrics::Type;

// clang-format off
const metrics::Spec kUp = {"flowtune_pacer_up", Type::kGauge, "1", "", "1 when tc reported the pacer's qdisc on this scrape, else 0"};
const metrics::Spec kQdisc[] = {
  {"flowtune_pacer_qdisc_sent_bytes_total", Type::kCounter, "bytes", "dev", "Bytes the pacer's qdisc sent (tc -s: Sent ... bytes)"},
  {"flowtune_pacer_qdisc_sent_packets_total", Type::kCounter, "1", "dev", "Packets the pacer's qdisc sent"},
  {"flowtune_pacer_qdisc_drops_total", Type::kCounter, "1", "dev", "Packets the pacer's qdisc dropped (its queue was full)"},
  {"flowtune_pacer_qdisc_overlimits_total", Type::kCounter, "1", "dev", "Times a packet waited for tokens (the shaper held the host back)"},
  {"flowtune_pacer_qdisc_requeues_total", Type::kCounter, "1", "dev", "Packets the device handed back to the qdisc"},
  {"flowtune_pacer_qdisc_backlog_bytes", Type::kGauge, "bytes", "dev", "Bytes queued in the pacer's qdisc now"},
  {"flowtune_pacer_qdisc_backlog_packets", Type::kGauge, "1", "dev", "Packets queued in the pacer's qdisc now"},
};
const metrics::Spec kLoop[] = {
  {"flowtune_pacer_shaped_bytes_per_second", Type::kGauge, "bytes/s", "dev", "The rate DEV is shaped to now, wire bytes/s"},
  {"flowtune_pacer_bucket_bytes", Type::kGauge, "bytes", "dev", "The shaper's bucket now"},
  {"flowtune_pacer_host_rate_bytes_per_second", Type::kGauge, "bytes/s", "dev", "The allocator's sum of the host's rates, payload bytes/s"},
  {"flowtune_pacer_changes_total", Type::kCounter, "1", "dev", "Shaper changes made with tc"},
  {"flowtune_pacer_allocator_messages_total", Type::kCounter, "1", "dev", "Messages received from the allocator"},
  {"flowtune_pacer_registered", Type::kGauge, "1", "dev", "1 once the allocator accepted this pacer's hello"},
};
// clang-format on

// tc's standard output, or "" when it could not run.
std::string run_tc(const std::string& dev) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {};
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return {};
  }
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    const char* argv[] = {"tc", "-s", "-j", "qdisc", "show", "dev", dev.c_str(), nullptr};
    ::execvp("tc", const_cast<char* const*>(argv));
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? out : std::string();
}

}  // namespace

std::optional<QdiscStats> root_qdisc(std::string_view tc_json) {
  const nlohmann::json j = nlohmann::json::parse(tc_json, nullptr, false);
  if (!j.is_array()) return std::nullopt;
  for (const nlohmann::json& q : j) {
    if (!q.is_object() || !q.value("root", false)) continue;
    QdiscStats s;
    s.kind = q.value("kind", std::string());
    s.bytes = q.value("bytes", std::uint64_t{0});
    s.packets = q.value("packets", std::uint64_t{0});
    s.drops = q.value("drops", std::uint64_t{0});
    s.overlimits = q.value("overlimits", std::uint64_t{0});
    s.requeues = q.value("requeues", std::uint64_t{0});
    s.backlog_bytes = q.value("backlog", std::uint64_t{0});
    s.qlen = q.value("qlen", std::uint64_t{0});
    return s;
  }
  return std::nullopt;
}

std::vector<metrics::Spec> pacer_metric_specs() {
  std::vector<metrics::Spec> out = {kUp};
  out.insert(out.end(), std::begin(kQdisc), std::end(kQdisc));
  out.insert(out.end(), std::begin(kLoop), std::end(kLoop));
  return out;
}

std::vector<prometheus::MetricFamily> pacer_metrics(const PacerState& s, const std::optional<QdiscStats>& q,
                                                    const std::string& dev) {
  const metrics::Labels by_dev = {{"dev", dev}};
  std::vector<prometheus::MetricFamily> out;
  out.push_back(metrics::family(kUp));
  metrics::add(out.back(), q ? 1.0 : 0.0);
  if (q) {
    const std::uint64_t values[] = {q->bytes, q->packets, q->drops, q->overlimits, q->requeues, q->backlog_bytes, q->qlen};
    for (std::size_t i = 0; i < std::size(kQdisc); ++i) {
      out.push_back(metrics::family(kQdisc[i]));
      metrics::add(out.back(), static_cast<double>(values[i]), by_dev);
    }
  }
  const double loop[] = {s.shaped_bps.load(std::memory_order_relaxed) / 8,
                         static_cast<double>(s.burst_bytes.load(std::memory_order_relaxed)),
                         static_cast<double>(s.host_rate_bytes_per_sec.load(std::memory_order_relaxed)),
                         static_cast<double>(s.changes.load(std::memory_order_relaxed)),
                         static_cast<double>(s.messages.load(std::memory_order_relaxed)),
                         s.registered.load(std::memory_order_relaxed) ? 1.0 : 0.0};
  for (std::size_t i = 0; i < std::size(kLoop); ++i) {
    out.push_back(metrics::family(kLoop[i]));
    metrics::add(out.back(), loop[i], by_dev);
  }
  return out;
}

std::vector<prometheus::MetricFamily> PacerCollector::Collect() const {
  return pacer_metrics(state_, root_qdisc(run_tc(dev_)), dev_);
}

}  // namespace flowtune::pacer
