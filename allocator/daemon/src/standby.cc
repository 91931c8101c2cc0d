#include "flowtune/daemon/standby.h"

#include <algorithm>

namespace flowtune::daemon {

Takeover::Takeover(std::uint64_t takeover_us, std::uint64_t id, std::uint64_t now_us, bool witness)
    : takeover_us_(takeover_us), id_(id), last_decide_us_(now_us), witness_(witness) {}

bool Takeover::wants_claim(std::uint64_t now_us) const {
  return witness_ && (role_ == PairRole::kActive || silent(now_us));
}

void Takeover::on_claim_answer(const wire::ClaimAnswer& a, std::uint64_t now_us) {
  witness_heard_us_ = std::max(witness_heard_us_, now_us);
  seen_term_ = std::max(seen_term_, a.term);
  if (a.granted && a.holder == id_) {
    // The lease runs from when the claim went out (its nonce), not from
    // when the answer came: the witness's runs from a later instant.
    if (a.nonce <= now_us) lease_until_us_ = std::max(lease_until_us_, a.nonce + takeover_us_ / 2);
    refused_by_newer_ = false;
    return;
  }
  if (!a.granted) {
    lease_until_us_ = 0;
    refused_by_newer_ = a.term > term_ || (a.term == term_ && a.holder < id_);
  }
}

void Takeover::on_answer(const PeerView& peer, std::uint64_t now_us) {
  standby_answers_ = peer.role == PairRole::kStandby ? standby_answers_ + 1 : 0;
  peer_ = peer;
  on_heard(now_us);
  seen_term_ = std::max(seen_term_, peer.term);
}

void Takeover::on_heard(std::uint64_t now_us) {
  heard_us_ = std::max(heard_us_, now_us);
  unanswered_ = false;
}

void Takeover::on_probe_sent(std::uint64_t now_us) {
  if (!unanswered_) unanswered_since_us_ = now_us;
  unanswered_ = true;
}

PairRole Takeover::decide(std::uint64_t now_us) {
  // Our own stall (a stopped process, a paused machine) is not the peer's
  // silence: its clock starts again with the next probe.
  if (now_us > last_decide_us_ + takeover_us_ / 2 && unanswered_) unanswered_since_us_ = now_us;
  last_decide_us_ = now_us;
  const bool quiet = silent(now_us);
  const bool hears = peer_.has_value() && !quiet;
  const bool leased = lease_until_us_ > now_us;
  if (role_ == PairRole::kStandby) {
    if (quiet) {
      if (witness_ && !leased) return role_;  // claiming: no grant yet
      why_ = Why::kPeerSilent;
    } else if (hears && peer_->role == PairRole::kStandby && standby_answers_ >= 2 && id_ < peer_->id) {
      why_ = Why::kTieBreak;
    } else {
      return role_;
    }
    role_ = PairRole::kActive;
    term_ = std::max(term_, seen_term_) + 1;
    refused_by_newer_ = false;
    return role_;
  }
  // The peer's "standby" within half the takeover time: the two of them
  // are a majority without the witness.
  const bool peer_defers = peer_.has_value() && peer_->role == PairRole::kStandby &&
                           heard_us_ + takeover_us_ / 2 > now_us;
  if (hears && peer_->role == PairRole::kActive &&
      (peer_->term > term_ || (peer_->term == term_ && peer_->id < id_))) {
    why_ = Why::kPeerNewer;
  } else if (witness_ && refused_by_newer_) {
    why_ = Why::kWitnessRefused;
  } else if (witness_ && !leased && !peer_defers) {
    why_ = Why::kIsolated;
  } else {
    return role_;
  }
  role_ = PairRole::kStandby;
  lease_until_us_ = 0;
  refused_by_newer_ = false;
  return role_;
}

}  // namespace flowtune::daemon
