// The journal of engine changes (engine_journal.h): its records' layout,
// written out by hand here, and a mirror built by replay that holds what
// the journaled engine holds after changes made by the engine's caller and
// by a PolicyBook.
#include "flowtune/alloc/engine_journal.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "flowtune/alloc/engine.h"
#include "flowtune/alloc/policy.h"

namespace flowtune::alloc {
namespace {

constexpr double kGbps = 1e9;

FlowSpec on_links(std::initializer_list<LinkId> links, double weight = 1) {
  FlowSpec f;
  for (LinkId l : links) f.path.push(l);
  f.weight = weight;
  return f;
}

template <typename T>
void put(std::vector<std::uint8_t>& out, const T& v) {
  const auto* b = reinterpret_cast<const std::uint8_t*>(&v);
  out.insert(out.end(), b, b + sizeof v);
}

TEST(EngineJournal, RecordsAreAnOpByteAndTheCallsArguments) {
  JournaledEngine<double> e({10 * kGbps, 10 * kGbps}, 1, EngineConfig{});
  std::vector<std::uint8_t> j;
  e.set_journal(&j);
  const FlowSpec f = on_links({0, 1}, 2);
  const FlowId id = e.add_flow(f);
  (void)e.set_limits(id, 3, 5 * kGbps);
  (void)e.set_floor(id, 1 * kGbps);
  e.set_price(1, 0.5, 2);
  e.remove_flow(id);  // its own set_floor(id, 0) is not recorded
  e.compact();
  (void)e.set_blocks(1);

  std::vector<std::uint8_t> want;
  put(want, std::uint8_t{1});
  put(want, id);
  put(want, f.path.size);
  put(want, f.path.links);
  put(want, f.weight);
  put(want, f.max_bps);
  put(want, f.src_site);
  put(want, f.dst_site);
  put(want, f.priority);
  put(want, std::uint8_t{3});
  put(want, id);
  put(want, 3.0);
  put(want, 5 * kGbps);
  put(want, std::uint8_t{4});
  put(want, id);
  put(want, 1 * kGbps);
  put(want, std::uint8_t{5});
  put(want, LinkId{1});
  put(want, 0.5);
  put(want, std::uint8_t{2});
  put(want, std::uint8_t{2});
  put(want, id);
  put(want, std::uint8_t{6});
  put(want, std::uint8_t{7});
  put(want, std::uint32_t{1});
  EXPECT_EQ(j, want);
}

TEST(EngineJournal, NothingIsRecordedWithoutAJournalOrThroughTheBaseType) {
  JournaledEngine<double> e({10 * kGbps}, 1, EngineConfig{});
  (void)e.add_flow(on_links({0}));
  std::vector<std::uint8_t> j;
  e.set_journal(&j);
  BasicEngine<double>& base = e;
  (void)base.add_flow(on_links({0}));
  EXPECT_TRUE(j.empty());
  (void)e.add_flow(on_links({0}));
  EXPECT_FALSE(j.empty());
}

// Given an engine whose flows a PolicyBook re-weighs and floors, when a
// mirror replays its journal, then both compute the same rates bit for bit.
TEST(EngineJournal, AMirrorReplaysThePolicysChangesToo) {
  EngineConfig cfg;
  cfg.tolerance = 1e-9;
  JournaledEngine<double> e({10 * kGbps, 4 * kGbps}, 1, cfg);
  std::vector<std::uint8_t> j;
  e.set_journal(&j);
  PolicyBook book;
  const TenantId gold = book.tenant("gold");
  book.set_spec(gold, {.weight = 3, .guarantee_bps = 2 * kGbps});
  std::vector<FlowId> ids;
  for (int i = 0; i < 4; ++i) {
    const FlowSpec f = i % 2 == 0 ? on_links({0}) : on_links({0, 1});
    const FlowId id = e.add_flow(f);
    book.add(id, {i < 2 ? gold : kNoTenant, f.weight, f.max_bps, 0, 0, 0, f.path}, 0);
    ids.push_back(id);
  }
  book.apply(e, 0);
  EXPECT_GT(e.floor_bps(ids[0]), 0);  // the policy's floor reached the engine

  BasicEngine<double> mirror({10 * kGbps, 4 * kGbps}, 1, cfg);
  ASSERT_TRUE(replay_journal(mirror, j.data(), j.size()));
  e.solve(10000);
  mirror.solve(10000);
  for (FlowId id : ids) {
    EXPECT_EQ(mirror.floor_bps(id), e.floor_bps(id)) << id;
    EXPECT_EQ(mirror.rate_bps(id), e.rate_bps(id)) << id;
  }
}

}  // namespace
}  // namespace flowtune::alloc
