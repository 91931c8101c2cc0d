// What each protocol event does to the endpoint and flow tables. Every
// handler is idempotent where the protocol allows repeats: a repeated start
// replaces the flow, a resync replaces the endpoint's whole state, so a lost
// or duplicated message never leaves the allocator wrong for long (§5.1).
#include <algorithm>
#include <array>
#include <unordered_set>

#include "allocator_internal.h"
#include "flowtune/common/assert.h"
#include "flowtune/wire/relay.h"

namespace flowtune::daemon {

static_assert(wire::kNumClasses == alloc::kNumClasses, "the wire and the engine count classes alike");

namespace {

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

bool same_path(const alloc::Path& a, const alloc::Path& b) {
  return a.size == b.size && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

void Allocator::on_hello(std::string_view peer, const wire::Hello& h, std::uint64_t now_us) {
  if (h.endpoint_id.empty()) {
    refuse(peer, nullptr, Cause::kBadValue, "hello: endpoint id is empty", 0, now_us);
    return;
  }
  const std::variant<alloc::HostId, Refusal> found = hello_host(peer, h);
  if (const auto* r = std::get_if<Refusal>(&found)) {
    refuse(peer, nullptr, r->cause, r->why, 0, now_us);
    return;
  }
  const alloc::HostId host = std::get<alloc::HostId>(found);
  const std::string peer_s(peer);
  // This connection spoke for another endpoint before: that process is gone.
  if (auto it = by_peer_.find(peer_s); it != by_peer_.end()) {
    Endpoint& old = *endpoints_[it->second];
    if (old.id != h.endpoint_id || old.host != host) drop_endpoint(it->second);
  }
  if (auto it = by_endpoint_id_.find(h.endpoint_id); it != by_endpoint_id_.end()) {
    if (rejoin(*endpoints_[it->second], peer_s, h, host, now_us)) return;
  }
  if (by_endpoint_id_.size() >= config_.max_endpoints) {
    refuse(peer, nullptr, Cause::kTooManyEndpoints,
           "hello: the allocator already serves " + std::to_string(config_.max_endpoints) +
               " endpoints",
           0, now_us);
    return;
  }
  if (std::string why = source_full_for_endpoint(host, peer); !why.empty()) {
    refuse(peer, nullptr, Cause::kTooManyEndpoints, "hello: " + why, 0, now_us);
    return;
  }
  const EndpointIdx idx = endpoint_ids_.acquire();
  if (idx == endpoints_.size()) endpoints_.emplace_back();
  auto e = std::make_unique<Endpoint>();
  e->idx = idx;
  e->peer = peer_s;
  e->id = h.endpoint_id;
  if (sender_ != nullptr) {
    e->key = sender_->key;
    e->key_name = sender_->name;
    for (const Principal* r : sender_->via) e->via_keys.push_back(r->key);
  }
  e->host = host;
  ref_host(host);
  e->last_heard_us = now_us;
  e->tokens = TokenBucket(config_.max_messages_per_sec, now_us);
  e->pacer = h.host_pacer;
  if (e->pacer) pacers_[host].push_back(idx);
  join_sources(*e);
  endpoints_[idx] = std::move(e);
  by_peer_[peer_s] = idx;
  by_endpoint_id_[h.endpoint_id] = idx;
  // Acknowledge with a message carrying the epoch: the endpoint learns the
  // allocator's incarnation (and that it is there) before any rate.
  pending(*endpoints_[idx]).hello_ack = true;
  pending(*endpoints_[idx]).progress_ok = true;  // this allocator reads progress events
  schedule_timer(now_us + config_.lease_refresh_us);
  if (log_ != nullptr && log_->enabled(LogLevel::kDebug)) {
    log_->write(LogLevel::kDebug, "endpoint " + h.endpoint_id + " on host " +
                                      network_.host_name(host) + " registered");
  }
}

// A known endpoint's hello on a new connection (it reconnected): its flows
// stay until the resync that follows the hello replaces them. True when
// the hello is handled (refused, or the endpoint rebound to `peer`); false
// when e was dropped, so the hello registers it anew.
bool Allocator::rejoin(Endpoint& e, const std::string& peer, const wire::Hello& h,
                       alloc::HostId host, std::uint64_t now_us) {
  if (sender_ != nullptr && e.key != sender_->key) {
    // Its id is not a credential: only the key that registered it may
    // take it over (or replace it).
    refuse(peer, nullptr, Cause::kNotAuthorized,
           "hello: endpoint id " + h.endpoint_id + " is registered under another key", 0, now_us);
    return true;
  }
  // A new host or a new role (flows or host pacer) is a new registration.
  if (e.host != host || e.pacer != h.host_pacer) {
    drop_endpoint(e.idx);
    return false;
  }
  if (e.peer != peer) {
    by_peer_.erase(e.peer);
    e.peer = peer;
    by_peer_[peer] = e.idx;
  }
  e.last_heard_us = now_us;
  pending(e).hello_ack = true;  // the acknowledgement, carrying the epoch
  pending(e).progress_ok = true;
  return true;
}

// The host a hello speaks for, found or added (--unknown-hosts add), or
// why not.
std::variant<alloc::HostId, Allocator::Refusal> Allocator::hello_host(std::string_view peer,
                                                                      const wire::Hello& h) {
  std::optional<alloc::HostId> host = network_.find_host(h.host_id);
  if (!may_speak_for(sender_, host, h.host_id)) {
    return Refusal{Cause::kNotAuthorized, "hello: key \"" + sender_->name +
                                              "\" may not speak for host \"" + h.host_id + "\""};
  }
  if (host) return *host;
  const std::string unknown = "hello: host \"" + h.host_id + "\" is not in the topology";
  if (config_.unknown_hosts != UnknownHosts::kAdd) return Refusal{Cause::kUnknownHost, unknown};
  // The hello's own host is not a source yet: its address and key are.
  std::string key = key_source_name(peer);
  Result<alloc::HostId> added =
      add_host(h.host_id, {address_.empty() ? nullptr : source_of("a:" + std::string(address_)),
                           key.empty() ? nullptr : source_of(std::move(key)), nullptr});
  if (!added) return Refusal{Cause::kUnknownHost, unknown + " and " + added.error().message};
  return *added;
}

// The host a flowlet's destination address names, found or added
// (--unknown-hosts add), or why not.
std::variant<alloc::HostId, Allocator::Refusal> Allocator::destination_host(const Endpoint& e,
                                                                            std::uint32_t ip) {
  if (std::optional<alloc::HostId> d = network_.find_host_by_ip(ip)) return *d;
  const std::string unknown = "destination " + format_ipv4(ip) + " is not in the topology";
  if (config_.unknown_hosts != UnknownHosts::kAdd) return Refusal{Cause::kUnknownHost, unknown};
  Result<alloc::HostId> added =
      add_host(format_ipv4(ip), {e.host_source, e.address_source, e.key_source});
  if (!added) return Refusal{Cause::kUnknownHost, unknown + " and " + added.error().message};
  return *added;
}

Result<Principal> vouched_for(const Principal& key, const std::vector<const Principal*>& relays) {
  for (const Principal* r : relays) {
    if (!r->relay) {
      return fail(ErrorCause::kRefused, "key \"" + r->name +
                                            "\" passed an endpoint's message up but may not vouch "
                                            "(relay = true)");
    }
  }
  Principal p = key;
  p.via = relays;
  return p;
}

bool Allocator::may_speak_for(const Principal* who, std::optional<alloc::HostId> host,
                              std::string_view name) const {
  if (who == nullptr) return true;
  const auto one = [&](const Principal& p) {
    if (p.any_host) return true;
    for (const std::string& h : p.hosts) {
      if (!name.empty() && h == name) return true;
      if (host && network_.find_host(h) == host) return true;
    }
    return false;
  };
  // A vouched key speaks for a host only where every relay that passed it
  // up may too.
  return one(*who) && std::all_of(who->via.begin(), who->via.end(),
                                  [&](const Principal* r) { return one(*r); });
}

std::variant<Allocator::Resolved, Allocator::Refusal> Allocator::resolve(
    const Endpoint& e, const wire::FlowletStart& s) {
  Resolved out;
  alloc::HostId& src = out.src;
  alloc::HostId& dst = out.dst;
  alloc::FlowSpec& spec = out.spec;
  std::uint64_t hash;
  if (const auto* hp = std::get_if<wire::HostPair>(&s.endpoints)) {
    if (!network_.has_host(hp->src) || !network_.has_host(hp->dst)) {
      return Refusal{Cause::kUnknownHost, "host pair " + std::to_string(hp->src) + "->" +
                                              std::to_string(hp->dst) +
                                              ": not hosts of the topology (" +
                                              std::to_string(network_.live_hosts()) + " hosts)"};
    }
    src = hp->src;
    dst = hp->dst;
    hash = mix(s.flow_key ^ mix(e.idx));
  } else {
    const auto& t = std::get<wire::FiveTuple>(s.endpoints);
    src = network_.find_host_by_ip(t.src_ip).value_or(e.host);
    std::variant<alloc::HostId, Refusal> d = destination_host(e, t.dst_ip);
    if (auto* r = std::get_if<Refusal>(&d)) return std::move(*r);
    dst = std::get<alloc::HostId>(d);
    hash = alloc::ecmp_hash({t.src_ip, t.dst_ip, t.src_port, t.dst_port, t.protocol});
  }
  if (src != e.host && !may_speak_for(sender_, src, {})) {
    return Refusal{Cause::kNotAuthorized, "key \"" + sender_->name + "\" may not speak for host " +
                                              network_.host_name(src) + ", the flow's source"};
  }
  if (const auto* t = std::get_if<wire::FiveTuple>(&s.endpoints);
      t != nullptr && sender_ != nullptr) {
    // Joining a socket's flow takes its holder's class, tenant and rates:
    // only under the holder's own key (forked children share their
    // parent's), or a key's class ceiling could be worn through another's.
    const auto it = by_socket_.find(SocketId{src, *t});
    if (it != by_socket_.end() && flows_[it->second].live() &&
        endpoints_[flows_[it->second].endpoint]->key != e.key) {
      return Refusal{Cause::kNotAuthorized, "the socket's flow is held under another key"};
    }
  }
  if (src == dst) {
    return Refusal{Cause::kBadValue, "source and destination are both host " +
                                         network_.host_name(src) +
                                         ": traffic within a host is not scheduled"};
  }
  const std::optional<alloc::Path> path = network_.path(src, dst, hash);
  if (!path) {
    return Refusal{Cause::kUnknownHost,
                   "no route from " + network_.host_name(src) + " to " + network_.host_name(dst)};
  }
  spec.path = *path;
  spec.weight = s.weight;
  // The operator's rule for this flowlet, if any, picks its default and top
  // class; an endpoint never gets above the top class it allows.
  const PolicyRule* r = out.rule = match_rule(e, src, dst, s);
  const std::uint8_t top = r && r->top_class ? *r->top_class : config_.top_class;
  const std::uint8_t dflt =
      std::max(top, r && r->default_class ? *r->default_class : config_.default_class);
  if (s.priority_class != wire::kClassUnset && s.priority_class < top) {
    ++counters_.classes_lowered;
  }
  spec.priority =
      s.priority_class == wire::kClassUnset ? dflt : std::max<std::uint8_t>(s.priority_class, top);
  spec.max_bps = 0;
  spec.src_site = network_.site_of_host(src);
  spec.dst_site = network_.site_of_host(dst);
  const alloc::FlowError err = engine_->check_flow(spec);
  if (err == alloc::FlowError::kOk) return out;
  return Refusal{err == alloc::FlowError::kBlockFull ? Cause::kTooManyFlows : Cause::kBadValue,
                 std::string("engine refused the flow: ") + alloc::to_string(err)};
}

void Allocator::on_start(Endpoint& e, const wire::FlowletStart& s, std::uint64_t now_us) {
  const auto existing = e.flows.find(s.flow_key);
  if (existing == e.flows.end() && e.flows.size() >= config_.max_flows_per_endpoint) {
    refuse(e.peer, &e, Cause::kTooManyFlows,
           "start: endpoint already has " + std::to_string(e.flows.size()) + " live flows",
           s.flow_key, now_us);
    return;
  }
  if (existing == e.flows.end()) {
    if (std::string why = source_full_for_flow(e); !why.empty()) {
      refuse(e.peer, &e, Cause::kTooManyFlows, "start: " + why, s.flow_key, now_us);
      return;
    }
  }
  if (existing == e.flows.end() && engine_->num_flows() >= config_.max_flows &&
      !joins_live_socket(e, s)) {
    refuse(e.peer, &e, Cause::kTooManyFlows,
           "start: the allocator is at its limit of " + std::to_string(config_.max_flows) +
               " flows",
           s.flow_key, now_us);
    return;
  }
  auto resolved = resolve(e, s);
  if (const auto* no = std::get_if<Refusal>(&resolved)) {
    refuse(e.peer, &e, no->cause, "start: " + no->why, s.flow_key, now_us);
    return;
  }
  const Resolved& r = std::get<Resolved>(resolved);
  // A repeated start (a retransmission, or the next flowlet on the same key)
  // replaces the hold: a sole holder's flow is replaced, a shared one is
  // rejoined.
  if (existing != e.flows.end()) release(e, s.flow_key);
  hold(e, s, r.spec, r.src, r.dst, r.rule, now_us);
}

void Allocator::on_end(Endpoint& e, std::uint64_t key, std::uint64_t now_us) {
  const auto it = e.flows.find(key);
  if (it == e.flows.end()) {
    refuse(e.peer, &e, Cause::kUnknownFlow, "end: no live flow with this key", key, now_us);
    return;
  }
  // A deadline is judged by the flowlet's end (an advance end comes about a
  // control round trip before the last byte: that much early).
  const Flow& f = flows_[it->second];
  if (f.deadline_at_us != 0 && f.endpoint == e.idx && f.key == key) {
    ++(now_us <= f.deadline_at_us ? counters_.deadlines_met : counters_.deadlines_missed);
  }
  release(e, key);
}

void Allocator::on_resync(Endpoint& e, const std::vector<wire::FlowletStart>& list,
                          std::uint64_t now_us) {
  std::unordered_set<std::uint64_t> keep;
  keep.reserve(list.size());
  for (const wire::FlowletStart& s : list) keep.insert(s.flow_key);
  // Flows the endpoint no longer holds go first: a resync that replaces
  // them must find their room in the quotas.
  std::vector<std::uint64_t> gone;
  for (const auto& [key, id] : e.flows) {
    if (!keep.contains(key)) gone.push_back(key);
  }
  for (std::uint64_t key : gone) release(e, key);
  for (const wire::FlowletStart& s : list) {
    const auto existing = e.flows.find(s.flow_key);
    auto resolved = resolve(e, s);
    if (const auto* no = std::get_if<Refusal>(&resolved)) {
      refuse(e.peer, &e, no->cause, "resync: " + no->why, s.flow_key, now_us);
      if (existing != e.flows.end()) release(e, s.flow_key);
      continue;
    }
    const Resolved& r = std::get<Resolved>(resolved);
    if (existing != e.flows.end()) {
      const alloc::FlowId id = existing->second;
      Flow& f = flows_[id];
      const auto* t = std::get_if<wire::FiveTuple>(&s.endpoints);
      const bool same_socket = t != nullptr ? f.has_socket && f.socket == SocketId{r.src, *t}
                                            : !f.has_socket;
      // A shared flow keeps its first holder's weight whatever a joiner says.
      if (same_socket && same_path(f.path, r.spec.path) &&
          ((f.weight == s.weight && f.priority_class == r.spec.priority) || f.co_holders > 0)) {
        // Unchanged: keep its prices' history, but tell the endpoint its rate
        // again (it may have lost it with the connection). The next iteration
        // tells every holder.
        if (f.co_holders == 0) {
          const std::string tenant = f.tenant;  // decided at its start (rules)
          f.take_report(s, now_us);
          f.tenant = tenant;
          // The endpoint counts its size as told by this resync: the policy
          // plans with it too (a progress report may have been lost with
          // the message the resync repairs).
          if (!f.was_shared) policy_.grow(id, s.bytes);
        }
        set_sent(id, 0);
        mark_flows_changed();
        continue;
      }
      release(e, s.flow_key);
    } else if (e.flows.size() >= config_.max_flows_per_endpoint ||
               (engine_->num_flows() >= config_.max_flows && !joins_live_socket(e, s))) {
      refuse(e.peer, &e, Cause::kTooManyFlows, "resync: too many live flows", s.flow_key, now_us);
      continue;
    } else if (std::string full = source_full_for_flow(e); !full.empty()) {
      refuse(e.peer, &e, Cause::kTooManyFlows, "resync: " + full, s.flow_key, now_us);
      continue;
    }
    hold(e, s, r.spec, r.src, r.dst, r.rule, now_us);
  }
}

// The endpoint does not apply these flows' rates (an update was lost, or its
// lease lapsed while we were silent): each gets its current rate again,
// whatever the threshold says, since the threshold compares against what
// the endpoint was told, not what it applies. A key we do not hold is
// answered with unknownFlow, which makes the endpoint resync.
void Allocator::on_rate_request(Endpoint& e, const std::vector<std::uint64_t>& keys,
                                std::uint64_t now_us) {
  for (std::uint64_t key : keys) {
    const auto it = e.flows.find(key);
    if (it == e.flows.end()) {
      refuse(e.peer, &e, Cause::kUnknownFlow, "rate request: no live flow with this key", key,
             now_us);
      continue;
    }
    if (sent_[it->second] == 0) continue;  // not rated yet: the next iteration sends it
    retell(e, key, it->second);
  }
}

// A flowlet's size as its endpoint now knows it (the shim learns sizes as
// they are written) and the bytes it has handed over, which correct the
// policy's estimate where that ran ahead. A flow several holders share, or
// did, is left alone: its bytes are their sum, and one holder's report does
// not say how much of it is its own. A key we do not hold is answered as a
// rate request's is (unknownFlow: the endpoint resyncs).
void Allocator::on_progress(Endpoint& e, const std::vector<wire::FlowProgress>& flows,
                            std::uint64_t now_us) {
  for (const wire::FlowProgress& p : flows) {
    const auto it = e.flows.find(p.flow_key);
    if (it == e.flows.end()) {
      refuse(e.peer, &e, Cause::kUnknownFlow, "progress: no live flow with this key", p.flow_key,
             now_us);
      continue;
    }
    Flow& f = flows_[it->second];
    if (f.was_shared) continue;
    f.bytes = std::max(f.bytes, p.bytes);
    policy_.progress(it->second, p.bytes, p.sent, now_us);
    ++counters_.progress_flows;
  }
}

bool Allocator::joins_live_socket(const Endpoint& e, const wire::FlowletStart& s) const {
  const auto* t = std::get_if<wire::FiveTuple>(&s.endpoints);
  if (t == nullptr) return false;
  const alloc::HostId src = network_.find_host_by_ip(t->src_ip).value_or(e.host);
  return by_socket_.contains(SocketId{src, *t});
}

void Allocator::hold(Endpoint& e, const wire::FlowletStart& s, const alloc::FlowSpec& spec,
                     alloc::HostId src, alloc::HostId dst, const PolicyRule* rule,
                     std::uint64_t now_us) {
  const auto* t = std::get_if<wire::FiveTuple>(&s.endpoints);
  if (t == nullptr) {
    add_flow(e, s, spec, src, dst, rule, now_us);  // a host pair names no socket: never shared
    return;
  }
  const SocketId sock{src, *t};
  const auto it = by_socket_.find(sock);
  if (it == by_socket_.end()) {
    add_flow(e, s, spec, src, dst, rule, now_us);
    Flow& f = flows_[e.flows.at(s.flow_key)];
    f.has_socket = true;
    f.socket = sock;
    by_socket_.emplace(sock, e.flows.at(s.flow_key));
    return;
  }
  // Another process writing to the same socket: one flow, one more holder.
  const alloc::FlowId id = it->second;
  Flow& f = flows_[id];
  co_holders_[id].push_back({e.idx, s.flow_key});
  ++f.co_holders;
  f.was_shared = true;
  f.bytes += s.bytes;
  policy_.add_bytes(id, s.bytes);
  e.flows[s.flow_key] = id;
  count_holds(e, 1);
  e.digest.add(s.flow_key);
  ++counters_.flows_joined;
  // It is rated already: the joiner gets what the others were told. Otherwise
  // the next iteration tells every holder.
  if (sent_[id] != 0) {
    pending(e).rates.push_back({s.flow_key, sent_[id], config_.lease_us});
    ++counters_.rate_updates;
  }
}

void Allocator::add_flow(Endpoint& e, const wire::FlowletStart& s, const alloc::FlowSpec& spec,
                         alloc::HostId src, alloc::HostId dst, const PolicyRule* rule,
                         std::uint64_t now_us) {
  const alloc::FlowId id = engine_->add_flow(spec);
  if (id >= flows_.size()) {
    flows_.resize(static_cast<std::size_t>(id) + 1);
    sent_.resize(flows_.size(), 0);
  }
  Flow& f = flows_[id];
  f.endpoint = e.idx;
  f.key = s.flow_key;
  f.co_holders = 0;
  f.was_shared = false;
  f.has_socket = false;  // hold() indexes socket flows
  f.src = src;
  f.dst = dst;
  ref_host(src);
  ref_host(dst);
  f.path = spec.path;
  f.weight = s.weight;
  f.priority_class = spec.priority;
  ++counters_.flows_by_class[spec.priority];
  f.take_report(s, now_us);
  // The operator's rule names the tenant when it has one: an endpoint cannot
  // claim another tenant's share.
  if (rule != nullptr && !rule->tenant.empty()) f.tenant = rule->tenant;
  // Tenant names come from endpoints too: past kMaxTenants new names share
  // no tenant (each flow on its own weight) rather than grow the table.
  alloc::TenantId tenant = policy_.find(f.tenant);
  if (tenant == alloc::kNoTenant && !f.tenant.empty() && policy_.num_tenants() < kMaxTenants) {
    tenant = policy_.tenant(f.tenant);
  }
  f.tenant_id = tenant;
  policy_.add(id, {tenant, s.weight, 0, f.deadline_at_us, s.bytes, f.coflow_id, spec.path}, now_us);
  f.started_us = now_us;
  sent_[id] = 0;
  e.flows[s.flow_key] = id;
  count_holds(e, 1);
  e.digest.add(s.flow_key);
  mark_flows_changed();
  settle_iterations_ = 0;
  if (config_.early_rates) fresh_.push_back(id);
}

void Allocator::release(Endpoint& e, std::uint64_t key) {
  const auto it = e.flows.find(key);
  const alloc::FlowId id = it->second;
  e.flows.erase(it);
  count_holds(e, -1);
  e.digest.remove(key);
  detach(e.idx, key, id);
}

// Removes one holder of flow `id` (the caller updates the endpoint's table).
void Allocator::detach(EndpointIdx endpoint, std::uint64_t key, alloc::FlowId id) {
  Flow& f = flows_[id];
  if (f.co_holders == 0) {
    set_sent(id, 0);  // before the record goes: the host's sum drops
    policy_.remove(id);
    engine_->remove_flow(id);
    if (f.has_socket) by_socket_.erase(f.socket);
    f.has_socket = false;
    f.endpoint = Flow::kNone;
    unref_host(f.src);
    unref_host(f.dst);
    mark_flows_changed();
    settle_iterations_ = 0;
    return;
  }
  const auto side = co_holders_.find(id);
  std::vector<Holder>& others = side->second;
  if (f.endpoint == endpoint && f.key == key) {
    // The first holder leaves: the last joiner takes its place.
    f.endpoint = others.back().endpoint;
    f.key = others.back().key;
    others.pop_back();
  } else {
    const auto h = std::find(others.begin(), others.end(), Holder{endpoint, key});
    FT_ASSERT(h != others.end(), id, key);
    *h = others.back();
    others.pop_back();
  }
  if (--f.co_holders == 0) co_holders_.erase(side);
}

void Allocator::drop_endpoint(EndpointIdx idx) {
  Endpoint& e = *endpoints_[idx];
  for (const auto& [key, id] : e.flows) detach(idx, key, id);
  if (e.pacer) {
    std::vector<EndpointIdx>& p = pacers_[e.host];
    std::erase(p, idx);
    if (p.empty()) pacers_.erase(e.host);
  }
  leave_sources(e);
  by_peer_.erase(e.peer);
  by_endpoint_id_.erase(e.id);
  unref_host(e.host);
  endpoints_[idx].reset();
  endpoint_ids_.release(idx);
}

std::size_t Allocator::revalidate_keys(
    const std::function<const Principal*(std::string_view key)>& lookup) {
  std::size_t dropped = 0;
  for (EndpointIdx idx = 0; idx < endpoints_.size(); ++idx) {
    Endpoint* e = endpoints_[idx].get();
    if (e == nullptr || e->key.empty()) continue;
    const Principal* key = lookup(e->key);
    // A vouched key: every relay that vouched must still be a relay's key.
    std::optional<Principal> vouched;
    if (key != nullptr && !e->via_keys.empty()) {
      std::vector<const Principal*> relays;
      for (const std::string& k : e->via_keys) relays.push_back(lookup(k));
      if (std::find(relays.begin(), relays.end(), nullptr) == relays.end()) {
        if (Result<Principal> p = vouched_for(*key, relays)) vouched = std::move(p).value();
      }
      key = vouched ? &*vouched : nullptr;
    }
    const bool ok = key != nullptr && may_speak_for(key, e->host, network_.host_name(e->host));
    if (ok) e->key_name = key->name;
    if (!ok) {
      drop_endpoint(idx);
      ++dropped;
    }
  }
  release_unused_hosts();
  return dropped;
}

void Allocator::stand_by(const std::string& why, std::uint64_t now_us) {
  now_us_ = std::max(now_us_, now_us);
  active_ = false;
  standby_text_ = why.size() > wire::kMaxTextBytes ? why.substr(0, wire::kMaxTextBytes) : why;
  for (EndpointIdx idx = 0; idx < endpoints_.size(); ++idx) {
    Endpoint* e = endpoints_[idx].get();
    if (e == nullptr) continue;
    if (!e->peer.empty()) refuse(e->peer, nullptr, Cause::kStandby, standby_text_, 0, now_us);
    drop_endpoint(idx);
  }
  release_unused_hosts();
}

void Allocator::activate(std::uint64_t epoch) {
  active_ = true;
  epoch_ = epoch;
}

}  // namespace flowtune::daemon
