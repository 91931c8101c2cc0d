#include "flowtune/daemon/control.h"


#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace flowtune::daemon {

namespace {

using nlohmann::json;

// A reply is built inside the allocator's loop: a page of at most kMaxPage
// flows, endpoints or links bounds what one request costs the loop (100,000
// flows in one reply took 2.3 s and 35 MB); flowtune-ctl asks page after
// page.
constexpr std::size_t kDefaultPage = 500;
constexpr std::size_t kMaxPage = 500;

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
          {"progress", c.progress},
          {"progress_flows", c.progress_flows},
          {"messages_out", c.messages_out},
          {"bytes_out", c.bytes_out},
          {"send_failures", c.send_failures},
          {"rate_updates", c.rate_updates},
          {"rate_updates_suppressed", c.rate_updates_suppressed},
          {"rate_passes_deferred", c.rate_passes_deferred},
          {"early_rates", c.early_rates},
          {"early_rates_corrected", c.early_rates_corrected},
          {"lease_refreshes", c.lease_refreshes},
          {"host_rate_updates", c.host_rate_updates},
          {"endpoints_timed_out", c.endpoints_timed_out},
          {"hosts_released", c.hosts_released},
          {"flows_expired", c.flows_expired},
          {"flows_joined", c.flows_joined},
          {"memory_trims", c.memory_trims},
          {"compactions", c.compactions},
          {"classes_lowered", c.classes_lowered},
          {"flows_by_class", c.flows_by_class},
          {"deadlines_met", c.deadlines_met},
          {"deadlines_missed", c.deadlines_missed},
          {"iterations", c.iterations},
          {"control_requests", c.control_requests},
          {"relay_batches", c.relay_batches},
          {"errors", errors},
          {"iteration_ns", histogram_json(c.iteration_ns)},
          {"turn_ns", histogram_json(c.turn_ns)},
          {"early_answer_ns", histogram_json(c.early_answer_ns)},
          {"memory_check_ns", histogram_json(c.memory_check_ns)},
          {"timer_ns", histogram_json(c.timer_ns)}};
}

// Prometheus bucket edges of the "histograms" request: 2^k - 1 ns for k
// from 10 (1 us) to 33 (8.6 s), exact edges of LatencyHistogram's buckets.
constexpr int kFirstEdgePow2 = 10;
constexpr int kLastEdgePow2 = 33;

json buckets_json(const LatencyHistogram& h) {
  json le = json::array(), below = json::array();
  for (int k = kFirstEdgePow2; k <= kLastEdgePow2; ++k) {
    le.push_back((std::uint64_t{1} << k) - 1);
    below.push_back(h.count_below_pow2(k));
  }
  return {{"count", h.count()}, {"sum_ns", h.sum_ns()}, {"le_ns", le}, {"cumulative", below}};
}

// "histograms": the counters' latency histograms as cumulative buckets,
// for the Prometheus exposition (metrics.h); status gives their quantiles.
json histograms_json(const Counters& c) {
  return {{"iteration_ns", buckets_json(c.iteration_ns)},
          {"turn_ns", buckets_json(c.turn_ns)},
          {"early_answer_ns", buckets_json(c.early_answer_ns)},
          {"memory_check_ns", buckets_json(c.memory_check_ns)},
          {"timer_ns", buckets_json(c.timer_ns)}};
}

// Tenants a status reply shows: there may be kMaxTenants (65,536), and
// their names are peers' (256 bytes each); `tenants` pages the rest.
constexpr std::size_t kStatusTenants = 32;

FlowTotals::Sum tenant_sum(const FlowTotals& t, alloc::TenantId id) {
  // A tenant named since the pass was made has no sums in it yet.
  return id < t.by_tenant.size() ? t.by_tenant[id] : FlowTotals::Sum{};
}

