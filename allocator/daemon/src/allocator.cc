// Allocator: message dispatch, engine iterations and rate updates, lease
// timers, and the outbox. What each event does is in allocator_events.cc.
#include "flowtune/daemon/allocator.h"

#include <algorithm>
#include <cmath>

#include "allocator_internal.h"
#include "flowtune/wire/codec.h"

namespace flowtune::daemon {

void validate(const AllocatorConfig& c) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw ConfigError(what);
  };
  require(c.threads >= 1 && c.threads <= 256, "threads must be 1-256");
  require(rules::valid_threshold(c.threshold), "threshold must be in [0, 0.5]");
  require(rules::valid_headroom(c.headroom), "headroom must be in [0, 0.9]");
  require(c.view_slack >= 0 && c.view_slack <= 0.5, "view slack must be in [0, 0.5]");
  require(c.lease_us >= 1000, "lease must be at least 1 ms");
  require(c.lease_refresh_us >= 1000 && c.lease_refresh_us < c.lease_us,
          "lease refresh must be at least 1 ms and shorter than the lease");
  require(c.endpoint_timeout_us > c.lease_us,
          "endpoint timeout must be longer than the lease (a silent endpoint's rates must "
          "lapse before its capacity is given away)");
  require(c.max_settle_iterations >= 1, "max settle iterations must be at least 1");
  require(c.update_interval_us < c.lease_refresh_us,
          "update interval must be shorter than the lease refresh");
  require(c.timer_slice >= 1, "timer slice must be at least 1");
  require(c.max_flows_per_endpoint >= 1 && c.max_flows_per_endpoint <= wire::kMaxResyncFlows,
          "max flows per endpoint must be 1-" + std::to_string(wire::kMaxResyncFlows) +
              " (an endpoint's state must fit one resync message)");
  require(c.max_endpoints >= 1, "max endpoints must be at least 1");
  require(c.max_flows >= 1, "max flows must be at least 1");
  require(c.max_messages_per_sec >= 0 && std::isfinite(c.max_messages_per_sec),
          "max messages per second must be a non-negative number");
  require(c.default_class < alloc::kNumClasses,
          "default class must be 0-" + std::to_string(alloc::kNumClasses - 1));
  require(c.top_class <= c.default_class,
          "top class must be 0 to the default class (a flowlet that names no class may "
          "not be above what endpoints may ask for)");
  require(c.deadline_margin >= 0 && c.deadline_margin <= 1, "deadline margin must be 0-1");
  require(c.coflow_share > 0 && c.coflow_share <= 1, "coflow share must be within (0, 1]");
  require(c.coflow_aging_s >= 0 && c.coflow_aging_s < alloc::kMaxAgingS,
          "coflow aging must be within [0, 1e9) seconds");
}

namespace {

alloc::EngineConfig engine_config(const AllocatorConfig& c) {
  alloc::EngineConfig e = c.engine;
  e.blocks = c.engine_blocks > 0 ? c.engine_blocks
             : c.threads > 1    ? alloc::ParallelDriver::blocks_for_threads(c.threads)
                                : 1;
  return e;
}

std::vector<double> scheduled_capacities(const Network& n, const AllocatorConfig& c) {
  std::vector<double> caps = n.topology().capacities_bps();
  const double scale = rules::capacity_scale(c.threshold, c.headroom) * (1 - c.view_slack);
  for (double& cap : caps) cap *= scale;
  return caps;
}

}  // namespace

Allocator::Allocator(Network network, const AllocatorConfig& config, std::uint64_t epoch, Log* log)
    : config_(config),
      network_(std::move(network)),
      epoch_(epoch),
      log_(log),
      policy_(config.deadline_margin),
      flag_classes_{config.default_class, config.top_class} {
  validate(config_);
  (void)policy_.set_coflow(config_.coflow_policy, config_.coflow_share,
                           config_.coflow_aging_s);  // validated above
  set_policy(config_.policy);
  try {
    engine_ = std::make_unique<alloc::JournaledEngine<double>>(
        scheduled_capacities(network_, config_), network_.topology().num_sites(),
        engine_config(config_));
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("engine: ") + e.what());
  }
  if (config_.iterate_elsewhere) {
    engine_->set_journal(&journal_);
  } else if (config_.threads > 1) {
    driver_ = std::make_unique<alloc::ParallelDriver>(config_.threads, config_.schedule);
  }
  strangers_ = TokenBucket(config_.max_messages_per_sec, 0);
  // Every host id there can be: an explicit topology's hosts are not its
  // topology's (links only); a big switch's slots include the spare ones.
  host_refs_.assign(std::max(network_.num_hosts(), network_.topology().num_hosts()), 0);
}

