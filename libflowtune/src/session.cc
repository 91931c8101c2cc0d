#include "session.h"

#include <algorithm>
#include <utility>

#include "flowtune/common/ipv4.h"

namespace flowtune::client {

namespace {

std::uint64_t seed_of(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a: distinct endpoints, distinct jitter
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h | 1;
}

}  // namespace

const char* to_string(FlowletState s) {
  switch (s) {
    case FlowletState::kIdle: return "idle";
    case FlowletState::kSending: return "sending";
    case FlowletState::kWatching: return "watching";
    case FlowletState::kEndAt: return "end-at";
    case FlowletState::kEndDue: return "end-due";
    case FlowletState::kDraining: return "draining";
  }
  return "?";
}

Session::Session(SessionConfig config)
    : config_(std::move(config)), rng_(seed_of(config_.endpoint_id)),
      rtt_us_(config_.initial_rtt_us) {}

Session::Sock* Session::find(SocketRef s) {
  auto it = sockets_.find(s.packed());
  return it == sockets_.end() ? nullptr : &it->second;
}

std::uint64_t Session::rate_of(SocketRef s) const {
  auto it = sockets_.find(s.packed());
  return it == sockets_.end() ? 0 : it->second.rate;
}

FlowletState Session::state_of(SocketRef s) const {
  auto it = sockets_.find(s.packed());
  return it == sockets_.end() ? FlowletState::kIdle : it->second.state;
}

std::vector<FlowletView> Session::flowlets() const {
  std::vector<FlowletView> v;
  for (const auto& [packed, k] : sockets_) {
    if (k.in_progress()) v.push_back({SocketRef::unpack(packed), k.key, k.rate});
  }
  return v;
}

// ---- sockets ----

void Session::on_register(SocketRef s, const wire::FiveTuple& tuple, std::uint32_t mss,
                          std::uint64_t, const FlowletPolicy& defaults) {
  Sock& k = sockets_[s.packed()];
  if (k.in_progress()) --active_count_;
  if (k.key != 0) {
    by_key_.erase(k.key);
    digest_.remove(k.key);
  }
  k = Sock{};
  k.tuple = tuple;
  k.defaults = defaults;
  // Paced TCP releases at least two segments at a time (64 kB segments on
  // loopback): the queue's last step can be that large.
  k.last_burst = std::max<std::uint64_t>(kLastBurstBytes, 2 * std::uint64_t{mss} + 1);
  if (config_.host.empty()) config_.host = format_ipv4(tuple.src_ip);
}

void Session::on_unregister(SocketRef s, std::uint64_t now_us) {
  on_end(s, now_us);
  // SocketTable::release() already cleared the cap on the application's thread.
  sockets_.erase(s.packed());
}

void Session::on_begin(SocketRef s, std::uint64_t bytes,
                       const std::optional<FlowletPolicy>& policy, std::uint64_t now_us) {
  Sock* k = find(s);
  if (k == nullptr) return;  // unregistered meanwhile
  In in{Input::kBegin, bytes};
  in.policy = policy.value_or(k->defaults);
  step(s, *k, in, now_us);
}

void Session::on_sent(SocketRef s, std::uint64_t bytes, std::uint64_t now_us) {
  if (Sock* k = find(s)) step(s, *k, In{Input::kSent, bytes}, now_us);
}

void Session::on_wrote(SocketRef s, std::uint64_t bytes, std::uint64_t now_us) {
  Sock* k = find(s);
  if (k == nullptr) return;
  const bool extends = k->in_progress();
  // Extending keeps the flowlet's policy (step ignores a begin's policy then).
  on_begin(s, bytes, std::nullopt, now_us);
  if (extends) --stats_.flowlets_coalesced;  // one flowlet written piecewise, not a new begin
  on_sent(s, bytes, now_us);
}

void Session::on_end(SocketRef s, std::uint64_t now_us) {
  if (Sock* k = find(s)) step(s, *k, In{Input::kEnd}, now_us);
}

void Session::end_all(std::uint64_t now_us) {
  for (auto& [packed, k] : sockets_) step(SocketRef::unpack(packed), k, In{Input::kEnd}, now_us);
}

void Session::on_unsent(SocketRef s, std::uint64_t unsent, std::uint64_t now_us, bool writing) {
  Sock* k = find(s);
  if (k == nullptr) return;
  k->looking = false;
  In in{Input::kLook, unsent};
  in.writing = writing;
  step(s, *k, in, now_us);
}

// ---- the flowlet state machine ----

void Session::step(SocketRef ref, Sock& k, const In& in, std::uint64_t now_us) {
  using S = FlowletState;
  switch (in.kind) {
    case Input::kBegin:
      if (k.in_progress()) {
        extend_flowlet(ref, k, in.bytes, now_us);
      } else {
        begin_flowlet(ref, k, in, now_us);
      }
      return;
    case Input::kSent:
      if (!k.in_progress()) return;
      k.handed += in.bytes;
      // Mice too: a flowlet lasts until the socket's queue drains, so a
      // stream of small writes coalesces (and is reported once it is big
      // enough). One look at a time: a writer streaming small writes must
      // not cost the runtime a syscall per write.
      if (k.state == S::kSending && k.handed >= k.declared) {
        k.state = S::kWatching;
        look_now(ref, k);
      }
      return;
    case Input::kLook:
      on_look(ref, k, in.bytes, in.writing, now_us);
      return;
    case Input::kTimer:
      if (k.due_us == 0 || k.due_us > now_us) return;
      k.due_us = 0;
      if (k.state == S::kEndAt) k.state = S::kEndDue;  // one last look, then the end
      if (k.state == S::kWatching || k.state == S::kEndDue || k.state == S::kDraining) {
        look_now(ref, k);
      }
      return;
    case Input::kRate:
      // The rate may bring a pending advance end due sooner.
      if (k.state == S::kWatching || k.state == S::kEndAt) {
        k.state = S::kWatching;
        look_now(ref, k);
      }
      return;
    case Input::kEnd:
      if (k.in_progress()) end_flowlet(ref, k, now_us);
      return;
  }
}

void Session::begin_flowlet(SocketRef ref, Sock& k, const In& in, std::uint64_t now_us) {
  ++active_count_;
  k.state = FlowletState::kSending;
  k.declared = in.bytes;
  k.handed = 0;
  k.policy = in.policy;
  k.deadline_at_us =
      in.policy.deadline_ms != 0 ? now_us + std::uint64_t{in.policy.deadline_ms} * 1000 : 0;
  k.key = 0;
  k.refused = false;
  k.rated = false;
  k.due_us = 0;
  k.ask_at_us = 0;
  if (in.bytes < config_.min_flowlet_bytes) {
    ++stats_.mice;
    // A cap still held for the previous flowlet's tail has no flow behind it now.
    set_rate(ref, k, 0);
    return;
  }
  // A reported flowlet keeps the tail's cap until its own rate arrives: a
  // conservative start instead of an unpaced one.
  report_start(ref, k, now_us);
}

void Session::extend_flowlet(SocketRef ref, Sock& k, std::uint64_t bytes, std::uint64_t now_us) {
  // Back-to-back transfers on one socket: one flowlet (paper §6). The queue
  // grows again, so a predicted end no longer holds; the handing-over of
  // the new bytes brings the next look.
  k.declared += bytes;
  k.state = FlowletState::kSending;
  k.due_us = 0;
  ++stats_.flowlets_coalesced;
  if (k.key == 0 && !k.refused && k.declared >= config_.min_flowlet_bytes) {
    report_start(ref, k, now_us);
  } else if (k.key != 0 && progress_ok_ && link_ == LinkState::kRegistered &&
             k.declared >= k.told_bytes + k.told_bytes / 2) {
    // The allocator orders coflows and plans deadlines by what is left: a
    // flowlet grown by half since it last heard is told, so a flowlet written
    // piecewise costs O(log size) reports, not one per write.
    queue_event(wire::Progress{{told_progress(k)}});
  }
}

// The flowlet's progress as the allocator is about to hear it.
wire::FlowProgress Session::told_progress(Sock& k) {
  k.told_bytes = k.declared;
  const std::uint64_t size = std::min(k.declared, wire::kMaxFlowletBytes);
  return {k.key, size, std::min(k.handed, size)};
}

// Flowlets that grew while the hello was on its way (their starts carried
// the size of that moment): one report for all of them.
void Session::report_growth() {
  wire::Progress p;
  for (auto& [packed, k] : sockets_) {
    if (!k.in_progress() || k.key == 0 || k.declared <= k.told_bytes) continue;
    p.flows.push_back(told_progress(k));
    if (p.flows.size() == wire::kMaxResyncFlows) queue_event(std::exchange(p, {}));  // a message's worth
  }
  if (!p.flows.empty()) queue_event(std::move(p));
}

void Session::look_now(SocketRef ref, Sock& k) {
  k.due_us = 0;
  if (k.looking) return;  // the look on its way answers this too
  k.looking = true;
  drain_queries_.push_back(ref);
}

void Session::on_look(SocketRef ref, Sock& k, std::uint64_t unsent, bool writing,
                      std::uint64_t now_us) {
  using S = FlowletState;
  switch (k.state) {
    case S::kIdle:
    case S::kSending:
      return;  // bytes are still being handed over: their end brings a look
    case S::kDraining:
      // An ended flowlet's cap: lifted once its queue is empty.
      if (unsent == 0 || k.rate == 0) {
        set_rate(ref, k, 0);
        k.state = S::kIdle;
        k.due_us = 0;
      } else {
        k.due_us = now_us + std::max<std::uint64_t>(unsent * 1'000'000 / k.rate / 2, 100);
      }
      return;
    case S::kEndDue:
    case S::kWatching:
    case S::kEndAt:
      break;
  }
  if (writing) {
    // A write call is still handing bytes over: its return reports them and
    // brings the next look; this one only guards against a call that
    // returns having taken nothing.
    k.state = S::kWatching;
    k.due_us = now_us + std::max<std::uint64_t>(rtt_us_, kWritingRecheckUs);
    return;
  }
  if (k.state == S::kEndDue) {
    ++stats_.ends_in_advance;
    end_flowlet(ref, k, now_us);
    return;
  }
  if (unsent == 0) {
    end_flowlet(ref, k, now_us);  // a mouse ends silently
    return;
  }
  k.state = S::kWatching;
  if (k.key == 0 || k.rate == 0) {
    // No rate to predict the drain from: look again after a round trip.
    k.due_us = now_us + std::max<std::uint64_t>(rtt_us_, 200);
    return;
  }
  const std::uint64_t drain_us = unsent * 1'000'000 / k.rate;
  if (drain_us <= rtt_us_) {
    // The last bytes leave within one control round trip: by the time the
    // allocator acts on the end, the socket is idle (advance end).
    ++stats_.ends_in_advance;
    end_flowlet(ref, k, now_us);
    return;
  }
  // The kernel releases a paced queue in bursts of at least two segments,
  // one burst time apart, so the last steps of the queue are coarse.
  const std::uint64_t half_burst_us = k.last_burst * 500'000 / k.rate;
  if (unsent <= k.last_burst) {
    // The last burst: trust the prediction, and end one RTT plus half a
    // burst time early, since that burst may leave at any point of its slot.
    const std::uint64_t lead = rtt_us_ + half_burst_us;
    k.state = S::kEndAt;
    k.due_us = std::max<std::uint64_t>(now_us + (drain_us > lead ? drain_us - lead : 0), 1);
    return;
  }
  // Look again halfway to the predicted moment: the real rate differs from
  // the cap a little (unpaced first segments, payload-only pacing), so the
  // prediction is refined as the queue shrinks, in log2(drain / RTT) looks.
  // Near the end (a few bursts left) never wait more than half a burst's
  // time, so the last burst is seen; further out, halfway leaves at least
  // two bursts for the next look, and never more than kFarLookMaxUs, so a
  // queue that drains far faster than its cap predicts (pacing refused by
  // the kernel) ends at most that late. (Capping every look at half a
  // burst made a long flowlet's looks linear in its length: 4 syscalls
  // every ~0.3 ms at 1 Gbit/s, a tenth of a core per sending socket.)
  const std::uint64_t halfway = (drain_us - rtt_us_) / 2;
  const std::uint64_t wait = unsent > kFarBursts * k.last_burst
                                 ? std::min(halfway, kFarLookMaxUs)
                                 : std::min(halfway, half_burst_us);
  k.due_us = now_us + std::max<std::uint64_t>(wait, 100);
}

void Session::end_flowlet(SocketRef ref, Sock& k, std::uint64_t now_us) {
  if (k.key != 0) {
    ++stats_.flowlets_ended;
    queue_event(wire::FlowletEnd{k.key});
    by_key_.erase(k.key);
    digest_.remove(k.key);
    k.key = 0;
  }
  --active_count_;
  k.ask_at_us = 0;
  ended_.push_back(ref);
  // An end comes before the last bytes leave (advance end, or an application
  // that ends after handing its bytes over): the cap stays until the queue
  // has drained, so those bytes leave paced instead of in one burst (which
  // many sockets ending together turn into drops).
  if (k.rate == 0) {
    k.state = FlowletState::kIdle;
    k.due_us = 0;
    return;
  }
  k.state = FlowletState::kDraining;
  k.due_us = std::max<std::uint64_t>(now_us, 1);
}

// ---- reports and rates ----

wire::FlowletStart Session::start_of(const Sock& k, std::uint64_t now_us) const {
  wire::FlowletStart f;
  f.flow_key = k.key;
  f.endpoints = k.tuple;
  f.bytes = std::min<std::uint64_t>(k.declared, wire::kMaxFlowletBytes);
  f.weight = k.policy.weight;
  f.coflow_id = k.policy.coflow_id;
  f.priority_class = k.policy.priority_class;
  if (k.policy.tenant != 0 && config_.tenants) f.tenant = config_.tenants->name(k.policy.tenant);
  // Time left, not a time: no clocks need agree. A deadline already passed
  // says 1 µs (the allocator counts it missed).
  if (k.deadline_at_us != 0) {
    f.deadline_us = std::clamp<std::uint64_t>(k.deadline_at_us > now_us ? k.deadline_at_us - now_us : 1,
                                              1, wire::kMaxDeadlineUs);
  }
  return f;
}

void Session::report_start(SocketRef ref, Sock& k, std::uint64_t now_us) {
  k.key = next_key_++;
  by_key_[k.key] = ref.packed();
  digest_.add(k.key);
  k.told_bytes = k.declared;
  queue_event(start_of(k, now_us));
  k.started_us = now_us;
  k.ask_backoff_us = std::max<std::uint64_t>(10 * rtt_us_, kFirstAskUs);
  k.ask_at_us = now_us + k.ask_backoff_us;
  ++stats_.flowlets_started;
}

void Session::set_rate(SocketRef ref, Sock& k, std::uint64_t rate) {
  if (rate == 0) k.rated = false;
  if (rate == k.rate) return;
  k.rate = rate;
  if (rate == 0) k.lease_until = 0;
  actions_.push_back({ref, rate});
}

void Session::refuse_flow(Sock& k) {
  // The allocator holds no flow for it: no cap may stay, and it is not
  // reported again (a later flowlet on the socket tries afresh).
  by_key_.erase(k.key);
  digest_.remove(k.key);
  k.key = 0;
  k.refused = true;
  k.ask_at_us = 0;
  ++stats_.flows_refused;
}

void Session::on_rate(const wire::RateUpdate& r, std::uint64_t now_us) {
  auto it = by_key_.find(r.flow_key);
  if (it == by_key_.end()) return;  // ended meanwhile
  const SocketRef ref = SocketRef::unpack(it->second);
  Sock* k = find(ref);
  if (k == nullptr) return;
  k->told = r.bytes_per_sec;
  std::uint64_t rate = std::max(r.bytes_per_sec, config_.min_rate_bytes_per_sec);
  if (config_.max_rate_bytes_per_sec != 0) rate = std::min(rate, config_.max_rate_bytes_per_sec);
  if (rate == 0) rate = 1;  // 0 would mean "no cap"; the allocator never sends it
  k->lease_until = now_us + r.lease_us;
  k->rated = true;
  k->ask_at_us = 0;
  if (k->started_us != 0) {
    rtt_us_ = (7 * rtt_us_ + (now_us - k->started_us)) / 8;
    k->started_us = 0;
  }
  set_rate(ref, *k, rate);
  step(ref, *k, In{Input::kRate}, now_us);
}

void Session::on_error(const wire::ErrorReport& e, std::uint64_t now_us) {
  ++stats_.allocator_errors;
  using wire::ErrorCode;
  if (link_ == LinkState::kHelloSent && e.flow_key == 0) return;  // judged with the whole reply
  if (e.code == ErrorCode::kNotRegistered || e.code == ErrorCode::kRateLimited ||
      e.code == ErrorCode::kStateMismatch) {
    // The allocator does not know us, or dropped a message whole: what it
    // holds may differ from what we have. Resend state (backing off, since
    // the cause may last).
    // Over a rate limit, the allocator will not answer again for a while:
    // a resync sooner would be dropped unanswered.
    const std::uint64_t min_wait =
        e.code == ErrorCode::kRateLimited ? wire::kRateLimitedQuietUs : 0;
    if (link_ != LinkState::kNew) resync_after(now_us, /*backoff=*/true, min_wait);
    return;
  }
  if (e.flow_key == 0) return;
  const auto it = by_key_.find(e.flow_key);
  if (it == by_key_.end()) return;  // about a flowlet that has ended: nothing to repair
  const SocketRef ref = SocketRef::unpack(it->second);
  Sock* k = find(ref);
  if (k == nullptr) return;
  if (e.code == ErrorCode::kUnknownFlow) {
    // A live flowlet the allocator does not hold (its start was lost).
    // Over a rate limit, the allocator will not answer again for a while:
    // a resync sooner would be dropped unanswered.
    const std::uint64_t min_wait =
        e.code == ErrorCode::kRateLimited ? wire::kRateLimitedQuietUs : 0;
    if (link_ != LinkState::kNew) resync_after(now_us, /*backoff=*/true, min_wait);
    return;
  }
  refuse_flow(*k);  // erases `it`
  set_rate(ref, *k, 0);
}

void Session::on_message(const wire::AllocatorMessage& m, std::uint64_t now_us) {
  // Late words of the allocator failed over from: its rates are not ours now.
  if (left_epoch_ != 0 && m.epoch == left_epoch_) return;
  heard_epoch_ = m.epoch;
  awaiting_since_us_ = 0;
  if (std::any_of(m.errors.begin(), m.errors.end(),
                  [](const auto& e) { return e.code == wire::ErrorCode::kStandby; })) {
    // A hot standby holds nothing and its epoch is not the active one's:
    // move on (failover), or ask again later (the only allocator listed).
    standby_seen_ = true;
    ++stats_.allocator_errors;
    if (link_ != LinkState::kNew) resync_after(now_us, /*backoff=*/true);
    return;
  }
  // It serves now (a standby that took over while the runtime waited out a
  // round's backoff, and acknowledged the hello sent again meanwhile):
  // stay. A standby seen before must not move us off it.
  standby_seen_ = false;
  if (epoch_ != 0 && m.epoch != epoch_) {
    // The allocator restarted: it holds nothing of ours.
    epoch_ = m.epoch;
    resync_after(now_us, /*backoff=*/false);
    return;  // rates and errors of the old incarnation do not apply
  }
  epoch_ = m.epoch;
  stats_.connected = true;
  if (link_ == LinkState::kHelloSent) {
    if (m.hello_ack) {
      link_ = LinkState::kRegistered;
      progress_ok_ = m.progress_ok;
      if (progress_ok_) report_growth();
      backoff_us_ = 0;
      if (refusal_told_) notices_.push_back({2, "the allocator accepted this endpoint"});
      refusal_told_ = false;
    } else if (!m.errors.empty()) {
      // Refused (unknown host, too many endpoints, or our hello was dropped):
      // try again later, backing off, and tell the program once.
      ++stats_.hellos_refused;
      if (!refusal_told_) {
        refusal_told_ = true;
        notices_.push_back({1, "the allocator refused this endpoint (host \"" + config_.host +
                                   "\"): " + m.errors.front().text +
                                   "; retrying with backoff, sockets run unpaced meanwhile"});
      }
      const bool limited = std::any_of(m.errors.begin(), m.errors.end(), [](const auto& e) {
        return e.code == wire::ErrorCode::kRateLimited;
      });
      resync_after(now_us, /*backoff=*/true, limited ? wire::kRateLimitedQuietUs : 0);
    }
  }
  for (const wire::RateUpdate& r : m.rates) on_rate(r, now_us);
  if (m.lease_refresh_us != 0) {
    // Only flows the allocator holds: a refused or ended flowlet's cap must
    // not live on because others do.
    for (auto& [packed, k] : sockets_) {
      if (k.rated && k.key != 0 && k.in_progress()) k.lease_until = now_us + m.lease_refresh_us;
    }
  }
  for (const wire::ErrorReport& e : m.errors) on_error(e, now_us);
  if (m.rate_digest && m.ack_seq == seq_ && link_ == LinkState::kRegistered) {
    check_rates(*m.rate_digest, now_us);
  }
}

// The allocator's digest of the rates it told us, sent when nothing of ours
// was in flight (its ack_seq is our last message): a difference means an
// update was lost, so every reported flowlet asks for its rate again.
void Session::check_rates(const wire::StateDigest& told, std::uint64_t now_us) {
  wire::StateDigest have;
  for (const auto& [packed, k] : sockets_) {
    if (k.key != 0 && k.rated && k.in_progress()) have.add_rate(k.key, k.told);
  }
  if (have == told) return;
  ++stats_.rate_mismatches;
  for (auto& [packed, k] : sockets_) {
    if (k.key != 0 && k.in_progress()) {
      k.rated = false;  // until the answer comes; the cap stays meanwhile
      k.ask_backoff_us = std::max<std::uint64_t>(10 * rtt_us_, kFirstAskUs);
      k.ask_at_us = now_us;
    }
  }
}

// ---- registration and repair ----

std::uint64_t Session::next_backoff(std::uint64_t b) {
  return b == 0 ? kMinBackoffUs : std::min(2 * b, kMaxBackoffUs);
}

std::uint64_t Session::jittered(std::uint64_t backoff_us) {
  rng_ ^= rng_ << 13;  // xorshift64: deterministic per endpoint id, no syscalls
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  const std::uint64_t half = backoff_us / 2;
  return half + (half == 0 ? 0 : rng_ % (half + 1));
}

void Session::resync_after(std::uint64_t now_us, bool backoff, std::uint64_t min_wait_us) {
  if (link_ == LinkState::kNew && retry_at_us_ > now_us) return;  // one is already scheduled
  link_ = LinkState::kNew;
  events_.clear();  // the resync carries state: history is moot
  if (backoff) {
    backoff_us_ = next_backoff(backoff_us_);
    retry_at_us_ = now_us + std::max(jittered(backoff_us_), min_wait_us);
  } else {
    retry_at_us_ = 0;
  }
}

void Session::on_send_failed(std::uint64_t now_us) {
  link_ = LinkState::kNew;
  events_.clear();
  retry_at_us_ = now_us + kRetryUs;
}

void Session::queue_event(wire::EndpointEvent e) {
  // Before the hello goes out, the resync that follows it carries the state.
  if (link_ == LinkState::kNew) return;
  events_.push_back(std::move(e));
}

std::size_t Session::items_of(const wire::EndpointEvent& e) {
  if (const auto* r = std::get_if<wire::RateRequest>(&e)) return 1 + r->flow_keys.size();
  if (const auto* r = std::get_if<wire::Resync>(&e)) return 1 + r->flows.size();
  if (const auto* r = std::get_if<wire::Progress>(&e)) return 1 + r->flows.size();
  return 1;
}

void Session::on_timer(std::uint64_t now_us) {
  std::vector<std::uint64_t> ask;
  for (auto& [packed, k] : sockets_) {
    const SocketRef ref = SocketRef::unpack(packed);
    if (k.rate != 0 && k.lease_until <= now_us) {
      // The allocator went quiet: back to plain TCP until it speaks again,
      // and ask for the rate at once (it is sent when it answers).
      ++stats_.leases_lapsed;
      set_rate(ref, k, 0);
      if (k.state == FlowletState::kDraining) {
        k.state = FlowletState::kIdle;
        k.due_us = 0;
      } else if (k.key != 0) {
        // Unpaced, a watched queue drains faster than its look predicted.
        if (k.state == FlowletState::kWatching || k.state == FlowletState::kEndAt) look_now(ref, k);
        k.ask_backoff_us = std::max<std::uint64_t>(10 * rtt_us_, kFirstAskUs);
        k.ask_at_us = now_us;
      }
    }
    step(ref, k, In{Input::kTimer}, now_us);
    if (k.ask_at_us != 0 && k.ask_at_us <= now_us) {
      if (k.key != 0 && !k.rated && k.in_progress()) {
        ask.push_back(k.key);
        k.ask_at_us = now_us + k.ask_backoff_us;
        k.ask_backoff_us = std::min(2 * k.ask_backoff_us, config_.heartbeat_us);
      } else {
        k.ask_at_us = 0;
      }
    }
  }
  if (!ask.empty() && link_ != LinkState::kNew) {
    stats_.rate_requests += ask.size();
    for (std::size_t i = 0; i < ask.size(); i += kMaxAskKeys) {
      const std::size_t n = std::min(kMaxAskKeys, ask.size() - i);
      queue_event(wire::RateRequest{{ask.begin() + static_cast<std::ptrdiff_t>(i),
                                     ask.begin() + static_cast<std::ptrdiff_t>(i + n)}});
    }
  }
  if (link_ == LinkState::kHelloSent && now_us >= hello_at_us_ + config_.heartbeat_us) {
    // No answer to the hello (it or its reply was lost): say it again.
    resync_after(now_us, /*backoff=*/true);
  }
  if (link_ != LinkState::kNew && now_us >= last_sent_us_ + config_.heartbeat_us &&
      events_.empty()) {
    events_.emplace_back(wire::Heartbeat{});
  }
}

std::uint64_t Session::next_timer_us() const {
  std::uint64_t next = UINT64_MAX;
  if (link_ == LinkState::kNew) {
    if (retry_at_us_ != 0) next = retry_at_us_;
  } else {
    next = last_sent_us_ + config_.heartbeat_us;
    if (link_ == LinkState::kHelloSent) next = std::min(next, hello_at_us_ + config_.heartbeat_us);
  }
  if (config_.failover && awaiting_since_us_ != 0) {
    next = std::min(next, awaiting_since_us_ + kSilentHeartbeats * config_.heartbeat_us);
  }
  for (const auto& [packed, k] : sockets_) {
    if (k.rate != 0) next = std::min(next, k.lease_until);
    if (k.due_us != 0) next = std::min(next, k.due_us);
    if (k.ask_at_us != 0) next = std::min(next, k.ask_at_us);
  }
  return next;
}

std::optional<wire::EndpointMessage> Session::take_message(std::uint64_t now_us) {
  if (config_.host.empty()) return std::nullopt;  // no identity yet: nothing to say
  wire::EndpointMessage m;
  if (link_ == LinkState::kNew) {
    if (retry_at_us_ > now_us) return std::nullopt;  // backing off
    // State, not history: the resync carries every live reported flowlet,
    // which covers any start or end still queued.
    if (said_hello_) ++stats_.resyncs;
    m.events.emplace_back(wire::Hello{config_.endpoint_id, config_.host});
    wire::Resync r;
    for (auto& [packed, k] : sockets_) {
      if (k.in_progress() && k.key != 0 && r.flows.size() < wire::kMaxResyncFlows) {
        r.flows.push_back(start_of(k, now_us));
        k.told_bytes = k.declared;
        // The allocator resends every resynced flow's rate; ask only if it does not.
        if (!k.rated) k.ask_at_us = now_us + std::max<std::uint64_t>(10 * rtt_us_, kFirstAskUs);
      }
    }
    m.events.emplace_back(std::move(r));
    events_.clear();
    said_hello_ = true;
    link_ = LinkState::kHelloSent;
    hello_at_us_ = now_us;
    retry_at_us_ = 0;
  } else if (!events_.empty()) {
    // Split what does not fit one message (the decoder counts each event
    // and each entry of its lists); the rest goes next time.
    std::size_t n = 0, items = 0;
    while (n < events_.size() && items + items_of(events_[n]) <= wire::kMaxItemsPerMessage) {
      items += items_of(events_[n++]);
    }
    m.events.assign(std::make_move_iterator(events_.begin()),
                    std::make_move_iterator(events_.begin() + static_cast<std::ptrdiff_t>(n)));
    events_.erase(events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(n));
  } else {
    return std::nullopt;
  }
  m.seq = ++seq_;
  m.digest = digest_;
  last_sent_us_ = now_us;
  if (awaiting_since_us_ == 0 && std::any_of(m.events.begin(), m.events.end(), [](const auto& e) {
        return std::holds_alternative<wire::Hello>(e) || std::holds_alternative<wire::RateRequest>(e);
      })) {
    awaiting_since_us_ = now_us;  // both are always answered
  }
  return m;
}

bool Session::failover_due(std::uint64_t now_us) const {
  if (!config_.failover) return false;
  return standby_seen_ ||
         (awaiting_since_us_ != 0 && now_us >= awaiting_since_us_ + kSilentHeartbeats * config_.heartbeat_us);
}

void Session::on_allocator_switched(std::uint64_t now_us) {
  // What the one left says late is dropped by its epoch: the one it was
  // registered in, or a standby's (whose epoch was never taken). Only that
  // one: coming back to an allocator left earlier must hear it again.
  left_epoch_ = heard_epoch_;
  heard_epoch_ = 0;
  epoch_ = 0;
  stats_.connected = false;
  standby_seen_ = false;
  awaiting_since_us_ = 0;
  progress_ok_ = false;  // until the new one says it reads progress
  backoff_us_ = 0;
  link_ = LinkState::kNew;
  events_.clear();
  retry_at_us_ = now_us;
}

std::vector<PacingAction> Session::take_actions() {
  std::vector<PacingAction> out;
  out.swap(actions_);
  return out;
}

std::vector<SocketRef> Session::take_ended() {
  std::vector<SocketRef> out;
  out.swap(ended_);
  return out;
}

std::vector<SocketRef> Session::take_drain_queries() {
  std::vector<SocketRef> out;
  out.swap(drain_queries_);
  return out;
}

std::vector<Notice> Session::take_notices() {
  std::vector<Notice> out;
  out.swap(notices_);
  return out;
}

}  // namespace flowtune::client
