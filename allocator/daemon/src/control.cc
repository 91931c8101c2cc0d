#include "flowtune/daemon/control.h"

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

namespace flowtune::daemon {

namespace {

using nlohmann::json;

constexpr std::size_t kDefaultFlowLimit = 1000;
constexpr std::size_t kMaxFlowLimit = 100000;  // one reply stays a few MB

const char* kind_name(alloc::TopologyKind k) {
  switch (k) {
    case alloc::TopologyKind::kBigSwitch: return "big_switch";
    case alloc::TopologyKind::kTwoTier: return "two_tier";
    case alloc::TopologyKind::kExplicit: return "explicit";
  }
  return "unknown";
}

json histogram_json(const LatencyHistogram& h) {
  return {{"count", h.count()},
          {"p50", h.quantile_ns(0.5)},
          {"p99", h.quantile_ns(0.99)},
          {"p999", h.quantile_ns(0.999)}};
}

json counters_json(const Counters& c) {
  json errors = json::object();
  for (std::size_t i = 0; i < kNumCauses; ++i) errors[to_string(static_cast<Cause>(i))] = c.errors[i];
  return {{"messages_in", c.messages_in},
          {"bytes_in", c.bytes_in},
          {"events", c.events()},
          {"hellos", c.hellos},
          {"starts", c.starts},
          {"ends", c.ends},
          {"heartbeats", c.heartbeats},
          {"resyncs", c.resyncs},
          {"rate_requests", c.rate_requests},
          {"messages_out", c.messages_out},
          {"bytes_out", c.bytes_out},
          {"send_failures", c.send_failures},
          {"rate_updates", c.rate_updates},
          {"rate_updates_suppressed", c.rate_updates_suppressed},
          {"lease_refreshes", c.lease_refreshes},
          {"host_rate_updates", c.host_rate_updates},
          {"endpoints_timed_out", c.endpoints_timed_out},
          {"hosts_released", c.hosts_released},
          {"flows_expired", c.flows_expired},
          {"flows_joined", c.flows_joined},
          {"classes_lowered", c.classes_lowered},
          {"flows_by_class", c.flows_by_class},
          {"deadlines_met", c.deadlines_met},
          {"deadlines_missed", c.deadlines_missed},
          {"iterations", c.iterations},
          {"control_requests", c.control_requests},
          {"errors", errors},
          {"iteration_ns", histogram_json(c.iteration_ns)},
          {"turn_ns", histogram_json(c.turn_ns)}};
}

// Per class (those with flows) and per tenant: live flows and their rates.
json policy_json(const Allocator& a) {
  const PolicyTotals t = a.policy_totals();
  json classes = json::object(), tenants = json::object();
  for (std::size_t k = 0; k < t.by_class.size(); ++k) {
    if (t.by_class[k].flows == 0) continue;
    classes[std::to_string(k)] = {{"flows", t.by_class[k].flows}, {"rate_bps", t.by_class[k].rate_bps}};
  }
  for (const auto& [name, s] : t.by_tenant) {
    tenants[name] = {{"flows", s.flows}, {"rate_bps", s.rate_bps}};
  }
  // The tenants' specs (the operator's, or the default for names endpoints
  // brought), beside their totals.
  for (const auto& [name, spec] : t.specs) {
    json& j = tenants[name];
    if (!j.contains("flows")) j = {{"flows", 0}, {"rate_bps", 0.0}};
    j["weight"] = spec.weight;
    j["guarantee_bps"] = spec.guarantee_bps;
    j["cap_bps"] = spec.cap_bps;
  }
  return {{"classes", classes},
          {"tenants", tenants},
          {"replans", t.counters.replans},
          {"deadlines_infeasible", t.counters.deadlines_infeasible},
          {"guarantees_refused", t.counters.guarantees_refused},
          {"coflow_plans", t.counters.coflow_plans},
          {"coflows_ordered", t.counters.coflows_ordered}};
}

json status_json(const Allocator& a, const ServerInfo& info) {
  const Network& n = a.network();
  const AllocatorConfig& cfg = a.config();
  return {{"epoch", a.epoch()},
          {"listen", info.listen},
          {"uptime_s", static_cast<double>(info.uptime_us) * 1e-6},
          {"topology",
           {{"kind", kind_name(n.topology().kind())},
            {"hosts", n.live_hosts()},
            {"spare_hosts", n.spare_slots()},
            {"links", n.topology().num_links()}}},
          {"config",
           {{"threads", cfg.threads},
            {"gamma", cfg.engine.gamma},
            {"norm", alloc::to_string(cfg.engine.normalizer)},
            {"threshold", cfg.threshold},
            {"headroom", cfg.headroom},
            {"lease_ms", cfg.lease_us / 1000},
            {"endpoint_timeout_ms", cfg.endpoint_timeout_us / 1000},
            {"default_class", cfg.default_class},
            {"top_class", cfg.top_class}}},
          {"policy", policy_json(a)},
          {"kernels", a.engine().kernel_name()},
          {"endpoints", a.num_endpoints()},
          {"flows", a.num_flows()},
          {"busy", a.busy()},
          {"converged", a.engine().stats().converged},
          {"counters", counters_json(a.counters())}};
}

json endpoints_json(const Allocator& a, std::uint64_t now_us) {
  json list = json::array();
  for (const EndpointView& e : a.endpoints(now_us)) {
    list.push_back({{"id", e.endpoint_id},
                    {"peer", printable_peer(e.peer)},
                    {"host", a.network().host_name(e.host)},
                    {"flows", e.flows},
                    {"idle_ms", static_cast<double>(e.idle_us) * 1e-3},
                    {"messages", e.messages},
                    {"errors", e.errors}});
  }
  return {{"endpoints", list}};
}

json flows_json(const Allocator& a, std::uint64_t now_us, std::size_t limit) {
  json list = json::array();
  const Network& n = a.network();
  for (const FlowView& f : a.flows(now_us, limit)) {
    json path = json::array();
    for (alloc::LinkId l : f.path) path.push_back(n.link_name(l));
    list.push_back({{"endpoint", f.endpoint_id},
                    {"key", f.flow_key},
                    {"src", n.host_name(f.src)},
                    {"dst", n.host_name(f.dst)},
                    {"path", path},
                    {"weight", f.weight},
                    {"bytes", f.bytes},
                    {"coflow", f.coflow_id},
                    {"class", f.priority_class},
                    {"tenant", f.tenant},
                    {"deadline_left_ms", static_cast<double>(f.deadline_left_us) * 1e-3},
                    {"deadline_state", alloc::to_string(f.deadline_state)},
                    {"floor_bps", f.floor_bps},
                    {"rate_bps", f.rate_bps},
                    {"sent_rate_bps", f.sent_rate_bps},
                    {"age_ms", static_cast<double>(f.age_us) * 1e-3},
                    {"holders", f.holders}});
  }
  return {{"flows", list}, {"total", a.num_flows()}};
}

json links_json(const Allocator& a) {
  const alloc::Engine& eng = a.engine();
  const std::vector<double> alloc_bps = eng.link_allocation_bps();
  const std::vector<std::uint32_t> flows = a.flows_per_link();
  json list = json::array();
  const Network& n = a.network();
  for (alloc::LinkId l = 0; l < eng.num_links(); ++l) {
    if (flows[l] == 0) continue;  // idle links would drown the busy ones
    const double cap = n.topology().capacity_bps(l);
    list.push_back({{"id", l},
                    {"name", n.link_name(l)},
                    {"capacity_bps", cap},
                    {"scheduled_bps", eng.capacity_bps(l)},
                    {"allocated_bps", alloc_bps[l]},
                    {"utilization", alloc_bps[l] / cap},
                    {"flows", flows[l]},
                    {"price", eng.price(l)}});
  }
  return {{"links", list}, {"total_links", eng.num_links()}};
}

}  // namespace

std::string control_reply(const Allocator& a, const ServerInfo& info, std::string_view request,
                          std::uint64_t now_us) {
  const std::size_t space = request.find(' ');
  const std::string_view cmd = request.substr(0, space);
  std::size_t limit = kDefaultFlowLimit;
  if (space != std::string_view::npos) {
    const std::string_view arg = request.substr(space + 1);
    const auto r = std::from_chars(arg.data(), arg.data() + arg.size(), limit);
    if (r.ec != std::errc() || r.ptr != arg.data() + arg.size()) {
      return json{{"error", "bad limit in request"}}.dump();
    }
    limit = std::min(limit, kMaxFlowLimit);
  }
  json reply;
  if (cmd == "status") {
    reply = status_json(a, info);
  } else if (cmd == "endpoints") {
    reply = endpoints_json(a, now_us);
  } else if (cmd == "flows") {
    reply = flows_json(a, now_us, limit);
  } else if (cmd == "links") {
    reply = links_json(a);
  } else {
    // Printable only: the request came off the wire.
    std::string shown;
    for (char c : cmd.substr(0, 64)) shown += (c >= 0x20 && c < 0x7f) ? c : '?';
    reply = {{"error", "unknown request \"" + shown + "\"; try status, endpoints, flows, links"}};
  }
  return reply.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace flowtune::daemon
