#include "flowtune/daemon/standby.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace flowtune::daemon {

const char* to_string(PairRole r) { return r == PairRole::kActive ? "active" : "standby"; }

std::string role_answer(PairRole role, std::uint64_t term, std::uint64_t id) {
  return nlohmann::json{{"role", to_string(role)}, {"term", term}, {"id", id}}.dump();
}

std::optional<PeerView> parse_role_answer(const std::string& json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto role = j.find("role");
  const auto term = j.find("term");
  const auto id = j.find("id");
  if (role == j.end() || term == j.end() || id == j.end() || !role->is_string() ||
      !term->is_number_unsigned() || !id->is_number_unsigned()) {
    return std::nullopt;
  }
  PeerView p;
  const std::string r = role->get<std::string>();
  if (r == "active") p.role = PairRole::kActive;
  else if (r == "standby") p.role = PairRole::kStandby;
  else return std::nullopt;
  p.term = term->get<std::uint64_t>();
  p.id = id->get<std::uint64_t>();
  return p;
}

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
