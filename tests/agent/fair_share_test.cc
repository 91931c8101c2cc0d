// FairShare (agent/src/fair_share.h): the host's event budget split among
// the agent's processes, driven with times of the test's own.
#include "fair_share.h"

#include <gtest/gtest.h>

namespace flowtune::agent {
namespace {

constexpr std::uint64_t kSec = 1'000'000;

TEST(FairShare, AProcessAloneHasABurstThenTheBudget) {
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
  EXPECT_EQ(fair.wait_us(b), 0u);
  // A long pause refills the burst, not more.
  fair.spend(b, 1, now);
  now += 10 * kSec;
  EXPECT_TRUE(fair.may_read(b, now));
  fair.spend(b, 1'000, now);
  EXPECT_FALSE(fair.may_read(b, now));
}

TEST(FairShare, ABurstBorrowsWhatTheHostLeavesUnused) {
  FairShare fair(10'000);  // host bucket 1,000
  fair.set_active(4);      // shares of 2,500/s, buckets of 250
  EXPECT_DOUBLE_EQ(fair.share_per_sec(), 2'500);
  FairShare::Bucket b;
  const std::uint64_t now = kSec;
  ASSERT_TRUE(fair.may_read(b, now));
  fair.spend(b, 250, now);             // its own bucket is empty ...
  EXPECT_TRUE(fair.may_read(b, now));  // ... the host's is 3/4 full
  fair.spend(b, 250, now);             // the host's is half full now: no more borrowing
  EXPECT_FALSE(fair.may_read(b, now));
  // The host's bucket is back past half first (one event at 10,000/s); its
  // own debt of 250 would take 100 ms at its share.
  EXPECT_NEAR(static_cast<double>(fair.wait_us(b)), 101, 1);
}

TEST(FairShare, ACalmProcessIsReadWhileAFlooderDrainsTheHost) {
  FairShare fair(10'000);
  fair.set_active(2);
  FairShare::Bucket flood, calm;
  std::uint64_t now = kSec;
  // The flooder reads a packet of 512 records whenever it may, for 1 s.
  double flooded = 0;
  for (; now < 2 * kSec; now += 100) {
    if (fair.may_read(flood, now)) {
      fair.spend(flood, 512, now);
      flooded += 512;
    }
  }
  // It got about the host's budget (its own share, what it borrowed, the
  // first bursts), not more.
  EXPECT_LT(flooded, 10'000 + 500 + 1'000 + 2 * 512);
  EXPECT_GT(flooded, 5'000);
  // The host's bucket is drained; the calm process's own is full.
  EXPECT_TRUE(fair.may_read(calm, now));
  fair.spend(calm, 1, now);
  EXPECT_TRUE(fair.may_read(calm, now));
}

TEST(FairShare, ATinyShareStillHasABurstOfSixtyFour) {
  FairShare fair(100);  // host bucket: 64 (the floor)
  fair.set_active(10);  // 10 events/s each
  FairShare::Bucket b;
  ASSERT_TRUE(fair.may_read(b, kSec));
  fair.spend(b, 63, kSec);
  EXPECT_TRUE(fair.may_read(b, kSec));
  fair.spend(b, 1, kSec);
  EXPECT_FALSE(fair.may_read(b, kSec));  // own empty, host at 0 of 64
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