// Per class (those with flows), flows in no tenant, and the first
// kStatusTenants tenants (in the order they were first named: the
// operator's file at start, then endpoints' names and later files' as
// they came): live flows, their rates and the tenant's spec. Flows in no
// tenant have a key of their own: "" may name an operator's tenant.
json policy_json(const Allocator& a, const FlowTotals& t) {
  const alloc::PolicyBook& p = a.policy();
  json classes = json::object(), tenants = json::object();
  for (std::size_t k = 0; k < t.by_class.size(); ++k) {
    if (t.by_class[k].flows == 0) continue;
    classes[std::to_string(k)] = {{"flows", t.by_class[k].flows}, {"rate_bps", t.by_class[k].rate_bps}};
  }
  const FlowTotals::Sum none = tenant_sum(t, alloc::kNoTenant);
  const std::size_t shown = std::min(p.num_tenants(), kStatusTenants);
  for (alloc::TenantId id = 1; id <= shown; ++id) {
    const alloc::TenantSpec& spec = p.spec(id);
    const FlowTotals::Sum sum = tenant_sum(t, id);
    tenants[std::string(p.name(id))] = {{"flows", sum.flows},
                                        {"rate_bps", sum.rate_bps},
                                        {"weight", spec.weight},
                                        {"guarantee_bps", spec.guarantee_bps},
                                        {"cap_bps", spec.cap_bps}};
  }
  const alloc::PolicyCounters& c = p.counters();
  return {{"classes", classes},
          {"tenants", tenants},
          {"no_tenant", {{"flows", none.flows}, {"rate_bps", none.rate_bps}}},
          {"tenants_total", p.num_tenants()},
          {"tenants_shown", shown},
          {"replans", c.replans},
          {"deadlines_infeasible", c.deadlines_infeasible},
          {"guarantees_refused", c.guarantees_refused},
          {"coflow_plans", c.coflow_plans},
          {"coflows_ordered", c.coflows_ordered}};
}

json auth_json(const AuthInfo& au) {
  if (!au.on) return {{"mode", "none"}};
  return {{"mode", "curve"},
          {"keys", {{"endpoint", au.endpoint_keys}, {"ctl", au.reader_keys}, {"admin", au.admin_keys}}},
          {"accepted", au.accepted},
          {"unknown_keys", au.unknown_keys},
          {"unauthenticated", au.unauthenticated},
          {"bad_handshakes", au.bad_handshakes},
          {"reloads", au.reloads},
          {"reload_failures", au.reload_failures},
          {"last_reload_error", au.last_reload_error},
          {"public_key", au.public_key},
          {"key_rotations", au.key_rotations}};
}

// What glibc's heap held at the loop's last memory check, and how long ago.
json heap_json(const ServerInfo& info) {
  const HeapInfo& h = info.heap;
  if (h.in_use_bytes < 0) return {{"in_use_bytes", nullptr}, {"free_kept_bytes", nullptr}, {"age_s", nullptr}};
  return {{"in_use_bytes", h.in_use_bytes},
          {"free_kept_bytes", h.free_kept_bytes},
          {"age_s", static_cast<double>(info.uptime_us - std::min(info.uptime_us, h.weighed_at_us)) * 1e-6}};
}

json ha_json(const HaInfo& h) {
  if (h.peer.empty()) return nullptr;
  return {{"peer", h.peer},
          {"term", h.term},
          {"peer_role", h.peer_role.empty() ? json(nullptr) : json(h.peer_role)},
          {"peer_heard_s_ago", h.peer_heard_s_ago < 0 ? json(nullptr) : json(h.peer_heard_s_ago)},
          {"witness", h.witness.empty() ? json(nullptr) : json(h.witness)},
          {"witness_heard_s_ago", h.witness_heard_s_ago < 0 ? json(nullptr) : json(h.witness_heard_s_ago)},
          {"lease_left_s", h.lease_left_s}};
}

// totals: from a pass made totals_age_s ago, the cache's passes-th.
json status_json(const Allocator& a, const ServerInfo& info, const FlowTotals& totals,
                 double totals_age_s, std::uint64_t passes) {
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
            {"early_rates", cfg.early_rates},
            {"coflow_policy", alloc::to_string(cfg.coflow_policy)},
            {"coflow_share", cfg.coflow_share},
            {"coflow_aging_s", cfg.coflow_aging_s},
            {"lease_ms", cfg.lease_us / 1000},
            {"endpoint_timeout_ms", cfg.endpoint_timeout_us / 1000},
            {"max_flows_per_source", cfg.max_flows_per_source},
            {"max_endpoints_per_source", cfg.max_endpoints_per_source},
            {"max_hosts_per_source", cfg.max_hosts_per_source},
            {"default_class", cfg.default_class},
            {"top_class", cfg.top_class}}},
          {"policy", policy_json(a, totals)},
          {"totals_age_s", totals_age_s},
          {"totals_passes", passes},
          {"kernels", a.engine().kernel_name()},
          {"endpoints", a.num_endpoints()},
          {"flows", a.num_flows()},
          {"busy", a.busy()},
          {"converged", a.engine().stats().converged},
          {"counters", counters_json(a.counters())},
          {"heap", heap_json(info)},
          {"auth", auth_json(info.auth)},
          {"role", a.active() ? "active" : "standby"},
          {"standby_pair", ha_json(info.ha)}};
}