Allocator::~Allocator() = default;

void Allocator::set_limits(const AllocatorConfig& limits) {
  AllocatorConfig c = config_;
  c.max_endpoints = limits.max_endpoints;
  c.max_flows = limits.max_flows;
  c.max_flows_per_endpoint = limits.max_flows_per_endpoint;
  c.max_flows_per_source = limits.max_flows_per_source;
  c.max_endpoints_per_source = limits.max_endpoints_per_source;
  c.max_hosts_per_source = limits.max_hosts_per_source;
  validate(c);
  config_ = c;
}

void Allocator::set_policy(const OperatorPolicy& p) {
  // A key the file no longer sets falls back to the flags', not to the
  // previous file's value.
  AllocatorConfig next = config_;
  next.default_class = p.default_class.value_or(flag_classes_[0]);
  next.top_class = p.top_class.value_or(flag_classes_[1]);
  for (const auto& [name, spec] : p.tenants) {
    if (std::string why = alloc::check(spec); !why.empty()) {
      throw ConfigError(p.source + ": tenants." + name + ": " + why);
    }
  }
  try {
    validate(next);
  } catch (const ConfigError& e) {
    throw ConfigError(p.source + ": " + e.what());
  }
  config_ = std::move(next);
  config_.policy = p;
  policy_.set_default_spec(p.default_tenant);
  for (const auto& [name, spec] : p.tenants) policy_.set_spec(policy_.tenant(name), spec);
  for (alloc::TenantId t = 1; t <= policy_.num_tenants(); ++t) {
    if (!p.tenants.contains(std::string(policy_.name(t)))) policy_.reset_spec(t);
  }
}

const PolicyRule* Allocator::match_rule(const Endpoint& e, alloc::HostId src, alloc::HostId dst,
                                        const wire::FlowletStart& s) const {
  const auto* t = std::get_if<wire::FiveTuple>(&s.endpoints);
  auto host_in = [&](const std::vector<std::string>& names, alloc::HostId h) {
    if (names.empty()) return true;
    for (const std::string& n : names) {
      if (network_.find_host(n) == h) return true;
    }
    return false;
  };
  for (const PolicyRule& r : config_.policy.rules) {
    if (!host_in(r.src_hosts, src) || !host_in(r.dst_hosts, dst)) continue;
    if (!e.id.starts_with(r.endpoint_prefix)) continue;
    if (!r.keys.empty() && std::find(r.keys.begin(), r.keys.end(), e.key_name) == r.keys.end()) {
      continue;
    }
    if (r.dst_port_hi != 0 &&
        (t == nullptr || t->dst_port < r.dst_port_lo || t->dst_port > r.dst_port_hi)) {
      continue;
    }
    return &r;
  }
  return nullptr;
}

// ---- input ----

void Allocator::on_message(std::string_view peer, std::span<const std::uint8_t> frame,
                           std::uint64_t now_us, const Principal* sender,
                           std::string_view address) {
  sender_ = sender;
  address_ = address;
  handle_message(peer, frame, now_us);
  sender_ = nullptr;
  address_ = {};
  release_unused_hosts();
}

void Allocator::on_unauthorized(std::string_view peer, std::string why, std::uint64_t now_us) {
  now_us_ = std::max(now_us_, now_us);
  ++counters_.messages_in;
  // Answered within the strangers' budget: a flood of them costs its
  // sender, and the endpoints, nothing.
  if (!strangers_.take(now_us)) return;
  refuse(peer, nullptr, Cause::kNotAuthorized, std::move(why), 0, now_us);
}

