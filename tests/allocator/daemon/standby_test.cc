// The hot standby pair's rule (standby.h), fed probe answers by hand: who
// takes over, when, and who stands down when both are active.
#include "flowtune/daemon/standby.h"

#include <gtest/gtest.h>

#include <functional>
#include <optional>

namespace flowtune::daemon {
namespace {

constexpr std::uint64_t kTakeoverUs = 500'000;

PeerView peer(PairRole role, std::uint64_t term, std::uint64_t id) { return {role, term, id}; }

// A probe every 100 ms from `from` to `to`, each answered with `answer`
// (none: the peer is silent); returns the role after the last.
PairRole probe(Takeover& t, std::uint64_t from, std::uint64_t to, std::optional<PeerView> answer) {
  PairRole r = t.role();
  for (std::uint64_t now = from; now <= to; now += 100'000) {
    t.on_probe_sent(now);
    if (answer) t.on_answer(*answer, now + 1);
    r = t.decide(now + 1);
  }
  return r;
}

TEST(Takeover, AStandbyWhosePeerNeverAnswersTakesOverAfterTheTakeoverTime) {
  Takeover t(kTakeoverUs, 7, 0);
  // Probes every 100 ms, none answered: the first was sent at 0.
  EXPECT_EQ(probe(t, 0, kTakeoverUs - 100'000, std::nullopt), PairRole::kStandby);
  EXPECT_EQ(t.decide(kTakeoverUs - 1), PairRole::kStandby);
  EXPECT_EQ(t.decide(kTakeoverUs), PairRole::kActive);
  EXPECT_EQ(t.term(), 1u);
  EXPECT_EQ(t.why(), Takeover::Why::kPeerSilent);
}

TEST(Takeover, AStandbyThatHearsAnActivePeerStaysInStandbyForever) {
  Takeover t(kTakeoverUs, 1, 0);  // the lower id: no tie-break helps it
  EXPECT_EQ(probe(t, 0, 20 * kTakeoverUs, peer(PairRole::kActive, 3, 9)), PairRole::kStandby);
}

TEST(Takeover, WhenTheActivePeerFallsSilentTheStandbyTakesOverWithAHigherTerm) {
  Takeover t(kTakeoverUs, 5, 0);
  ASSERT_EQ(probe(t, 0, 300'000, peer(PairRole::kActive, 3, 9)), PairRole::kStandby);
  // Then silence: probes go unanswered.
  EXPECT_EQ(probe(t, 400'000, 400'000 + kTakeoverUs - 200'000, std::nullopt), PairRole::kStandby);
  EXPECT_EQ(probe(t, 400'000 + kTakeoverUs - 100'000, 400'000 + kTakeoverUs + 100'000, std::nullopt),
            PairRole::kActive);
  EXPECT_EQ(t.term(), 4u);  // above every term seen
}

// A standby that was itself stopped (SIGSTOP, a paused VM) for longer than
// the takeover time must not take its own pause for its peer's silence.
TEST(Takeover, AStandbyThatStalledDoesNotTakeOverOnWaking) {
  Takeover t(kTakeoverUs, 5, 0);
  ASSERT_EQ(probe(t, 0, 300'000, peer(PairRole::kActive, 3, 9)), PairRole::kStandby);
  t.on_probe_sent(400'000);  // sent, then the process stopped for 1.5 s
  EXPECT_EQ(t.decide(1'900'000), PairRole::kStandby);
  t.on_answer(peer(PairRole::kActive, 3, 9), 1'900'100);  // the answer waiting for it
  EXPECT_EQ(probe(t, 2'000'000, 4'000'000, peer(PairRole::kActive, 3, 9)), PairRole::kStandby);
}

TEST(Takeover, TwoStandbysThatHearEachOtherLeaveItToTheLowerId) {
  Takeover low(kTakeoverUs, 3, 0), high(kTakeoverUs, 8, 0);
  low.on_probe_sent(10);
  low.on_answer(peer(PairRole::kStandby, 0, 8), 11);
  EXPECT_EQ(low.decide(12), PairRole::kStandby);  // one answer may predate the peer's takeover
  low.on_probe_sent(100'010);
  low.on_answer(peer(PairRole::kStandby, 0, 8), 100'011);
  EXPECT_EQ(low.decide(100'012), PairRole::kActive);
  EXPECT_EQ(low.why(), Takeover::Why::kTieBreak);
  EXPECT_EQ(probe(high, 0, 100'000, peer(PairRole::kStandby, 0, 3)), PairRole::kStandby);
  EXPECT_EQ(probe(high, 200'000, 5 * kTakeoverUs, peer(PairRole::kActive, low.term(), 3)), PairRole::kStandby);
}

TEST(Takeover, OfTwoActivesTheOlderTermStandsDown) {
  Takeover old_primary(kTakeoverUs, 1, 0);
  ASSERT_EQ(probe(old_primary, 0, kTakeoverUs, std::nullopt), PairRole::kActive);  // term 1
  // It hung; the standby took over as term 2 and now answers again.
  old_primary.on_answer(peer(PairRole::kActive, 2, 9), 5 * kTakeoverUs);
  EXPECT_EQ(old_primary.decide(5 * kTakeoverUs), PairRole::kStandby);
  EXPECT_EQ(old_primary.why(), Takeover::Why::kPeerNewer);
  // The newer one hears the old one active with term 1: it stays.
  Takeover newer(kTakeoverUs, 9, 0);
  newer.on_answer(peer(PairRole::kActive, 1, 1), 0);
  ASSERT_EQ(probe(newer, 100'000, 100'000 + kTakeoverUs, std::nullopt), PairRole::kActive);  // term 2
  EXPECT_EQ(newer.term(), 2u);
  newer.on_answer(peer(PairRole::kActive, 1, 1), 5 * kTakeoverUs);
  EXPECT_EQ(newer.decide(5 * kTakeoverUs), PairRole::kActive);
}

TEST(Takeover, EqualTermsKeepTheLowerId) {
  Takeover a(kTakeoverUs, 2, 0), b(kTakeoverUs, 4, 0);
  ASSERT_EQ(probe(a, 0, kTakeoverUs, std::nullopt), PairRole::kActive);  // each alone: both term 1
  ASSERT_EQ(probe(b, 0, kTakeoverUs, std::nullopt), PairRole::kActive);
  a.on_answer(peer(PairRole::kActive, 1, 4), 2 * kTakeoverUs);
  b.on_answer(peer(PairRole::kActive, 1, 2), 2 * kTakeoverUs);
  EXPECT_EQ(a.decide(2 * kTakeoverUs), PairRole::kActive);
  EXPECT_EQ(b.decide(2 * kTakeoverUs), PairRole::kStandby);
}

TEST(Takeover, AnErrorAnswerIsLifeNotSilenceAndAnOldAnswerDoesNotCount) {
  Takeover t(kTakeoverUs, 9, 0);
  // The peer answers, but with errors (a key it refuses, a rate limit).
  for (std::uint64_t now = 0; now <= 3 * kTakeoverUs; now += 100'000) {
    t.on_probe_sent(now);
    t.on_heard(now + 1);
    EXPECT_EQ(t.decide(now + 1), PairRole::kStandby);
  }
  Takeover u(kTakeoverUs, 9, 0);
  u.on_answer(peer(PairRole::kActive, 1, 1), 0);
  ASSERT_EQ(probe(u, 100'000, 100'000 + kTakeoverUs, std::nullopt), PairRole::kActive);
  // The old active's last answer is stale: it must not make us stand down.
  EXPECT_EQ(probe(u, 200'000 + kTakeoverUs, 200'000 + 3 * kTakeoverUs, std::nullopt), PairRole::kActive);
}

// ---- with a witness (standby.h: a majority of the three decides) ----

wire::ClaimAnswer granted(std::uint64_t id, std::uint64_t term, std::uint64_t nonce) {
  return {true, id, term, kTakeoverUs / 1000, nonce};
}
wire::ClaimAnswer refused(std::uint64_t holder, std::uint64_t term, std::uint64_t nonce) {
  return {false, holder, term, 100, nonce};
}

// A standby alone with a silent peer (and its witness answering with `a`,
// or not at all), probing and claiming every 100 ms from `from` to `to`.
PairRole alone(Takeover& t, std::uint64_t from, std::uint64_t to,
               const std::function<std::optional<wire::ClaimAnswer>(std::uint64_t)>& a) {
  PairRole r = t.role();
  for (std::uint64_t now = from; now <= to; now += 100'000) {
    t.on_probe_sent(now);
    if (t.wants_claim(now)) {
      if (auto ans = a(now)) t.on_claim_answer(*ans, now + 2);
    }
    r = t.decide(now + 3);
  }
  return r;
}

TEST(TakeoverWithWitness, ASilentPeerIsTakenOverOnlyOnceTheWitnessGrantsTheLease) {
  Takeover t(kTakeoverUs, 7, 0, /*witness=*/true);
  EXPECT_FALSE(t.wants_claim(0));  // a standby that hears no silence yet does not claim
  // The witness refuses (the active peer still holds the lease): no takeover, however long.
  EXPECT_EQ(alone(t, 0, 10 * kTakeoverUs, [](std::uint64_t now) { return refused(3, 4, now); }), PairRole::kStandby);
  // Nor while the witness is silent.
  EXPECT_EQ(alone(t, 11 * kTakeoverUs, 20 * kTakeoverUs, [](std::uint64_t) { return std::nullopt; }),
            PairRole::kStandby);
  // Granted: active, with a term above the holder's it was refused for.
  EXPECT_EQ(alone(t, 20 * kTakeoverUs + 100'000, 20 * kTakeoverUs + 100'000,
                  [](std::uint64_t now) { return granted(7, 0, now); }),
            PairRole::kActive);
  EXPECT_EQ(t.why(), Takeover::Why::kPeerSilent);
  EXPECT_EQ(t.term(), 5u);
}

TEST(TakeoverWithWitness, AnActiveThatHearsNeitherItsPeerNorTheWitnessStandsDownBeforeItsLeaseEnds) {
  Takeover t(kTakeoverUs, 7, 0, true);
  ASSERT_EQ(alone(t, 0, kTakeoverUs, [](std::uint64_t now) { return granted(7, 0, now); }), PairRole::kActive);
  // Renewed every probe: it stays.
  ASSERT_EQ(alone(t, kTakeoverUs + 100'000, 10 * kTakeoverUs, [](std::uint64_t now) { return granted(7, 1, now); }),
            PairRole::kActive);
  const std::uint64_t last = 10 * kTakeoverUs;  // the last granted claim went out then
  EXPECT_EQ(t.lease_until_us(), last + kTakeoverUs / 2);
  // Then the witness falls silent too: it stands down when half the
  // takeover time has passed since its last granted claim went out, before
  // the witness (which holds the lease the whole takeover time from when it
  // read the claim) would grant it to the other side.
  t.on_probe_sent(last + 100'000);
  EXPECT_EQ(t.decide(last + kTakeoverUs / 2 - 1), PairRole::kActive);
  EXPECT_EQ(t.decide(last + kTakeoverUs / 2), PairRole::kStandby);
  EXPECT_EQ(t.why(), Takeover::Why::kIsolated);
}

TEST(TakeoverWithWitness, AnActiveWhosePeerDefersNeedsNoWitness) {
  // Started together, the lower id takes over by the tie-break (the two are
  // a majority) and keeps serving while its peer answers "standby", the
  // witness never answering.
  Takeover low(kTakeoverUs, 3, 0, true);
  for (std::uint64_t now = 0; now <= 20 * kTakeoverUs; now += 100'000) {
    low.on_probe_sent(now);
    low.on_answer(peer(PairRole::kStandby, 0, 8), now + 1);
    EXPECT_TRUE(low.wants_claim(now) == (low.role() == PairRole::kActive));
    low.decide(now + 2);
  }
  EXPECT_EQ(low.role(), PairRole::kActive);
  EXPECT_EQ(low.why(), Takeover::Why::kTieBreak);
  // The peer falls silent too: past half the takeover time, it stands down.
  const std::uint64_t heard = 20 * kTakeoverUs + 1;
  low.on_probe_sent(heard + 100'000);
  EXPECT_EQ(low.decide(heard + kTakeoverUs / 2 - 1), PairRole::kActive);
  EXPECT_EQ(low.decide(heard + kTakeoverUs / 2), PairRole::kStandby);
  EXPECT_EQ(low.why(), Takeover::Why::kIsolated);
}

TEST(TakeoverWithWitness, ARefusalNamingANewerTermMakesTheActiveStandDownAnOlderOneDoesNot) {
  Takeover t(kTakeoverUs, 7, 0, true);
  ASSERT_EQ(alone(t, 0, kTakeoverUs, [](std::uint64_t now) { return granted(7, 0, now); }), PairRole::kActive);
  ASSERT_EQ(t.term(), 1u);
  // The witness still holds a lease for an older term (an old holder that
  // claimed once more before it heard of this takeover): this one keeps
  // serving while its peer defers to it.
  t.on_probe_sent(2 * kTakeoverUs);
  t.on_answer(peer(PairRole::kStandby, 0, 9), 2 * kTakeoverUs + 1);
  t.on_claim_answer(refused(9, 0, 2 * kTakeoverUs), 2 * kTakeoverUs + 2);
  EXPECT_EQ(t.decide(2 * kTakeoverUs + 3), PairRole::kActive);
  // A newer term holds it: stand down at once.
  t.on_claim_answer(refused(9, 2, 2 * kTakeoverUs + 10), 2 * kTakeoverUs + 11);
  EXPECT_EQ(t.decide(2 * kTakeoverUs + 12), PairRole::kStandby);
  EXPECT_EQ(t.why(), Takeover::Why::kWitnessRefused);
}

TEST(TakeoverWithWitness, WithoutAWitnessNothingChanges) {
  Takeover t(kTakeoverUs, 7, 0);
  EXPECT_FALSE(t.wants_claim(10 * kTakeoverUs));
  EXPECT_EQ(alone(t, 0, kTakeoverUs, [](std::uint64_t) { return std::nullopt; }), PairRole::kActive);
  EXPECT_EQ(alone(t, kTakeoverUs, 10 * kTakeoverUs, [](std::uint64_t) { return std::nullopt; }), PairRole::kActive);
}

TEST(RoleAnswer, RoundTripsAndRefusesWhatIsNotOne) {
  const auto p = parse_role_answer(role_answer(PairRole::kActive, 12, 99));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->role, PairRole::kActive);
  EXPECT_EQ(p->term, 12u);
  EXPECT_EQ(p->id, 99u);
  for (const char* bad : {"", "{", "[]", R"({"role":"active","term":1})", R"({"role":"boss","term":1,"id":2})",
                          R"({"role":"active","term":-1,"id":2})", R"({"role":1,"term":1,"id":2})"}) {
    EXPECT_FALSE(parse_role_answer(bad)) << bad;
  }
}

}  // namespace
}  // namespace flowtune::daemon