// Pages are written as JSON text directly: building the flows page as json
// objects cost 11 µs a flow (5.5 ms a page of 500) inside the loop, against
// 22 µs for the page's data.
class JsonWriter {
 public:
  void raw(std::string_view s) { out_ += s; }
  // A JSON string: quotes, backslashes and control characters escaped;
  // invalid UTF-8 (a peer's text) replaced by U+FFFD, as json's dump does.
  void str(std::string_view s) {
    out_ += '"';
    for (std::size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c < 0x80) {
        if (c == '"' || c == '\\') {
          out_ += '\\';
          out_ += static_cast<char>(c);
        } else if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out_ += buf;
        } else {
          out_ += static_cast<char>(c);
        }
        ++i;
        continue;
      }
      const std::size_t n = utf8_length(s.substr(i));
      if (n == 0) {
        out_ += "\xef\xbf\xbd";
        ++i;
      } else {
        out_.append(s.substr(i, n));
        i += n;
      }
    }
    out_ += '"';
  }
  void num(std::uint64_t v) { append_chars(v); }
  void num(double v) {
    if (!std::isfinite(v)) {
      out_ += "null";
      return;
    }
    append_chars(v);
  }
  // An object's members: key() puts the comma between them.
  void open() {
    out_ += '{';
    first_ = true;
  }
  void close() { out_ += '}'; }
  void key(std::string_view k) {
    if (!first_) out_ += ',';
    first_ = false;
    out_ += '"';
    out_ += k;
    out_ += "\":";
  }
  void member(std::string_view k, std::uint64_t v) {
    key(k);
    num(v);
  }
  void member(std::string_view k, double v) {
    key(k);
    num(v);
  }
  void member_str(std::string_view k, std::string_view v) {
    key(k);
    str(v);
  }
  // A page's closing members: the total, the allocator's run (pages of
  // another run do not continue this one) and where the next page starts
  // (null: this was the last).
  void page_end(std::uint64_t total, std::uint64_t epoch, std::uint32_t next) {
    member("total", total);
    member("epoch", epoch);
    key("next");
    if (next != UINT32_MAX) {
      num(std::uint64_t{next});
    } else {
      raw("null");
    }
    close();
  }
  std::string take() { return std::move(out_); }

 private:
  template <typename T>
  void append_chars(T v) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, r.ptr);
  }
  // Bytes of the valid UTF-8 sequence starting s (not ASCII), or 0.
  static std::size_t utf8_length(std::string_view s) {
    const auto b0 = static_cast<unsigned char>(s[0]);
    const std::size_t n = b0 >= 0xf0 && b0 <= 0xf4   ? 4
                          : b0 >= 0xe0 && b0 <= 0xef ? 3
                          : b0 >= 0xc2 && b0 <= 0xdf ? 2
                                                     : 0;
    if (n == 0 || s.size() < n) return 0;
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[k]) & 0xc0) != 0x80) return 0;
    }
    const auto b1 = static_cast<unsigned char>(s[1]);
    // Overlong forms, surrogates and code points past U+10FFFF.
    if ((b0 == 0xe0 && b1 < 0xa0) || (b0 == 0xed && b1 >= 0xa0) || (b0 == 0xf0 && b1 < 0x90) ||
        (b0 == 0xf4 && b1 >= 0x90)) {
      return 0;
    }
    return n;
  }
  std::string out_;
  bool first_ = true;
};