void Allocator::handle_message(std::string_view peer, std::span<const std::uint8_t> frame,
                               std::uint64_t now_us) {
  now_us_ = std::max(now_us_, now_us);
  ++counters_.messages_in;
  counters_.bytes_in += frame.size();
  if (!active_) {
    // Within the strangers' budget: a swarm moving away costs us little.
    if (strangers_.take(now_us)) refuse(peer, nullptr, Cause::kStandby, standby_text_, 0, now_us);
    else counters_.count(Cause::kStandby);
    return;
  }
  bool taken = true;
  Endpoint* e = sender_endpoint(peer, now_us, &taken);
  if (!taken) return;
  // Heard, even if what it says is refused below: a source in debt must
  // not make its other endpoints time out.
  if (e != nullptr) e->last_heard_us = now_us;
  // Charged before decoding: a flood of large frames costs its sender, not us.
  std::size_t unpacked = 0;
  if (!admit_message(e, peer, frame, &unpacked, now_us)) return;

  wire::EndpointMessage m;
  const wire::DecodeStatus st = wire::decode(frame, unpacked, &m);
  if (!st.ok()) {
    std::string detail = st.detail;
    if (st.error == wire::DecodeError::kUnsupportedVersion) {
      detail = "protocol version " + std::to_string(st.version) +
               " is not supported; this allocator speaks version " +
               std::to_string(wire::kProtocolVersion);
    }
    refuse(peer, e, cause_of(st.error), detail, 0, now_us);
    return;
  }

  const std::uint64_t flow_refusals = flow_refusals_;
  for (const wire::EndpointEvent& ev : m.events) {
    if (!handle_event(peer, ev, &e, now_us)) return;
  }
  if (e != nullptr) heard_message(peer, *e, m, flow_refusals, now_us);
}

Allocator::Endpoint* Allocator::sender_endpoint(std::string_view peer, std::uint64_t now_us,
                                                bool* taken) {
  auto it = by_peer_.find(std::string(peer));
  Endpoint* e = it == by_peer_.end() ? nullptr : endpoints_[it->second].get();
  if (e != nullptr && sender_ != nullptr && e->key != sender_->key) {
    // The connection's routing id names an endpoint another key registered
    // (a client may choose its routing id, and take one whose connection
    // closed): nothing it says is taken, nor is anything sent to it; the
    // endpoint is reached again when it says hello from a new connection.
    by_peer_.erase(it);
    e->peer.clear();
    *taken = false;
    if (strangers_.take(now_us)) {
      refuse(peer, nullptr, Cause::kNotAuthorized, "this routing id belongs to another key's endpoint",
             0, now_us);
    }
    return nullptr;
  }
  return e;
}

bool Allocator::handle_event(std::string_view peer, const wire::EndpointEvent& ev, Endpoint** sender,
                             std::uint64_t now_us) {
  Endpoint*& e = *sender;
  if (const auto* h = std::get_if<wire::Hello>(&ev)) {
    ++counters_.hellos;
    on_hello(peer, *h, now_us);
    auto it = by_peer_.find(std::string(peer));
    e = it == by_peer_.end() ? nullptr : endpoints_[it->second].get();
    return true;
  }
  if (e == nullptr) {
    refuse(peer, nullptr, Cause::kNotRegistered,
           "events before hello: send hello (and resync) first", 0, now_us);
    return false;
  }
  if (e->pacer && !std::holds_alternative<wire::Heartbeat>(ev)) {
    refuse(peer, e, Cause::kBadValue,
           "a host pacer holds no flows: it sends hello and heartbeats only", 0, now_us);
    return true;
  }
  if (const auto* s = std::get_if<wire::FlowletStart>(&ev)) {
    ++counters_.starts;
    on_start(*e, *s, now_us);
  } else if (const auto* end = std::get_if<wire::FlowletEnd>(&ev)) {
    ++counters_.ends;
    on_end(*e, end->flow_key, now_us);
  } else if (std::holds_alternative<wire::Heartbeat>(ev)) {
    ++counters_.heartbeats;
  } else if (const auto* r = std::get_if<wire::Resync>(&ev)) {
    ++counters_.resyncs;
    on_resync(*e, r->flows, now_us);
  } else if (const auto* q = std::get_if<wire::RateRequest>(&ev)) {
    ++counters_.rate_requests;
    on_rate_request(*e, q->flow_keys, now_us);
  } else if (const auto* p = std::get_if<wire::Progress>(&ev)) {
    ++counters_.progress;
    on_progress(*e, p->flows, now_us);
  }
  return true;
}

void Allocator::heard_message(std::string_view peer, Endpoint& e, const wire::EndpointMessage& m,
                              std::uint64_t flow_refusals, std::uint64_t now_us) {
  e.last_heard_us = now_us;
  e.last_seq = m.seq;
  ++e.messages;
  // A lost start or end shows here. Skipped when this message had a flow
  // refused: the endpoint learns of that from the same reply.
  if (m.digest && *m.digest != e.digest && flow_refusals_ == flow_refusals) {
    refuse(peer, &e, Cause::kStateMismatch,
           "state mismatch: the endpoint has " + std::to_string(m.digest->flows) +
               " live flows, the allocator holds " + std::to_string(e.digest.flows) +
               " (or other keys); resync",
           0, now_us);
  }
}

