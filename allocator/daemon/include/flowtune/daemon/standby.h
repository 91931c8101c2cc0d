// A hot standby pair: two allocators, each started with --standby-of the
// other, of which one is active (serves endpoints) and the other stands by
// (answers every endpoint with a `standby` error, so endpoints that list
// both move on to the active one). Each probes its peer with a flowtune-ctl
// `role` request every probe interval; the answer names the peer's role,
// its term and its id.
//
// Takeover holds the rule, as a pure state machine (no sockets, no clock):
//   - Everyone starts in standby with term 0. A standby whose peer has not
//     answered for the takeover time (dead, hung, or not started) becomes
//     active with a term above every term it has seen. Silence is counted
//     from the first probe sent since the last answer, and restarted when
//     this process itself stalled (turns further apart than half the
//     takeover time): a standby that was stopped does not mistake its own
//     pause for its peer's.
//   - Two standbys that hear each other (both started together): the lower
//     id becomes active once it has heard "standby" twice in a row (one
//     answer may predate the peer's own takeover); the other then hears it
//     active and stays.
//   - Two actives that hear each other (a partition healed, a hung primary
//     woke up): the higher term stays and the other stands down; equal
//     terms keep the lower id. The higher term is the one that took over
//     last, so the endpoints already moved to it stay where they are.
//   - A standby that hears an active peer stays in standby, however long.
// An old primary that comes back (restarted after kill -9, or unfrozen)
// therefore meets an active peer with a higher term and stands by: the brain
// does not split. Without a witness, while the two cannot hear each other
// both may be active (two allocators cannot tell a dead peer from a
// partition without a third voice); endpoints then follow whichever answers
// them, and the rule above ends it as soon as the path between the two
// heals.
//
// With a witness (flowtune-witness, wire/witness.h), a majority of the
// three decides:
//   - A standby whose peer is silent claims the pair's lease from the
//     witness every probe, and takes over only once a claim is granted
//     (the witness grants it only after the active's lease ran out). The
//     tie-break of two standbys that hear each other needs no witness: the
//     two are a majority.
//   - The active renews its lease every probe. Its lease counts from when
//     it asked and lasts half the takeover time here (the witness holds it
//     the whole takeover time from when it read the claim), so it runs out
//     here first, by at least a probe's margin.
//   - An active that holds no lease and has not heard its peer answer
//     "standby" within half the takeover time stands down (isolated: the
//     other side may have the witness). One refused by the witness in
//     favour of a newer term stands down at once.
// So at most one side of a partition serves; with the witness down, the
// pair serves as long as its two allocators hear each other.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "flowtune/wire/role.h"
#include "flowtune/wire/witness.h"

namespace flowtune::daemon {

// The role answer's format lives with the wire (relays parse it too).
using wire::PairRole;
using wire::PeerView;
using wire::parse_role_answer;
using wire::role_answer;
using wire::to_string;

class Takeover {
 public:
  // id: this process's tie-break (random, fixed for its life).
  // Starts in standby at now_us; the peer's silence is counted from then.
  // witness: the pair has one (the rule above).
  Takeover(std::uint64_t takeover_us, std::uint64_t id, std::uint64_t now_us, bool witness = false);

  void on_answer(const PeerView& peer, std::uint64_t now_us);
  // The peer answered, but not with a role (an error: a key it does not
  // accept, a rate limit): it lives, its role is as last heard.
  void on_heard(std::uint64_t now_us);
  // A probe went out.
  void on_probe_sent(std::uint64_t now_us);
  // With a witness: whether to claim (or renew) the lease now; and the
  // witness's answer to a claim whose nonce was the time it was sent.
  bool wants_claim(std::uint64_t now_us) const;
  void on_claim_answer(const wire::ClaimAnswer& a, std::uint64_t now_us);
  // Applies the rule at now_us; returns the role then.
  PairRole decide(std::uint64_t now_us);

  enum class Why : std::uint8_t { kNone, kPeerSilent, kTieBreak, kPeerNewer, kIsolated, kWitnessRefused };
  // Why the last change of role happened.
  Why why() const { return why_; }
  PairRole role() const { return role_; }
  std::uint64_t term() const { return term_; }
  std::uint64_t id() const { return id_; }
  // When the peer last answered (0: never).
  std::uint64_t peer_heard_us() const { return heard_us_; }
  const std::optional<PeerView>& peer() const { return peer_; }
  bool has_witness() const { return witness_; }
  // Until when this allocator holds the witness's lease (0: never granted).
  std::uint64_t lease_until_us() const { return lease_until_us_; }
  // When the witness last answered a claim (0: never).
  std::uint64_t witness_heard_us() const { return witness_heard_us_; }

 private:
  // A probe has gone unanswered for the takeover time.
  bool silent(std::uint64_t now_us) const { return unanswered_ && now_us >= unanswered_since_us_ + takeover_us_; }

  std::uint64_t takeover_us_;
  std::uint64_t id_;
  bool unanswered_ = false;               // a probe has gone out since the last answer
  std::uint64_t unanswered_since_us_ = 0;  // the first of them
  std::uint64_t last_decide_us_;
  std::uint64_t heard_us_ = 0;
  int standby_answers_ = 0;  // "standby" answers in a row
  std::optional<PeerView> peer_;
  std::uint64_t seen_term_ = 0;  // the highest term heard from the peer
  PairRole role_ = PairRole::kStandby;
  std::uint64_t term_ = 0;
  Why why_ = Why::kNone;
  bool witness_ = false;
  std::uint64_t lease_until_us_ = 0;
  std::uint64_t witness_heard_us_ = 0;
  bool refused_by_newer_ = false;  // the witness named a newer holder
};

}  // namespace flowtune::daemon
