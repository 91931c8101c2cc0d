#include "session.h"

#include <algorithm>

namespace flowtune::client {

namespace {

std::string format_ipv4(std::uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 255) + "." +
         std::to_string((ip >> 8) & 255) + "." + std::to_string(ip & 255);
}

}  // namespace

Session::Session(SessionConfig config) : config_(std::move(config)), rtt_us_(config_.initial_rtt_us) {}

Session::Sock* Session::find(SocketRef s) {
  auto it = sockets_.find(s.packed());
  return it == sockets_.end() ? nullptr : &it->second;
}

std::uint64_t Session::rate_of(SocketRef s) const {
  auto it = sockets_.find(s.packed());
  return it == sockets_.end() ? 0 : it->second.rate;
}

void Session::on_register(SocketRef s, const wire::FiveTuple& tuple, std::uint32_t mss,
                          std::uint64_t) {
  Sock& k = sockets_[s.packed()];
  if (k.active) --active_count_;
  k = Sock{};
  k.tuple = tuple;
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

wire::FlowletStart Session::start_of(const Sock& k) const {
  wire::FlowletStart f;
  f.flow_key = k.key;
  f.endpoints = k.tuple;
  f.bytes = std::min<std::uint64_t>(k.declared, wire::kMaxFlowletBytes);
  f.weight = k.weight;
  f.coflow_id = k.coflow_id;
  return f;
}

void Session::report_start(SocketRef ref, Sock& k, std::uint64_t now_us) {
  k.key = next_key_++;
  by_key_[k.key] = ref.packed();
  events_.emplace_back(start_of(k));
  k.started_us = now_us;
  ++stats_.flowlets_started;
}

void Session::report_end(SocketRef ref, Sock& k) {
  if (k.key != 0) {
    ++stats_.flowlets_ended;
    events_.emplace_back(wire::FlowletEnd{k.key});
    by_key_.erase(k.key);
    k.key = 0;
  }
  if (k.active) --active_count_;
  k.active = false;
  k.end_at_us = 0;
  k.end_due = false;
  ended_.push_back(ref);
  // An end comes before the last bytes leave (advance end, or an application
  // that ends after handing its bytes over): the cap stays until the queue
  // has drained, so those bytes leave paced instead of in one burst (which
  // many sockets ending together turn into drops). A look at the queue at
  // the next timer decides when to lift it.
  k.drain_check_us = k.rate != 0 ? 1 : 0;
}

void Session::set_rate(SocketRef ref, Sock& k, std::uint64_t rate) {
  if (rate == k.rate) return;
  k.rate = rate;
  if (rate == 0) k.lease_until = 0;
  actions_.push_back({ref, rate});
}

void Session::on_begin(SocketRef s, std::uint64_t bytes, float weight, std::uint64_t coflow_id,
                       std::uint64_t now_us) {
  Sock* k = find(s);
  if (k == nullptr) return;  // unregistered meanwhile
  if (k->active) {
    // Back-to-back transfers on one socket: one flowlet (paper §6). The
    // queue grows again, so a predicted end no longer holds: look at the
    // queue then instead. A look already scheduled stays (it re-measures).
    k->declared += bytes;
    k->end_due = false;
    if (k->end_at_us != 0) {
      k->drain_check_us = k->end_at_us;
      k->end_at_us = 0;
    }
    ++stats_.flowlets_coalesced;
  } else {
    k->active = true;
    ++active_count_;
    k->declared = bytes;
    k->handed = 0;
    k->weight = weight;
    k->coflow_id = coflow_id;
    k->key = 0;
    if (bytes < config_.min_flowlet_bytes) ++stats_.mice;
  }
  if (k->key == 0 && k->declared >= config_.min_flowlet_bytes) {
    report_start(s, *k, now_us);
  }
}

void Session::on_sent(SocketRef s, std::uint64_t bytes, std::uint64_t now_us) {
  Sock* k = find(s);
  if (k == nullptr || !k->active) return;
  k->handed += bytes;
  finish_if_handed(s, *k, now_us);
}

void Session::on_wrote(SocketRef s, std::uint64_t bytes, std::uint64_t now_us) {
  Sock* k = find(s);
  if (k == nullptr) return;
  const bool extends = k->active;
  on_begin(s, bytes, k->active ? k->weight : 1.0f, k->active ? k->coflow_id : 0, now_us);
  if (extends) --stats_.flowlets_coalesced;  // one flowlet written piecewise, not a new begin
  on_sent(s, bytes, now_us);
}

void Session::finish_if_handed(SocketRef ref, Sock& k, std::uint64_t) {
  if (!k.active || k.handed < k.declared) return;
  // Mice too: a flowlet lasts until the socket's queue drains, so a stream
  // of small writes coalesces (and is reported once it is big enough). One
  // look at the queue at a time: a writer streaming small writes must not
  // cost the runtime a syscall per write.
  if (k.drain_check_us != 0 || k.query_pending) return;
  k.query_pending = true;
  drain_queries_.push_back(ref);
}

void Session::on_unsent(SocketRef s, std::uint64_t unsent, std::uint64_t now_us, bool writing) {
  Sock* k = find(s);
  if (k != nullptr) k->query_pending = false;
  if (k == nullptr) return;
  if (!k->active) {
    // An ended flowlet's cap: lifted once its queue is empty.
    if (k->rate == 0) return;
    if (unsent == 0) {
      set_rate(s, *k, 0);
    } else {
      k->drain_check_us = now_us + std::max<std::uint64_t>(unsent * 1'000'000 / k->rate / 2, 100);
    }
    return;
  }
  if (k->handed < k->declared) return;
  if (writing) {
    // A write call is still handing bytes over: its return reports them and
    // brings the next look; this one only guards against a call that
    // returns having taken nothing.
    k->end_due = false;
    k->drain_check_us = now_us + std::max<std::uint64_t>(rtt_us_, kWritingRecheckUs);
    return;
  }
  if (k->end_due) {
    k->end_due = false;
    ++stats_.ends_in_advance;
    report_end(s, *k);
    return;
  }
  if (unsent == 0) {
    report_end(s, *k);  // a mouse ends silently
    return;
  }
  if (k->key == 0 || k->rate == 0) {
    // No rate to predict the drain from: look again after a round trip.
    k->drain_check_us = now_us + std::max<std::uint64_t>(rtt_us_, 200);
    return;
  }
  const std::uint64_t drain_us = unsent * 1'000'000 / k->rate;
  if (drain_us <= rtt_us_) {
    // The last bytes leave within one control round trip: by the time the
    // allocator acts on the end, the socket is idle (advance end).
    ++stats_.ends_in_advance;
    report_end(s, *k);
    return;
  }
  // The kernel releases a paced queue in bursts of at least two segments,
  // one burst time apart, so the last steps of the queue are coarse.
  const std::uint64_t half_burst_us = k->last_burst * 500'000 / k->rate;
  if (unsent <= k->last_burst) {
    // The last burst: trust the prediction, and end one RTT plus half a
    // burst time early, since that burst may leave at any point of its slot.
    const std::uint64_t lead = rtt_us_ + half_burst_us;
    k->end_at_us = now_us + (drain_us > lead ? drain_us - lead : 0);
    return;
  }
  // Look again halfway to the predicted moment: the real rate differs from
  // the cap a little (unpaced first segments, payload-only pacing), so the
  // prediction is refined as the queue shrinks, in log2(drain / RTT) looks.
  // Never wait more than half a burst's time, so the last burst is seen.
  k->drain_check_us =
      now_us + std::max<std::uint64_t>(std::min((drain_us - rtt_us_) / 2, half_burst_us), 100);
}

void Session::on_end(SocketRef s, std::uint64_t) {
  Sock* k = find(s);
  if (k == nullptr || !k->active) return;
  report_end(s, *k);
}

void Session::end_all(std::uint64_t) {
  for (auto& [packed, k] : sockets_) {
    if (k.active) report_end(SocketRef::unpack(packed), k);
  }
}

void Session::on_message(const wire::AllocatorMessage& m, std::uint64_t now_us) {
  if (epoch_ != 0 && m.epoch != epoch_) need_resync_ = true;  // the allocator restarted
  epoch_ = m.epoch;
  stats_.connected = true;
  for (const wire::RateUpdate& r : m.rates) {
    auto it = by_key_.find(r.flow_key);
    if (it == by_key_.end()) continue;  // ended meanwhile
    const SocketRef ref = SocketRef::unpack(it->second);
    Sock* k = find(ref);
    if (k == nullptr) continue;
    std::uint64_t rate = r.bytes_per_sec;
    if (config_.max_rate_bytes_per_sec != 0) rate = std::min(rate, config_.max_rate_bytes_per_sec);
    k->lease_until = now_us + r.lease_us;
    if (k->started_us != 0) {
      rtt_us_ = (7 * rtt_us_ + (now_us - k->started_us)) / 8;
      k->started_us = 0;
    }
    set_rate(ref, *k, rate);
    // The rate may bring a pending advance end due sooner.
    if (k->active && k->handed >= k->declared && !k->query_pending) {
      k->query_pending = true;
      drain_queries_.push_back(ref);
    }
  }
  if (m.lease_refresh_us != 0) {
    for (auto& [packed, k] : sockets_) {
      if (k.rate != 0) k.lease_until = now_us + m.lease_refresh_us;
    }
  }
  for (const wire::ErrorReport& e : m.errors) {
    ++stats_.allocator_errors;
    if (e.code == wire::ErrorCode::kNotRegistered) need_resync_ = true;
  }
}

void Session::on_timer(std::uint64_t now_us) {
  for (auto& [packed, k] : sockets_) {
    const SocketRef ref = SocketRef::unpack(packed);
    if (k.rate != 0 && k.lease_until <= now_us) {
      // The allocator went quiet: back to plain TCP until it speaks again.
      ++stats_.leases_lapsed;
      set_rate(ref, k, 0);
    }
    if (k.drain_check_us != 0 && k.drain_check_us <= now_us) {
      k.drain_check_us = 0;
      if (!k.query_pending) {
        k.query_pending = true;
        drain_queries_.push_back(ref);
      }
    }
    if (k.end_at_us != 0 && k.end_at_us <= now_us && k.active) {
      // Due: one last look, which ends it unless a write call is under way.
      k.end_at_us = 0;
      k.end_due = true;
      if (!k.query_pending) {
        k.query_pending = true;
        drain_queries_.push_back(ref);
      }
    }
  }
  if (retry_at_us_ != 0 && now_us >= retry_at_us_) retry_at_us_ = 0;  // take_message resyncs
  if (hello_sent_ && now_us >= last_sent_us_ + config_.heartbeat_us && events_.empty()) {
    events_.emplace_back(wire::Heartbeat{});
  }
}

std::uint64_t Session::next_timer_us() const {
  std::uint64_t next = hello_sent_ ? last_sent_us_ + config_.heartbeat_us : UINT64_MAX;
  if (retry_at_us_ != 0) next = std::min(next, retry_at_us_);
  for (const auto& [packed, k] : sockets_) {
    if (k.rate != 0) next = std::min(next, k.lease_until);
    if (k.drain_check_us != 0) next = std::min(next, k.drain_check_us);
    if (k.end_at_us != 0) next = std::min(next, k.end_at_us);
  }
  return next;
}

std::optional<wire::EndpointMessage> Session::take_message(std::uint64_t now_us) {
  if (config_.host.empty()) return std::nullopt;  // no identity yet: nothing to say
  wire::EndpointMessage m;
  if (!hello_sent_ || need_resync_) {
    // State, not history: the resync carries every live reported flowlet,
    // which covers any start or end still queued.
    if (hello_sent_) ++stats_.resyncs;
    m.events.emplace_back(wire::Hello{config_.endpoint_id, config_.host});
    wire::Resync r;
    for (const auto& [packed, k] : sockets_) {
      if (k.active && k.key != 0 && r.flows.size() < wire::kMaxResyncFlows) {
        r.flows.push_back(start_of(k));
      }
    }
    m.events.emplace_back(std::move(r));
    events_.clear();
    hello_sent_ = true;
    need_resync_ = false;
  } else if (!events_.empty()) {
    // Split what does not fit one message; the rest goes next time.
    const std::size_t n = std::min(events_.size(), wire::kMaxItemsPerMessage);
    m.events.assign(std::make_move_iterator(events_.begin()),
                    std::make_move_iterator(events_.begin() + static_cast<std::ptrdiff_t>(n)));
    events_.erase(events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(n));
  } else {
    return std::nullopt;
  }
  m.seq = ++seq_;
  last_sent_us_ = now_us;
  return m;
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

}  // namespace flowtune::client