void Allocator::on_bad_frames(std::string_view peer, std::size_t frames, std::uint64_t now_us) {
  ++counters_.messages_in;
  auto it = by_peer_.find(std::string(peer));
  Endpoint* e = it == by_peer_.end() ? nullptr : endpoints_[it->second].get();
  refuse(peer, e, Cause::kBadFrames,
         "a message has 1 frame (endpoint) or 2 (flowtune-ctl), not " + std::to_string(frames), 0,
         now_us);
}

// A frame is charged its size, or what it unpacks to over kLegitUnpack,
// whichever is more: legitimate messages unpack at most 3.65x (a full
// resync; codec_test), so they are charged their size, while a frame of
// zero runs (up to 64x before the codec refuses it) is charged for the
// decoding it asks for.
std::size_t Allocator::decode_cost(std::size_t packed, std::size_t unpacked) {
  constexpr std::size_t kLegitUnpack = 4;
  return std::max(packed, unpacked / kLegitUnpack);
}

std::size_t Allocator::decode_cost(std::span<const std::uint8_t> frame) {
  return decode_cost(frame.size(), wire::unpacked_bytes(frame));
}

bool Allocator::admit_message(Endpoint* e, std::string_view peer, std::span<const std::uint8_t> frame,
                              std::size_t* unpacked, std::uint64_t now_us) {
  // The source's budget first (its key's with CURVE, else its address's
  // where the transport has one, else its host's), so that a refusal there
  // leaves the endpoint's own tokens alone. A peer not registered yet (a
  // hello, often with its resync) is charged to its key or address when it
  // has one; only peers with neither share the strangers' budget.
  Source* source = nullptr;
  if (e != nullptr) {
    auto* s = e->key_source != nullptr       ? e->key_source
              : e->address_source != nullptr ? e->address_source
                                             : e->host_source;
    source = s != nullptr ? &s->second : nullptr;
  } else if (std::string key = key_source_name(peer); !key.empty()) {
    source = &source_of(std::move(key))->second;
  } else if (!address_.empty()) {
    source = &source_of("a:" + std::string(address_))->second;
  }
  auto refused = [&](double limit, const char* unit) {
    // An endpoint told within the quiet time is not told again: it waits
    // that long before it resyncs (wire::kRateLimitedQuietUs), or it is
    // flooding. Counted all the same.
    if (e != nullptr && e->told_limited_us != 0 &&
        now_us - e->told_limited_us < wire::kRateLimitedQuietUs) {
      counters_.count(Cause::kRateLimited);
      ++e->errors;
      return false;
    }
    if (e != nullptr) e->told_limited_us = std::max<std::uint64_t>(now_us, 1);
    refuse(peer, e, Cause::kRateLimited,
           std::string("message dropped: ") + (unit[0] == 'b' ? "its source is " : "") + "over " +
               std::to_string(static_cast<std::uint64_t>(limit)) + " " + unit +
               "/s; slow down and resync",
           0, now_us);
    return false;
  };
  // A source in debt is refused whatever the frame holds: without the scan
  // that prices it, so that a flood past its budget costs the loop no more
  // than reading it.
  if (source != nullptr && !source->bytes.has_token(now_us)) {
    return refused(config_.max_source_bytes_per_sec, "bytes");
  }
  *unpacked = wire::unpacked_bytes(frame);
  const std::size_t bytes = decode_cost(frame.size(), *unpacked);
  if (source != nullptr && !source->bytes.take(now_us, static_cast<double>(bytes))) {
    return refused(config_.max_source_bytes_per_sec, "bytes");
  }
  // Decoding costs by size: a message weighs one more for every whole 4 KB
  // it carries (a full resync, about 1 MB at most, weighs about 257).
  constexpr std::size_t kBytesPerToken = 4096;
  const auto cost = static_cast<double>(1 + bytes / kBytesPerToken);
  TokenBucket* own = e != nullptr ? &e->tokens : (source == nullptr ? &strangers_ : nullptr);
  if (own == nullptr || own->take(now_us, cost)) return true;
  return refused(config_.max_messages_per_sec, "messages");
}

void Allocator::on_send_failed(std::string_view peer) {
  const auto it = by_peer_.find(std::string(peer));
  if (it != by_peer_.end()) endpoints_[it->second]->resend_rates = true;
}

