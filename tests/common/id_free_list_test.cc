// IdFreeList (flowtune/common/id_free_list.h) against a naive oracle: a set
// of live ids where acquire returns the most recently freed id, else the
// smallest never issued.
#include "flowtune/common/id_free_list.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace flowtune {
namespace {

TEST(IdFreeList, IssuesDenseIdsAndReusesTheLastFreedFirst) {
  IdFreeList<std::uint32_t> ids;
  EXPECT_EQ(ids.acquire(), 0u);
  EXPECT_EQ(ids.acquire(), 1u);
  EXPECT_EQ(ids.acquire(), 2u);
  ids.release(0);
  ids.release(2);
  EXPECT_EQ(ids.live(), 1u);
  EXPECT_EQ(ids.acquire(), 2u);
  EXPECT_EQ(ids.acquire(), 0u);
  EXPECT_EQ(ids.acquire(), 3u);
  EXPECT_EQ(ids.issued(), 4u);
  EXPECT_EQ(ids.live(), 4u);
}

TEST(IdFreeList, AgreesWithANaiveOracleOverRandomOperations) {
  IdFreeList<std::uint32_t> ids;
  std::set<std::uint32_t> live;
  std::vector<std::uint32_t> freed;  // the oracle's stack of freed ids
  std::uint32_t next = 0;
  std::mt19937 rng(7);
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      std::uint32_t want;
      if (!freed.empty()) {
        want = freed.back();
        freed.pop_back();
      } else {
        want = next++;
      }
      const std::uint32_t got = ids.acquire();
      ASSERT_EQ(got, want);
      ASSERT_TRUE(live.insert(got).second) << "issued twice: " << got;
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      ids.release(*it);
      freed.push_back(*it);
      live.erase(it);
    }
    ASSERT_EQ(ids.live(), live.size());
    ASSERT_EQ(ids.issued(), next);
  }
}

// trim() takes back the free ids at the top; the rest are then reused
// lowest first, and every live id stays live.
TEST(IdFreeList, TrimTakesBackTheTopAndThenReusesTheLowestFirst) {
  IdFreeList<std::uint32_t> ids;
  for (int i = 0; i < 10; ++i) ids.acquire();
  for (std::uint32_t id : {9u, 2u, 7u, 8u, 5u, 6u}) ids.release(id);  // live: 0 1 3 4
  ids.trim();
  EXPECT_EQ(ids.issued(), 5u);
  EXPECT_EQ(ids.live(), 4u);
  EXPECT_EQ(ids.acquire(), 2u);
  EXPECT_EQ(ids.acquire(), 5u);
  ids.release(0);
  ids.release(1);
  ids.trim();  // nothing free at the top: the bound stays
  EXPECT_EQ(ids.issued(), 6u);
  EXPECT_EQ(ids.acquire(), 0u);
  EXPECT_EQ(ids.acquire(), 1u);
  EXPECT_EQ(ids.acquire(), 6u);
  for (std::uint32_t id = 0; id < 7; ++id) ids.release(id);
  ids.trim();
  EXPECT_EQ(ids.issued(), 0u);
  EXPECT_EQ(ids.acquire(), 0u);
}

TEST(IdFreeListDeathTest, ReleasingAnIdNeverIssuedAborts) {
  IdFreeList<std::uint32_t> ids;
  ids.acquire();
  EXPECT_DEATH(ids.release(5), "assertion failed");
}

}  // namespace
}  // namespace flowtune
