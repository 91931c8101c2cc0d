// The hot standby pair's rule (standby.h), fed probe answers by hand: who
// takes over, when, and who stands down when both are active.
#include "flowtune/daemon/standby.h"

#include <gtest/gtest.h>

namespace flowtune::daemon {
namespace {

constexpr std::uint64_t kTakeoverUs = 500'000;

PeerView peer(PairRole role, std::uint64_t term, std::uint64_t id) { return {role, term, id}; }

TEST(Takeover, AStandbyWhosePeerNeverAnswersTakesOverAfterTheTakeoverTime) {
  Takeover t(kTakeoverUs, 7, 1'000);
  EXPECT_EQ(t.decide(1'000 + kTakeoverUs - 1), PairRole::kStandby);
  EXPECT_EQ(t.decide(1'000 + kTakeoverUs), PairRole::kActive);
  EXPECT_EQ(t.term(), 1u);
  EXPECT_EQ(t.why(), Takeover::Why::kPeerSilent);
}

TEST(Takeover, AStandbyThatHearsAnActivePeerStaysInStandbyForever) {
  Takeover t(kTakeoverUs, 1, 0);  // the lower id: no tie-break helps it
  for (std::uint64_t now = 0; now < 20 * kTakeoverUs; now += 100'000) {
    t.on_answer(peer(PairRole::kActive, 3, 9), now);
    EXPECT_EQ(t.decide(now), PairRole::kStandby) << now;
  }
}

TEST(Takeover, WhenTheActivePeerFallsSilentTheStandbyTakesOverWithAHigherTerm) {
  Takeover t(kTakeoverUs, 5, 0);
  t.on_answer(peer(PairRole::kActive, 3, 9), 100'000);
  EXPECT_EQ(t.decide(100'000 + kTakeoverUs - 1), PairRole::kStandby);
  EXPECT_EQ(t.decide(100'000 + kTakeoverUs), PairRole::kActive);
  EXPECT_EQ(t.term(), 4u);  // above every term seen
}

TEST(Takeover, TwoStandbysThatHearEachOtherLeaveItToTheLowerId) {
  Takeover low(kTakeoverUs, 3, 0), high(kTakeoverUs, 8, 0);
  low.on_answer(peer(PairRole::kStandby, 0, 8), 10);
  high.on_answer(peer(PairRole::kStandby, 0, 3), 10);
  EXPECT_EQ(low.decide(20), PairRole::kActive);
  EXPECT_EQ(low.why(), Takeover::Why::kTieBreak);
  EXPECT_EQ(high.decide(20), PairRole::kStandby);
  high.on_answer(peer(PairRole::kActive, low.term(), 3), 30);
  EXPECT_EQ(high.decide(30 + kTakeoverUs - 1), PairRole::kStandby);
}

TEST(Takeover, OfTwoActivesTheOlderTermStandsDown) {
  Takeover old_primary(kTakeoverUs, 1, 0);
  ASSERT_EQ(old_primary.decide(kTakeoverUs), PairRole::kActive);  // term 1
  // It hung; the standby took over as term 2 and now answers again.
  old_primary.on_answer(peer(PairRole::kActive, 2, 9), 5 * kTakeoverUs);
  EXPECT_EQ(old_primary.decide(5 * kTakeoverUs), PairRole::kStandby);
  EXPECT_EQ(old_primary.why(), Takeover::Why::kPeerNewer);
  // The newer one hears the old one active with term 1: it stays.
  Takeover newer(kTakeoverUs, 9, 0);
  newer.on_answer(peer(PairRole::kActive, 1, 1), 0);
  ASSERT_EQ(newer.decide(2 * kTakeoverUs), PairRole::kActive);  // silent since: term 2
  newer.on_answer(peer(PairRole::kActive, 1, 1), 5 * kTakeoverUs);
  EXPECT_EQ(newer.decide(5 * kTakeoverUs), PairRole::kActive);
}

TEST(Takeover, EqualTermsKeepTheLowerId) {
  Takeover a(kTakeoverUs, 2, 0), b(kTakeoverUs, 4, 0);
  ASSERT_EQ(a.decide(kTakeoverUs), PairRole::kActive);  // each alone: both term 1
  ASSERT_EQ(b.decide(kTakeoverUs), PairRole::kActive);
  a.on_answer(peer(PairRole::kActive, 1, 4), 2 * kTakeoverUs);
  b.on_answer(peer(PairRole::kActive, 1, 2), 2 * kTakeoverUs);
  EXPECT_EQ(a.decide(2 * kTakeoverUs), PairRole::kActive);
  EXPECT_EQ(b.decide(2 * kTakeoverUs), PairRole::kStandby);
}

TEST(Takeover, AnOldAnswerDoesNotCountOnceThePeerIsSilent) {
  Takeover t(kTakeoverUs, 9, 0);
  t.on_answer(peer(PairRole::kActive, 1, 1), 0);
  ASSERT_EQ(t.decide(2 * kTakeoverUs), PairRole::kActive);
  // The old active's last answer is stale: it must not make us stand down.
  EXPECT_EQ(t.decide(3 * kTakeoverUs), PairRole::kActive);
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