void Allocator::refuse(std::string_view peer, Endpoint* e, Cause c, std::string detail,
                       std::uint64_t flow_key, std::uint64_t now_us) {
  counters_.count(c);
  if (flow_key != 0) ++flow_refusals_;
  if (log_ != nullptr) log_->refusal(c, now_us, peer, detail);
  wire::AllocatorMessage* out = nullptr;
  if (e != nullptr) {
    ++e->errors;
    out = &pending(*e);
  } else {
    // Bounded: a storm of strangers cannot grow the reply table without limit.
    constexpr std::size_t kMaxStrayPeers = 4096;
    auto it = stray_.find(std::string(peer));
    if (it == stray_.end()) {
      if (stray_.size() >= kMaxStrayPeers) return;
      it = stray_.emplace(std::string(peer), wire::AllocatorMessage{}).first;
    }
    out = &it->second;
  }
  if (out->errors.size() >= wire::kMaxErrorsPerMessage) return;
  if (detail.size() > wire::kMaxTextBytes) detail.resize(wire::kMaxTextBytes);
  out->errors.push_back({error_code_of(c), std::move(detail), flow_key});
}

// ---- iterations ----

bool Allocator::busy() const {
  if (flows_changed_ || policy_.dirty(now_us_)) return true;
  return engine_->num_flows() > 0 && !engine_->stats().converged &&
         settle_iterations_ < config_.max_settle_iterations;
}

void Allocator::apply_policy(std::uint64_t now_us) {
  now_us_ = std::max(now_us_, now_us);
  if (policy_.dirty(now_us_)) {
    // Tenants' weights and floors change the optimum: settle again.
    policy_.apply(*engine_, now_us_);
    settle_iterations_ = 0;
  }
}

void Allocator::iterate(std::uint64_t now_us) {
  apply_policy(now_us);
  if (config_.iterate_elsewhere) {
    config_.iterate_elsewhere(*engine_, &journal_);
  } else if (driver_) {
    driver_->iterate(*engine_);
  } else {
    engine_->iterate();
  }
  ++counters_.iterations;
  flows_changed_ = false;
  fresh_.clear();  // rated by this iteration, if the server did not tell them first
  ++settle_iterations_;

  if (config_.update_interval_us == 0 || now_us_ >= next_update_us_ || !busy()) {
    queue_moved_rates(/*raises=*/true);
    next_update_us_ = now_us_ + config_.update_interval_us;
  } else {
    // Cuts and first rates never wait: held rates may lag the computed
    // ones only by the threshold (rules::capacity_scale), and a flow with
    // no rate waits for none. Only raises, which can leave a link
    // under-used but never over, wait for the next full pass.
    queue_moved_rates(/*raises=*/false);
    ++counters_.rate_passes_deferred;
  }
  for (const auto& [id, rate] : told_early_) {
    // A flowlet that ended since is not corrected (its sent_ is 0, or gone
    // with a compaction); an id taken again in between counts as one.
    if (id < sent_.size() && sent_[id] != rate && sent_[id] != 0) ++counters_.early_rates_corrected;
  }
  told_early_.clear();
  tell_pacers();
}

// Its first rate at the prices of the moment: the same rate the iteration
// would give it were the prices not to move (they move little once settled,
// and one flowlet more moves them little), so a start is answered in the
// time of a message, not of an iteration. Others keep their rates until the
// iteration: on each of its links the newcomer takes at most its F-NORM
// share, which is what the iteration would take from them too, and their
// rates would move by less than the threshold unless the newcomer is a
// large part of the link.
std::size_t Allocator::tell_early_rates(std::uint64_t now_us) {
  std::size_t told = 0;
  if (!fresh_.empty()) {
    // Weights, floors and coflow plans as the iteration will have them
    // (applying them is the iteration's first step anyway).
    apply_policy(now_us);
    for (const alloc::FlowId id : fresh_) {
      // Ended since (gone), or listed twice (told already).
      if (!engine_->has_flow(id) || sent_[id] != 0) continue;
      const std::uint64_t rate = to_bytes_per_sec(engine_->estimate_rate_bps(id));
      if (rate == 0) continue;
      set_sent(id, rate);
      tell_holders(id, rate);
      told_early_.emplace_back(id, rate);
      ++told;
    }
    counters_.early_rates += told;
    tell_pacers();
  }
  fresh_.clear();
  return told;
}

