// TokenBucket (flowtune/common/token_bucket.h): time is injected, so every
// count is exact; the oracle is the bucket's definition worked by hand.
#include "flowtune/common/token_bucket.h"

#include <gtest/gtest.h>

namespace flowtune {
namespace {

int drain(TokenBucket& b, std::uint64_t now_us) {
  int n = 0;
  while (b.take(now_us)) ++n;
  return n;
}

TEST(TokenBucket, StartsFullWithATenthOfASecondsWorth) {
  TokenBucket b(1000, 5);
  EXPECT_EQ(drain(b, 5), 100);
  EXPECT_FALSE(b.take(5));
}

TEST(TokenBucket, RefillsAtItsRateUpToTheBurst) {
  TokenBucket b(1000, 0);
  drain(b, 0);
  // 1 ms at 1000/s is one token; 10.5 ms is ten (half a token stays).
  EXPECT_EQ(drain(b, 1'000), 1);
  EXPECT_EQ(drain(b, 11'500), 10);
  EXPECT_EQ(drain(b, 12'100), 1);  // the half left plus 0.6
  // A long silence refills only up to the burst.
  EXPECT_EQ(drain(b, 60'000'000), 100);
}

TEST(TokenBucket, TimeRunningBackwardsRefillsNothing) {
  TokenBucket b(1000, 1'000'000);
  drain(b, 1'000'000);
  EXPECT_FALSE(b.take(0));
  EXPECT_FALSE(b.take(999'999));
  // Nor does it move the clock back: 1 ms after the latest time is one token.
  EXPECT_EQ(drain(b, 1'001'000), 1);
}

TEST(TokenBucket, BurstIsAtLeastOneAndZeroRateIsUnlimited) {
  TokenBucket slow(2, 0);  // a tenth of a second's worth is 0.2: burst 1
  EXPECT_EQ(slow.burst(), 1.0);
  EXPECT_EQ(drain(slow, 0), 1);
  EXPECT_EQ(drain(slow, 250'000), 0);  // half a token
  EXPECT_EQ(drain(slow, 500'000), 1);
  TokenBucket unlimited(0, 0);
  for (int i = 0; i < 100000; ++i) ASSERT_TRUE(unlimited.take(0));
}

// has_token says what take would find, and changes nothing: in debt, no
// token until the debt is refilled.
TEST(TokenBucket, HasTokenSaysWhatTakeWouldFind) {
  TokenBucket b(1000, 0);  // 100 tokens of burst
  EXPECT_TRUE(b.has_token(0));
  ASSERT_TRUE(b.take(0, 150));  // 50 in debt
  EXPECT_FALSE(b.has_token(0));
  EXPECT_FALSE(b.has_token(50'000));  // refilled to 0
  EXPECT_TRUE(b.has_token(51'000));   // and one more
  EXPECT_FALSE(b.take(50'000));       // has_token moved nothing
  EXPECT_TRUE(b.take(52'000));
  EXPECT_TRUE(TokenBucket(0, 0).has_token(0));
}

}  // namespace
}  // namespace flowtune
