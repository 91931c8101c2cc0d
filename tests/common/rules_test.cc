// The rules the daemon and the simulator share (flowtune/common/rules.h),
// pinned against independent oracles: the update decision against a table
// written from the rule's statement (and a brute-force relative-change
// oracle over a grid), rounding against integer arithmetic, the capacity
// scale against the paper's bound on what endpoints may hold.
#include "flowtune/common/rules.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace flowtune::rules {
namespace {

struct Case {
  std::uint64_t rate, told;
  double threshold;
  Update want;
};

TEST(Rules, UpdateDecisionFollowsTheTable) {
  const Case cases[] = {
      {1000, 0, 0.01, Update::kSend},         // nothing told yet: always
      {1, 0, 0.5, Update::kSend},             // the smallest rate, still new
      {1000, 1000, 0.01, Update::kSame},      // unchanged
      {1010, 1000, 0.01, Update::kSuppressed},  // exactly the threshold: not past it
      {1011, 1000, 0.01, Update::kSend},      // one byte/s past it
      {990, 1000, 0.01, Update::kSuppressed},   // down by exactly the threshold
      {989, 1000, 0.01, Update::kSend},
      {1001, 1000, 0.0, Update::kSend},       // threshold 0: every move is told
      {1500, 1000, 0.5, Update::kSuppressed},
      {1501, 1000, 0.5, Update::kSend},
      {1, 2, 0.5, Update::kSuppressed},       // halved at threshold 0.5
      {0xffffffffffull, 1, 0.5, Update::kSend},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(update_decision(c.rate, c.told, c.threshold), c.want)
        << c.rate << " told " << c.told << " at " << c.threshold;
  }
}

TEST(Rules, UpdateDecisionAgreesWithARelativeChangeOracle) {
  // Oracle: send when told is 0 or |rate/told - 1| > threshold, computed in
  // long double from the ratio (the rule multiplies instead).
  for (double t : {0.0, 0.01, 0.05, 0.2, 0.5}) {
    for (std::uint64_t told = 0; told < 300; told += 7) {
      for (std::uint64_t rate = 1; rate < 600; ++rate) {
        Update want;
        if (rate == told) {
          want = Update::kSame;
        } else if (told == 0) {
          want = Update::kSend;
        } else {
          const long double rel = static_cast<long double>(rate) / told - 1;
          const long double mag = rel < 0 ? -rel : rel;
          // Ties within rounding error of the threshold are skipped: the
          // two forms may round them differently.
          if (mag > t - 1e-12L && mag < t + 1e-12L) continue;
          want = mag > t ? Update::kSend : Update::kSuppressed;
        }
        ASSERT_EQ(update_decision(rate, told, t), want) << rate << " " << told << " " << t;
      }
    }
  }
}

TEST(Rules, RatesRoundDownToWholeBytesAndNeverToZero) {
  EXPECT_EQ(round_bytes_per_sec(0.0), 1u);
  EXPECT_EQ(round_bytes_per_sec(0.999), 1u);
  EXPECT_EQ(round_bytes_per_sec(1.0), 1u);
  EXPECT_EQ(round_bytes_per_sec(2.999), 2u);
  EXPECT_EQ(round_bytes_per_sec(1.25e9), 1'250'000'000u);
  // Bits/s: 10 Gbit/s is 1.25 GB/s; 15 bit/s is 1 byte/s (1.875, down).
  EXPECT_EQ(to_bytes_per_sec(10e9), 1'250'000'000u);
  EXPECT_EQ(to_bytes_per_sec(15), 1u);
  EXPECT_EQ(to_bytes_per_sec(0), 1u);
  for (std::uint64_t b = 1; b < 5000; ++b) {
    // Oracle: integer division of bits by 8.
    EXPECT_EQ(to_bytes_per_sec(static_cast<double>(b * 8 + 7)), b);
  }
}

TEST(Rules, ScheduledCapacityLeavesRoomForStaleRatesAndHeadroom) {
  EXPECT_DOUBLE_EQ(capacity_scale(0, 0), 1.0);
  EXPECT_DOUBLE_EQ(capacity_scale(0.01, 0), 0.99);
  EXPECT_DOUBLE_EQ(capacity_scale(0.01, 0.1), 0.99 * 0.9);
  // The bound the scale exists for: a held rate within the threshold of the
  // current ones, h <= r / (1 - t), summed over a full scheduled link, fits
  // the real link.
  for (double t : {0.0, 0.01, 0.1, 0.5}) {
    const double link = 1e9, scheduled = link * capacity_scale(t, 0);
    EXPECT_LE(scheduled / (1 - t), link * (1 + 1e-12));
  }
}

TEST(Rules, RangesAndLeaseDefaultsAreConsistent) {
  EXPECT_TRUE(valid_threshold(kThreshold));
  EXPECT_TRUE(valid_threshold(0.5));
  EXPECT_FALSE(valid_threshold(0.51));
  EXPECT_FALSE(valid_threshold(-0.01));
  EXPECT_TRUE(valid_headroom(kHeadroom));
  EXPECT_FALSE(valid_headroom(0.95));
  // Refreshes come before the lease ends; an endpoint times out only after
  // its rates have lapsed.
  EXPECT_LT(kLeaseRefreshUs, kLeaseUs);
  EXPECT_GT(kEndpointTimeoutUs, kLeaseUs);
}

TEST(Rules, ZeroMqFramesAddTwoOrNineBytes) {
  EXPECT_EQ(zmq_frame_bytes(0), 2u);
  EXPECT_EQ(zmq_frame_bytes(255), 257u);
  EXPECT_EQ(zmq_frame_bytes(256), 265u);
}

}  // namespace
}  // namespace flowtune::rules