// The update check (paper §5.3.2): stream each FlowBlock's ids and rates and
// compare with the dense array of rates last told; flow records are touched
// only for the few that moved past the threshold.
void Allocator::queue_moved_rates(bool raises) {
  const double threshold = config_.threshold;
  const double to_bytes = alloc::Engine::kRateUnitBps / 8.0;
  for (std::size_t b = 0; b < engine_->num_blocks(); ++b) {
    const auto r = engine_->block_rates(b);
    for (std::size_t s = 0; s < r.size; ++s) {
      const alloc::FlowId id = r.ids[s];
      const std::uint64_t rate = rules::round_bytes_per_sec(r.rates[s] * to_bytes);
      const std::uint64_t sent = sent_[id];
      if (rate == sent) [[likely]] continue;  // settled flows: the common case
      if (!raises && sent != 0 && rate > sent) continue;  // the next full pass
      if (rules::update_decision(rate, sent, threshold) == rules::Update::kSuppressed) {
        ++counters_.rate_updates_suppressed;
        continue;
      }
      set_sent(id, rate);
      tell_holders(id, rate);
    }
  }
}

void Allocator::set_sent(alloc::FlowId id, std::uint64_t rate) {
  const alloc::HostId h = flows_[id].src;
  if (h >= host_sent_.size()) {
    host_sent_.resize(static_cast<std::size_t>(h) + 1, 0);
    host_rated_.resize(static_cast<std::size_t>(h) + 1, 0);
  }
  // Unsigned arithmetic: the sum stays exact whatever the order of changes.
  host_sent_[h] += rate - sent_[id];
  host_rated_[h] += static_cast<std::uint32_t>(rate != 0) - static_cast<std::uint32_t>(sent_[id] != 0);
  sent_[id] = rate;
  if (pacers_.empty() || !pacers_.contains(h)) return;  // the common case: no pacer
  if (h >= pacer_marked_.size()) pacer_marked_.resize(static_cast<std::size_t>(h) + 1, 0);
  if (pacer_marked_[h] == 0) {
    pacer_marked_[h] = 1;
    pacer_dirty_.push_back(h);
  }
}

void Allocator::tell_pacers() {
  for (alloc::HostId h : pacer_dirty_) {
    pacer_marked_[h] = 0;
    const auto it = pacers_.find(h);
    if (it == pacers_.end()) continue;
    for (EndpointIdx idx : it->second) {
      pending(*endpoints_[idx]);  // the outbox stamps the host's rate
      ++counters_.host_rate_updates;
    }
  }
  pacer_dirty_.clear();
}

void Allocator::tell_holders(alloc::FlowId id, std::uint64_t rate) {
  const Flow& f = flows_[id];
  pending(*endpoints_[f.endpoint]).rates.push_back({f.key, rate, config_.lease_us});
  ++counters_.rate_updates;
  if (f.co_holders == 0) return;  // the common case: one holder, no side table
  for (const Holder& h : co_holders_.at(id)) {
    pending(*endpoints_[h.endpoint]).rates.push_back({h.key, rate, config_.lease_us});
    ++counters_.rate_updates;
  }
}

void Allocator::retell(Endpoint& e, std::uint64_t key, alloc::FlowId id) {
  const std::uint64_t rate = to_bytes_per_sec(engine_->rate_bps(id));
  if (rate != sent_[id] && flows_[id].co_holders > 0) {
    // The others hold the old rate: what was told must stay one number.
    set_sent(id, rate);
    tell_holders(id, rate);
    return;
  }
  set_sent(id, rate);
  pending(e).rates.push_back({key, rate, config_.lease_us});
  ++counters_.rate_updates;
}

std::uint32_t Allocator::holders(alloc::FlowId id) const { return 1 + flows_[id].co_holders; }

// ---- timers ----

void Allocator::schedule_timer(std::uint64_t at_us) {
  if (next_timer_us_ == UINT64_MAX) next_timer_us_ = at_us;
}

void Allocator::on_timer(std::uint64_t now_us) {
  now_us_ = std::max(now_us_, now_us);
  // Woken for a planned deadline, not a tick: busy() now says so, and the
  // next iteration re-plans.
  if (now_us < next_timer_us_) return;
  // A scan under way has passed its first endpoint: every call visits one.
  if (timer_cursor_ == 0) {
    sweep_sources(now_us);
    timer_scan_start_us_ = now_us;
  }
  // Whole endpoints, as many as fit the slice (at least one).
  std::size_t visited = 0;
  while (timer_cursor_ < endpoints_.size()) {
    const Endpoint* e = endpoints_[timer_cursor_].get();
    const std::size_t cost = 1 + (e == nullptr ? 0 : e->flows.size());
    if (visited > 0 && visited + cost > config_.timer_slice) break;
    tick_endpoint(timer_cursor_++, now_us);
    visited += cost;
  }
  // The hosts of the endpoints that timed out in this slice: a slot comes
  // back (and stops counting against its sources) with the call that
  // freed it, not with the end of the scan.
  release_unused_hosts();
  if (timer_cursor_ < endpoints_.size()) {
    next_timer_us_ = now_us;  // the rest on the next turn
    return;
  }
  timer_cursor_ = 0;
  // Ticks keep their period however long a scan takes to finish.
  next_timer_us_ = endpoint_ids_.live() == 0
                       ? UINT64_MAX
                       : std::max(now_us, timer_scan_start_us_ + config_.lease_refresh_us);
}

