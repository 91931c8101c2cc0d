// The Server's hot standby (docs/reliability.md): the role probe to the
// peer, the witness's lease, and the turn that applies Takeover's rule.
#include "flowtune/daemon/server.h"

#include <algorithm>
#include <iterator>
#include <vector>
#include <zmq_addon.hpp>

#include "allocator_internal.h"
#include "flowtune/common/curve.h"
#include "flowtune/common/endpoint.h"

namespace flowtune::daemon {

void Server::enable_standby(zmq::context_t& ctx, Standby s) {
  if (const std::string why = endpoint_port_error(s.peer); !why.empty()) {
    throw ConfigError("--standby-of: " + why);
  }
  if (s.probe_us == 0 || s.takeover_us < 2 * s.probe_us) {
    throw ConfigError("the takeover time must span at least two probes");
  }
  probe_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
  probe_->set(zmq::sockopt::linger, 0);
  // A probe goes only to a live connection and none piles up: an answer
  // says how the peer is now, and a stale one would hide its silence.
  probe_->set(zmq::sockopt::immediate, 1);
  probe_->set(zmq::sockopt::sndhwm, 4);
  probe_->set(zmq::sockopt::reconnect_ivl,
              static_cast<int>(std::max<std::uint64_t>(s.probe_us / 1000, 1)));
  if (auth_.enabled()) {
    Result<curve::KeyPair> own = curve::load_key_file(auth_.secret_file, true);
    if (!own) throw ConfigError("--curve-secret: " + own.error().message);
    // The pair shares one key: the probe speaks to the peer with it.
    probe_key_ = *own;
    if (curve::apply_client(probe_->handle(), {own->public_key, *own, {}}) != 0) {
      throw ConfigError(std::string("CURVE on the standby probe: ") + zmq_strerror(zmq_errno()));
    }
  }
  try {
    probe_->connect(s.peer);
  } catch (const zmq::error_t& e) {
    throw ConfigError("--standby-of " + s.peer + ": " + e.what());
  }
  if (!s.witness.empty()) {
    if (const std::string why = endpoint_port_error(s.witness); !why.empty()) {
      throw ConfigError("--witness: " + why);
    }
    witness_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    witness_->set(zmq::sockopt::linger, 0);
    // As the probe: a claim goes only to a live connection, none piles up.
    witness_->set(zmq::sockopt::immediate, 1);
    witness_->set(zmq::sockopt::sndhwm, 4);
    witness_->set(zmq::sockopt::reconnect_ivl,
                  static_cast<int>(std::max<std::uint64_t>(s.probe_us / 1000, 1)));
    // The witness speaks the pair's key pair, as the peer does.
    if (auth_.enabled() &&
        curve::apply_client(witness_->handle(), {probe_key_.public_key, probe_key_, {}}) != 0) {
      throw ConfigError(std::string("CURVE on the witness's connection: ") +
                        zmq_strerror(zmq_errno()));
    }
    try {
      witness_->connect(s.witness);
    } catch (const zmq::error_t& e) {
      throw ConfigError("--witness " + s.witness + ": " + e.what());
    }
  }
  const std::uint64_t now = now_us();
  takeover_.emplace(s.takeover_us, s.id, now, witness_ != nullptr);
  allocator_.stand_by("this allocator is standing by; " + s.peer + " is active", now);
  next_probe_us_ = now;
  standby_ = std::move(s);
}

namespace {

// Each flowtune-ctl answer waiting on `s` ([kControlTag, text]) passed to
// `f` as its text; anything else is skipped.
template <typename F>
void each_control_answer(zmq::socket_t& s, F f) {
  for (;;) {
    std::vector<zmq::message_t> frames;
    try {
      if (!zmq::recv_multipart(s, std::back_inserter(frames), zmq::recv_flags::dontwait)) return;
    } catch (const zmq::error_t&) {
      return;
    }
    if (frames.size() == 2 && frames[0].to_string_view() == kControlTag)
      f(frames[1].to_string_view());
  }
}

}  // namespace

void Server::read_probe_answers(std::uint64_t now) {
  each_control_answer(*probe_, [&](std::string_view text) {
    const auto peer = parse_role_answer(text);
    if (peer && peer->id != 0) {
      takeover_->on_answer(*peer, now);
      return;
    }
    // It lives, but says no role: a key it refuses, a build without pairs,
    // or one started without --standby-of (id 0). Not silence: no takeover.
    takeover_->on_heard(now);
    if (now >= next_peer_warning_us_) {
      next_peer_warning_us_ = now + 10'000'000;
      log_.write(LogLevel::kWarn, "the standby peer " + standby_->peer +
                                      " answers the role probe with " +
                                      std::string(text.substr(0, 200)) +
                                      (peer ? " (it was started without --standby-of)" : "") +
                                      "; both may serve at once until this is fixed");
    }
  });
}

// The probe speaks the pair's key as --curve-secret holds it now; with
// `alternate`, when that is the key it already speaks, the one before it
// (the peer silent: a key staged in this allocator's file, not yet in the
// peer's, must not leave the two unable to hear each other).
void Server::rekey_probe(bool alternate) {
  Result<curve::KeyPair> read = curve::load_key_file(auth_.secret_file, true);
  if (!read) return;
  curve::KeyPair own = std::move(read).value();
  if (own.secret_key == probe_key_.secret_key) {
    if (!alternate || probe_prev_key_.secret_key.empty()) return;
    own = probe_prev_key_;
  }
  // On failure the key in use stays recorded, and the probe's silence
  // brings the next try.
  if (curve::reconnect(probe_->handle(), {own.public_key, own, {}}, standby_->peer) != 0) return;
  probe_prev_key_ = probe_key_;
  probe_key_ = own;
}

void Server::read_witness_answers(std::uint64_t now) {
  each_control_answer(*witness_, [&](std::string_view text) {
    if (const auto a = wire::parse_claim_answer(text)) {
      takeover_->on_claim_answer(*a, now);
      return;
    }
    // A refusal of another kind (a key it does not list, a rate limit):
    // no lease, said every 10 s.
    if (now >= next_witness_warning_us_) {
      next_witness_warning_us_ = now + 10'000'000;
      log_.write(LogLevel::kWarn, "the witness " + standby_->witness + " answers a claim with " +
                                      std::string(text.substr(0, 200)));
    }
  });
}

// A claim (a standby whose peer is silent) or a renewal (the active), its
// nonce the time it went out: the lease counts from then.
void Server::claim(std::uint64_t now) {
  if (!takeover_->wants_claim(now)) return;
  const wire::ClaimRequest c{takeover_->id(), takeover_->term(), standby_->takeover_us / 1000, now};
  try {
    if (witness_->send(zmq::buffer(std::string_view(kControlTag)),
                       zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      (void)witness_->send(zmq::buffer(wire::claim_request(c)), zmq::send_flags::dontwait);
    }
  } catch (const zmq::error_t&) {
    // Not connected: no lease this time.
  }
}

// Each turn of a pair: the peer's (and the witness's) answers, a probe (and
// a claim) when due, and the rule.
void Server::standby_turn(std::uint64_t now) {
  read_probe_answers(now);
  if (witness_) read_witness_answers(now);
  if (now >= next_probe_us_) {
    if (witness_) claim(now);
    next_probe_us_ = now + standby_->probe_us;
    // Unanswered for a probe period: the peer may have rotated the pair's
    // key before this allocator's reload. The file says (a key installed
    // on both before either reloads), so the pair keeps hearing itself.
    // Each key is given two probes (a reconnection and its handshake)
    // before the other is tried.
    if (zap_ && now - takeover_->peer_heard_us() > standby_->probe_us &&
        now - last_rekey_check_us_ > 2 * standby_->probe_us) {
      last_rekey_check_us_ = now;
      rekey_probe(/*alternate=*/true);
    }
    try {
      if (probe_->send(zmq::buffer(std::string_view(kControlTag)),
                       zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        (void)probe_->send(zmq::buffer(std::string_view("role")), zmq::send_flags::dontwait);
      }
      takeover_->on_probe_sent(now);  // sent or not (no connection): the silence counts
    } catch (const zmq::error_t&) {
      // Not connected: the silence counts.
    }
  }
  const PairRole was = role();
  const PairRole now_role = takeover_->decide(now);
  if (now_role == was) return;
  const std::string term = std::to_string(takeover_->term());
  if (now_role == PairRole::kActive) {
    allocator_.activate(standby_->new_epoch());
    const char* why = takeover_->why() == Takeover::Why::kTieBreak
                          ? "both stood by; this one has the lower id"
                      : witness_ ? "the peer did not answer; the witness granted the lease"
                                 : "the peer did not answer";
    log_.write(LogLevel::kWarn, "taking over from " + standby_->peer + " (" + why + ") as term " +
                                    term + ", epoch " + std::to_string(allocator_.epoch()));
    return;
  }
  if (takeover_->why() == Takeover::Why::kIsolated ||
      takeover_->why() == Takeover::Why::kWitnessRefused) {
    const bool isolated = takeover_->why() == Takeover::Why::kIsolated;
    allocator_.stand_by(std::string("this allocator stood down: ") +
                            (isolated ? "it hears neither its peer nor the witness"
                                      : "the witness holds a newer lease"),
                        now);
    log_.write(
        LogLevel::kWarn,
        std::string("standing down (term ") + term + "): " +
            (isolated ? "neither " + standby_->peer + " nor the witness " + standby_->witness +
                            " answered within half the takeover time"
                      : "the witness " + standby_->witness + " granted the lease to a newer term"));
    return;
  }
  const PeerView& p = *takeover_->peer();
  allocator_.stand_by("this allocator stood down; " + standby_->peer + " is active", now);
  log_.write(LogLevel::kWarn, "standing down: " + standby_->peer + " is active as term " +
                                  std::to_string(p.term) + " (this one: " + term + ")");
}

HaInfo Server::ha_info(std::uint64_t now) const {
  if (!takeover_) return {};
  HaInfo h;
  h.peer = standby_->peer;
  h.term = takeover_->term();
  if (takeover_->peer()) {
    h.peer_role = to_string(takeover_->peer()->role);
    h.peer_heard_s_ago =
        static_cast<double>(now - std::min(now, takeover_->peer_heard_us())) * 1e-6;
  }
  if (witness_) {
    h.witness = standby_->witness;
    if (takeover_->witness_heard_us() > 0) {
      h.witness_heard_s_ago =
          static_cast<double>(now - std::min(now, takeover_->witness_heard_us())) * 1e-6;
    }
    const std::uint64_t until = takeover_->lease_until_us();
    h.lease_left_s = static_cast<double>(until > now ? until - now : 0) * 1e-6;
  }
  return h;
}

}  // namespace flowtune::daemon
