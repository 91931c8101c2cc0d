#include "flowtune/daemon/standby.h"

#include <algorithm>

namespace flowtune::daemon {

Takeover::Takeover(std::uint64_t takeover_us, std::uint64_t id, std::uint64_t now_us)
    : takeover_us_(takeover_us), id_(id), last_decide_us_(now_us) {}

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
  const bool silent = unanswered_ && now_us >= unanswered_since_us_ + takeover_us_;
  const bool hears = peer_.has_value() && !silent;
  if (role_ == PairRole::kStandby) {
    if (silent) {
      why_ = Why::kPeerSilent;
    } else if (hears && peer_->role == PairRole::kStandby && standby_answers_ >= 2 && id_ < peer_->id) {
      why_ = Why::kTieBreak;
    } else {
      return role_;
    }
    role_ = PairRole::kActive;
    term_ = std::max(term_, seen_term_) + 1;
    return role_;
  }
  if (hears && peer_->role == PairRole::kActive &&
      (peer_->term > term_ || (peer_->term == term_ && peer_->id < id_))) {
    role_ = PairRole::kStandby;
    why_ = Why::kPeerNewer;
  }
  return role_;
}

}  // namespace flowtune::daemon