void Allocator::tick_endpoint(EndpointIdx idx, std::uint64_t now_us) {
  Endpoint* e = endpoints_[idx].get();
  if (e == nullptr) return;
  const std::size_t flows = e->flows.size();
  const std::uint64_t deadline = e->last_heard_us + config_.endpoint_timeout_us;
  if (now_us >= deadline) {
    ++counters_.endpoints_timed_out;
    counters_.flows_expired += flows;
    if (log_ != nullptr && log_->enabled(LogLevel::kInfo)) {
      log_->note(Note::kEndpointTimedOut, LogLevel::kInfo, now_us,
                 "endpoint " + e->id + " timed out; " + std::to_string(flows) + " flows removed");
    }
    drop_endpoint(idx);
    return;
  }
  // A refresh must not let rates outlive the endpoint's deadline: its
  // capacity is handed to others then.
  if (now_us + config_.lease_us > deadline) return;
  if (e->pacer) {
    pending(*e).lease_refresh_us = config_.lease_us;  // with the host's rate
    ++counters_.lease_refreshes;
    return;
  }
  if (e->flows.empty()) return;
  wire::AllocatorMessage& out = pending(*e);
  out.lease_refresh_us = config_.lease_us;
  ++counters_.lease_refreshes;
  if (e->resend_rates) {
    // An update may have been lost: tell the endpoint every rate again.
    e->resend_rates = false;
    for (const auto& [key, id] : e->flows) {
      if (sent_[id] == 0) continue;  // the next iteration sends it
      retell(*e, key, id);
    }
  }
  // What we told it (after any resend above), so it can tell a lost
  // update: one pass over its flows per refresh interval.
  wire::StateDigest told;
  for (const auto& [key, id] : e->flows) {
    if (sent_[id] != 0) told.add_rate(key, sent_[id]);
  }
  out.rate_digest = told;
  out.ack_seq = e->last_seq;
}

// ---- outbox ----

wire::AllocatorMessage& Allocator::pending(Endpoint& e) {
  if (!e.dirty) {
    e.dirty = true;
    dirty_.push_back(e.idx);
  }
  return e.out;
}

namespace {

// Splits a message so each part stays within the wire's item limits.
void split_into(std::string_view peer, wire::AllocatorMessage&& m, std::uint64_t epoch,
                std::vector<Outgoing>* out) {
  m.epoch = epoch;
  const std::size_t items = m.rates.size() + m.errors.size();
  if (items <= wire::kMaxItemsPerMessage) {
    out->push_back({std::string(peer), std::move(m)});
    return;
  }
  std::size_t r = 0;
  bool first = true;
  while (r < m.rates.size() || first) {
    wire::AllocatorMessage part;
    part.epoch = epoch;
    part.host_rate = m.host_rate;
    part.host_flows = m.host_flows;
    if (first) {
      part.errors = std::move(m.errors);
      part.lease_refresh_us = m.lease_refresh_us;
    }
    const std::size_t room = wire::kMaxItemsPerMessage - part.errors.size();
    const std::size_t n = std::min(room, m.rates.size() - r);
    part.rates.assign(m.rates.begin() + static_cast<std::ptrdiff_t>(r),
                      m.rates.begin() + static_cast<std::ptrdiff_t>(r + n));
    r += n;
    first = false;
    if (r == m.rates.size()) {
      // Compared after every rate has been applied: with the last part.
      part.rate_digest = m.rate_digest;
      part.ack_seq = m.ack_seq;
    }
    out->push_back({std::string(peer), std::move(part)});
  }
}

}  // namespace

std::vector<Outgoing> Allocator::take_outbox() {
  std::vector<Outgoing> out;
  for (EndpointIdx idx : dirty_) {
    Endpoint* e = idx < endpoints_.size() ? endpoints_[idx].get() : nullptr;
    if (e == nullptr || !e->dirty) continue;
    e->dirty = false;
    if (e->pacer) {
      const bool known = e->host < host_sent_.size();
      e->out.host_rate = known ? host_sent_[e->host] : 0;
      e->out.host_flows = known ? host_rated_[e->host] : 0;
    }
    split_into(e->peer, std::move(e->out), epoch_, &out);
    e->out = {};
  }
  dirty_.clear();
  for (auto& [peer, m] : stray_) split_into(peer, std::move(m), epoch_, &out);
  stray_.clear();
  return out;
}

