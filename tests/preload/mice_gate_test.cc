// The mice gate against closed forms: a bucket drained at the mice rate,
// filled by writes, that lets a write through once it holds
// min_flowlet_bytes.
#include "mice_gate.h"

#include <gtest/gtest.h>

namespace flowtune::preload {
namespace {

constexpr std::uint64_t kMin = 65536;
constexpr std::uint64_t kRate = 12'500'000;  // 100 Mbit/s, bytes/s
constexpr std::uint64_t kMs = 1'000'000;     // ns

TEST(MiceGate, AWriteOfAtLeastMinBeginsAFlowletAtOnce) {
  MiceBucket b;
  EXPECT_EQ(mice_gate_add(b, 5 * kMs, kMin, kMin, kRate), kMin);
  EXPECT_EQ(b.level, 0u);  // emptied
  EXPECT_EQ(mice_gate_add(b, 6 * kMs, 1 << 20, kMin, kRate), 1u << 20);
}

// Writes of 1 KB every 20 us are 51.2 MB/s, above 12.5 MB/s: the bucket
// grows by 1024 - 250 = 774 bytes a write and passes 64 KiB at the 85th.
TEST(MiceGate, ASenderFasterThanTheMiceRateIsLetThroughWhenTheBucketFills) {
  MiceBucket b;
  std::uint64_t t = kMs, level = 0;
  int writes = 0;
  std::uint64_t gated = 0;
  while (gated == 0 && writes < 1000) {
    gated = mice_gate_add(b, t, 1024, kMin, kRate);
    ++writes;
    if (gated == 0) level = b.level;
    t += 20'000;
  }
  EXPECT_EQ(writes, 85);
  EXPECT_EQ(level, 1024u + 83 * 774);  // just before: 84 writes, 83 gaps drained
  EXPECT_EQ(gated, level - 250 + 1024);
}

// 64-byte replies every 20 us (3.2 MB/s) and 16 KB every 2 ms (8 MB/s) stay
// below the mice rate: never let through, however long they go on.
TEST(MiceGate, SendersBelowTheMiceRateStayMiceForever) {
  for (auto [bytes, gap_ns] : {std::pair<std::uint64_t, std::uint64_t>{64, 20'000},
                               {16384, 2 * kMs}}) {
    MiceBucket b;
    std::uint64_t t = kMs;
    for (int i = 0; i < 100000; ++i, t += gap_ns) {
      ASSERT_EQ(mice_gate_add(b, t, bytes, kMin, kRate), 0u) << bytes << " at write " << i;
    }
    EXPECT_LE(b.level, bytes);
  }
}

TEST(MiceGate, APauseDrainsTheBucketAtTheRateAndASecondEmptiesIt) {
  MiceBucket b;
  ASSERT_EQ(mice_gate_add(b, kMs, 60000, kMin, kRate), 0u);
  ASSERT_EQ(mice_gate_add(b, 2 * kMs, 0, kMin, kRate), 0u);  // 1 ms: 12,500 bytes out
  EXPECT_EQ(b.level, 47500u);
  ASSERT_EQ(mice_gate_add(b, 3 * kMs + 1'000'000'000, 0, kMin, kRate), 0u);
  EXPECT_EQ(b.level, 0u);
  // A clock that did not move drains nothing.
  ASSERT_EQ(mice_gate_add(b, 3 * kMs + 1'000'000'000, 60000, kMin, kRate), 0u);
  EXPECT_EQ(mice_gate_add(b, 3 * kMs + 1'000'000'000, 6000, kMin, kRate), 66000u);
}

TEST(MiceGate, AZeroMinLetsEveryWriteThrough) {
  MiceBucket b;
  EXPECT_EQ(mice_gate_add(b, kMs, 1, 0, kRate), 1u);
  EXPECT_EQ(mice_gate_add(b, kMs, 64, 0, kRate), 64u);
}

}  // namespace
}  // namespace flowtune::preload