std::string flows_text(const Allocator& a, std::uint64_t now_us, std::size_t limit,
                       alloc::FlowId from) {
  const Network& n = a.network();
  alloc::FlowId next = UINT32_MAX;
  const std::vector<FlowView> page = a.flows(now_us, limit, from, &next);
  JsonWriter w;
  w.open();
  w.key("flows");
  w.raw("[");
  for (std::size_t i = 0; i < page.size(); ++i) {
    const FlowView& f = page[i];
    if (i > 0) w.raw(",");
    w.open();
    w.member_str("endpoint", f.endpoint_id);
    w.member("key", f.flow_key);
    w.member_str("src", n.host_name(f.src));
    w.member_str("dst", n.host_name(f.dst));
    w.key("path");
    w.raw("[");
    for (std::size_t k = 0; k < f.path.size; ++k) {
      if (k > 0) w.raw(",");
      w.str(n.link_name(f.path.links[k]));
    }
    w.raw("]");
    w.member("weight", f.weight);
    w.member("bytes", f.bytes);
    w.member("coflow", f.coflow_id);
    w.member("class", std::uint64_t{f.priority_class});
    w.member_str("tenant", f.tenant);
    w.member("deadline_left_ms", static_cast<double>(f.deadline_left_us) * 1e-3);
    w.member_str("deadline_state", alloc::to_string(f.deadline_state));
    w.member("floor_bps", f.floor_bps);
    w.member("rate_bps", f.rate_bps);
    w.member("sent_rate_bps", f.sent_rate_bps);
    w.member("age_ms", static_cast<double>(f.age_us) * 1e-3);
    w.member("holders", std::uint64_t{f.holders});
    w.close();
  }
  w.raw("]");
  w.page_end(a.num_flows(), a.epoch(), next);
  return w.take();
}

// "endpoints [LIMIT [FROM]]": a page of endpoints in slot order.
std::string endpoints_text(const Allocator& a, std::uint64_t now_us, std::size_t limit,
                           std::uint32_t from) {
  std::uint32_t next = UINT32_MAX;
  const std::vector<EndpointView> page = a.endpoints(now_us, limit, from, &next);
  JsonWriter w;
  w.open();
  w.key("endpoints");
  w.raw("[");
  for (std::size_t i = 0; i < page.size(); ++i) {
    const EndpointView& e = page[i];
    if (i > 0) w.raw(",");
    w.open();
    w.member_str("id", e.endpoint_id);
    w.member_str("peer", printable_peer(e.peer));
    w.member_str("host", a.network().host_name(e.host));
    w.member("flows", std::uint64_t{e.flows});
    w.member("idle_ms", static_cast<double>(e.idle_us) * 1e-3);
    w.member("messages", e.messages);
    w.member("errors", e.errors);
    if (!e.key_name.empty()) {
      w.member_str("key", e.key_name);
      w.member("vouched_by_relays", std::uint64_t{e.vouched_by});
    }
    w.close();
  }
  w.raw("]");
  w.page_end(a.num_endpoints(), a.epoch(), next);
  return w.take();
}

// "links [LIMIT [FROM]]": a page of the links that carry flows, in id order
// from link FROM on.
std::string links_text(const Allocator& a, const FlowTotals& t, std::size_t limit,
                       alloc::LinkId from) {
  const alloc::Engine& eng = a.engine();
  const Network& n = a.network();
  // A link added since the pass was made carries no flow in it yet.
  const std::size_t links = std::min<std::size_t>(eng.num_links(), t.link_flows.size());
  std::uint32_t next = UINT32_MAX;
  std::uint64_t busy = 0;
  std::size_t listed = 0;
  JsonWriter w;
  w.open();
  w.key("links");
  w.raw("[");
  for (alloc::LinkId l = 0; l < links; ++l) {
    if (t.link_flows[l] == 0) continue;  // idle links would drown the busy ones
    ++busy;
    if (l < from || next != UINT32_MAX) continue;
    if (listed == limit) {
      next = l;
      continue;
    }
    if (listed++ > 0) w.raw(",");
    const double cap = n.topology().capacity_bps(l);
    w.open();
    w.member("id", std::uint64_t{l});
    w.member_str("name", n.link_name(l));
    w.member("capacity_bps", cap);
    w.member("scheduled_bps", eng.capacity_bps(l));
    w.member("allocated_bps", t.link_allocated_bps[l]);
    w.member("utilization", t.link_allocated_bps[l] / cap);
    w.member("flows", std::uint64_t{t.link_flows[l]});
    w.member("price", eng.price(l));
    w.close();
  }
  w.raw("]");
  w.member("total_links", std::uint64_t{eng.num_links()});
  w.page_end(busy, a.epoch(), next);
  return w.take();
}

