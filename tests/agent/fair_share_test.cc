// FairShare (agent/src/fair_share.h): the host's event budget split among
// the agent's processes, driven with times of the test's own.
#include "fair_share.h"

#include <gtest/gtest.h>

namespace flowtune::agent {
namespace {

constexpr std::uint64_t kSec = 1'000'000;

TEST(FairShare, ANewProcessHasABurstThenWaitsForItsShare) {
  FairShare fair(10'000);  // one process: all of it, a burst of 1,000
  FairShare::Bucket b;
  std::uint64_t now = 5 * kSec;
  EXPECT_TRUE(fair.may_read(b, now));
  fair.spend(b, 1'000, now);
  EXPECT_FALSE(fair.may_read(b, now));
  // One event more needs 1/10,000 s.
  EXPECT_NEAR(static_cast<double>(fair.wait_us(b)), 101, 1);
  now += fair.wait_us(b);
  EXPECT_TRUE(fair.may_read(b, now));
  // A long pause refills the burst, not more.
  fair.spend(b, 1, now);
  now += 10 * kSec;
  EXPECT_TRUE(fair.may_read(b, now));
  fair.spend(b, 1'000, now);
  EXPECT_FALSE(fair.may_read(b, now));
}

TEST(FairShare, ProcessesSharingTheBudgetRefillAtTheirShare) {
  FairShare fair(10'000);
  fair.set_active(4);
  EXPECT_DOUBLE_EQ(fair.share_per_sec(), 2'500);
  FairShare::Bucket b;
  const std::uint64_t now = kSec;
  ASSERT_TRUE(fair.may_read(b, now));
  fair.spend(b, 250, now);  // its burst: 100 ms of 2,500/s
  EXPECT_FALSE(fair.may_read(b, now));
  EXPECT_NEAR(static_cast<double>(fair.wait_us(b)), 401, 1);  // one event at 2,500/s
  // A packet read whole leaves a debt, paid back at the share.
  fair.spend(b, 500, now);
  EXPECT_FALSE(fair.may_read(b, now + 200'000));
  EXPECT_TRUE(fair.may_read(b, now + 200'500));
}

TEST(FairShare, ATinyShareStillLetsABurstOfSixtyFourThrough) {
  FairShare fair(100);
  fair.set_active(10);  // 10 events/s each: 1 in 100 ms
  FairShare::Bucket b;
  ASSERT_TRUE(fair.may_read(b, kSec));
  fair.spend(b, 63, kSec);
  EXPECT_TRUE(fair.may_read(b, kSec));
  fair.spend(b, 1, kSec);
  EXPECT_FALSE(fair.may_read(b, kSec));
}

TEST(FairShare, ActiveMeansSpentWithinASecond) {
  FairShare fair(1'000);
  FairShare::Bucket b;
  EXPECT_FALSE(fair.active(b, kSec));  // never spent
  fair.spend(b, 1, kSec);
  EXPECT_TRUE(fair.active(b, kSec + FairShare::kActiveUs - 1));
  EXPECT_FALSE(fair.active(b, kSec + FairShare::kActiveUs));
  fair.spend(b, 0, 3 * kSec);  // costs nothing: not a spend
  EXPECT_FALSE(fair.active(b, 3 * kSec));
}

TEST(FairShare, ZeroMeansUnlimited) {
  FairShare fair(0);
  FairShare::Bucket b;
  fair.spend(b, 1e9, kSec);
  EXPECT_TRUE(fair.may_read(b, kSec));
  EXPECT_EQ(fair.wait_us(b), 0u);
}

}  // namespace
}  // namespace flowtune::agent