// ---- views ----

std::vector<EndpointView> Allocator::endpoints(std::uint64_t now_us, std::size_t limit,
                                              std::uint32_t from, std::uint32_t* next) const {
  std::vector<EndpointView> v;
  if (next != nullptr) *next = UINT32_MAX;
  for (std::size_t slot = from; slot < endpoints_.size(); ++slot) {
    const auto& e = endpoints_[slot];
    if (!e) continue;
    if (v.size() == limit) {
      if (next != nullptr) *next = static_cast<std::uint32_t>(slot);
      break;
    }
    v.push_back({e->id, e->peer, e->host, e->flows.size(),
                 now_us > e->last_heard_us ? now_us - e->last_heard_us : 0, e->messages,
                 e->errors, e->key_name, e->via_keys.size()});
  }
  return v;
}

FlowTotals Allocator::totals() const {
  FlowTotals t;
  t.by_tenant.resize(policy_.num_tenants() + 1);
  t.link_flows.assign(engine_->num_links(), 0);
  t.link_allocated_bps.assign(engine_->num_links(), 0.0);
  for (alloc::FlowId id = 0; id < flows_.size(); ++id) {
    const Flow& f = flows_[id];
    if (!f.live()) continue;
    const double r = engine_->rate_bps(id);
    for (FlowTotals::Sum* s : {&t.by_class[f.priority_class], &t.by_tenant[f.tenant_id]}) {
      ++s->flows;
      s->rate_bps += r;
    }
    for (const alloc::LinkId l : f.path) {
      ++t.link_flows[l];
      t.link_allocated_bps[l] += r;
    }
  }
  return t;
}

std::vector<FlowView> Allocator::flows(std::uint64_t now_us, std::size_t limit, alloc::FlowId from,
                                       alloc::FlowId* next) const {
  std::vector<FlowView> v;
  alloc::FlowId id = from;
  for (; id < flows_.size(); ++id) {
    const Flow& f = flows_[id];
    if (!f.live()) continue;
    if (v.size() == limit) break;
    v.push_back({endpoints_[f.endpoint]->id, f.key, f.src, f.dst, f.path, f.weight, f.bytes,
                 f.coflow_id, f.priority_class, f.tenant, f.deadline_left_us(now_us),
                 policy_.deadline_state(id), engine_->floor_bps(id), engine_->rate_bps(id),
                 static_cast<double>(sent_[id]) * 8.0,
                 now_us > f.started_us ? now_us - f.started_us : 0, holders(id)});
  }
  if (next != nullptr) *next = id < flows_.size() ? id : UINT32_MAX;
  return v;
}

namespace {

template <class Map>
void shrink_map(Map& m) {
  if (m.bucket_count() > 4 * (m.size() + 1)) m.rehash(0);
}

}  // namespace

bool Allocator::compact_if_sparse(std::size_t min_room) {
  const std::size_t flow_room = flows_.capacity(), endpoint_room = endpoints_.capacity();
  const bool sparse_flows = flow_room >= min_room && engine_->num_flows() * 4 < flow_room;
  const bool sparse_endpoints = endpoint_room >= min_room && endpoint_ids_.live() * 4 < endpoint_room;
  if (!sparse_flows && !sparse_endpoints) return false;
  engine_->compact();
  policy_.compact();
  flows_.resize(engine_->id_bound());
  flows_.shrink_to_fit();
  sent_.resize(flows_.size());
  sent_.shrink_to_fit();
  endpoint_ids_.trim();
  endpoints_.resize(endpoint_ids_.issued());
  endpoints_.shrink_to_fit();
  shrink_map(by_peer_);
  shrink_map(by_endpoint_id_);
  shrink_map(co_holders_);
  shrink_map(by_socket_);
  shrink_map(pacers_);
  shrink_map(stray_);
  shrink_map(sources_);
  for (auto& e : endpoints_) {
    if (e) shrink_map(e->flows);
  }
  dirty_.shrink_to_fit();
  pacer_dirty_.shrink_to_fit();
  maybe_unused_.shrink_to_fit();
  ++counters_.compactions;
  return true;
}

}  // namespace flowtune::daemon