// "tenants [LIMIT [FROM]]": a page of tenants in id order (the order they
// were first named), with their flows, rates and specs; and the flows in
// no tenant.
std::string tenants_text(const Allocator& a, const FlowTotals& t, std::size_t limit,
                         std::uint32_t from) {
  const alloc::PolicyBook& p = a.policy();
  const std::size_t n = p.num_tenants();
  JsonWriter w;
  w.open();
  w.key("tenants");
  w.raw("[");
  alloc::TenantId id = std::max<std::uint32_t>(from, 1);
  for (std::size_t listed = 0; id <= n && listed < limit; ++id, ++listed) {
    if (listed > 0) w.raw(",");
    const alloc::TenantSpec& spec = p.spec(id);
    const FlowTotals::Sum sum = tenant_sum(t, id);
    w.open();
    w.member("id", std::uint64_t{id});
    w.member_str("name", p.name(id));
    w.member("flows", sum.flows);
    w.member("rate_bps", sum.rate_bps);
    w.member("weight", spec.weight);
    w.member("guarantee_bps", spec.guarantee_bps);
    w.member("cap_bps", spec.cap_bps);
    w.close();
  }
  w.raw("]");
  const FlowTotals::Sum none = tenant_sum(t, alloc::kNoTenant);
  w.key("no_tenant");
  w.open();
  w.member("flows", none.flows);
  w.member("rate_bps", none.rate_bps);
  w.close();
  w.page_end(n, a.epoch(), id <= n ? id : UINT32_MAX);
  return w.take();
}

}  // namespace

ControlCache::Version ControlCache::version_of(const Allocator& a) {
  return {a.epoch(), a.counters().iterations, a.flow_changes()};
}

const FlowTotals& ControlCache::totals(const Allocator& a, std::uint64_t now_us) {
  const Version v = version_of(a);
  // Another run's pass (a standby that took over) describes other flows.
  const bool must = !valid_ || v.epoch != version_.epoch;
  if (must || (v != version_ && passes_allowed_.take(now_us))) {
    totals_ = a.totals();
    valid_ = true;
    version_ = v;
    at_us_ = now_us;
    ++passes_;
  }
  return totals_;
}

double ControlCache::age_s(const Allocator& a, std::uint64_t now_us) const {
  if (!valid_ || version_of(a) == version_ || now_us <= at_us_) return 0.0;
  return static_cast<double>(now_us - at_us_) * 1e-6;
}

std::string control_reply(const Allocator& a, const ServerInfo& info, std::string_view request,
                          std::uint64_t now_us, ControlCache& cache) {
  const std::size_t space = request.find(' ');
  const std::string_view cmd = request.substr(0, space);
  // "flows|endpoints|links|tenants [LIMIT [FROM]]": at most LIMIT items
  // (capped at a page) from id FROM on (the previous reply's "next").
  std::size_t limit = kDefaultPage;
  std::uint32_t from = 0;
  if (space != std::string_view::npos) {
    std::string_view arg = request.substr(space + 1);
    const std::size_t gap = arg.find(' ');
    const std::string_view first = arg.substr(0, gap);
    auto r = std::from_chars(first.data(), first.data() + first.size(), limit);
    bool ok = r.ec == std::errc() && r.ptr == first.data() + first.size();
    if (ok && gap != std::string_view::npos) {
      const std::string_view second = arg.substr(gap + 1);
      r = std::from_chars(second.data(), second.data() + second.size(), from);
      ok = r.ec == std::errc() && r.ptr == second.data() + second.size();
    }
    if (!ok) return json{{"error", "bad limit or start in request"}}.dump();
    limit = std::clamp<std::size_t>(limit, 1, kMaxPage);
  }
  if (cmd == "endpoints") return endpoints_text(a, now_us, limit, from);
  if (cmd == "flows") return flows_text(a, now_us, limit, from);
  if (cmd == "links") return links_text(a, cache.totals(a, now_us), limit, from);
  if (cmd == "tenants") return tenants_text(a, cache.totals(a, now_us), limit, from);
  json reply;
  if (cmd == "status") {
    const FlowTotals& t = cache.totals(a, now_us);
    reply = status_json(a, info, t, cache.age_s(a, now_us), cache.passes());
  } else if (cmd == "histograms") {
    reply = histograms_json(a.counters());
  } else {
    // Printable only: the request came off the wire.
    std::string shown;
    for (char c : cmd.substr(0, 64)) shown += (c >= 0x20 && c < 0x7f) ? c : '?';
    reply = {{"error", "unknown request \"" + shown + "\"; try status, endpoints, flows, links, tenants, histograms, reload"}};
  }
  return reply.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace flowtune::daemon
