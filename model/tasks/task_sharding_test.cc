#include "model/tasks/task_sharding.h"

#include <algorithm>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace mesa::model {
namespace {

TEST(DealItems, SnakeOrderByCostWithIndexBreakingTies) {
  // Sorted: item 3 (9), 0 (7), 1 (5), 4 (5), 2 (1), 5 (1) -> ranks 0, 1, 1, 0, 0, 1.
  const std::vector<int> owner = DealItems({7, 5, 1, 9, 5, 1}, 2);
  EXPECT_EQ(owner, (std::vector<int>{1, 1, 0, 0, 0, 1}));
  EXPECT_EQ(DealItems({3, 2, 1}, 1), (std::vector<int>{0, 0, 0}));
  // More ranks than items: the first ranks get one each.
  EXPECT_EQ(DealItems({1, 2}, 4), (std::vector<int>{1, 0}));
}

TEST(DealItems, EveryItemOnceAndTotalsBalanced) {
  std::mt19937 rng(3);
  std::lognormal_distribution<double> cost(5.0, 1.0);
  std::vector<int64_t> costs(1000);
  for (int64_t& c : costs) c = static_cast<int64_t>(cost(rng));
  for (int ranks : {2, 3, 4, 7}) {
    const std::vector<int> owner = DealItems(costs, ranks);
    std::vector<int64_t> total(ranks, 0);
    std::vector<int> count(ranks, 0);
    for (size_t i = 0; i < costs.size(); ++i) {
      ASSERT_GE(owner[i], 0);
      ASSERT_LT(owner[i], ranks);
      total[owner[i]] += costs[i];
      ++count[owner[i]];
    }
    const auto [lo, hi] = std::minmax_element(total.begin(), total.end());
    // The snake deal keeps the heaviest rank within one item's cost of the lightest.
    EXPECT_LE(*hi - *lo, *std::max_element(costs.begin(), costs.end())) << ranks;
    const auto [fewest, most] = std::minmax_element(count.begin(), count.end());
    EXPECT_LE(*most - *fewest, 1) << ranks;
    EXPECT_EQ(owner, DealItems(costs, ranks));  // deterministic
  }
}

ItemScore Scored(double ll, bool greedy) {
  ItemScore s;
  s.requests = {{ll, 3, greedy}, {ll - 1, 2, false}};
  s.truncated = true;
  s.boundary_merge = greedy;
  s.contains = 1;
  s.match_all = 0.5;
  s.match_any = true;
  return s;
}

TEST(MergeItemRecords, PartialsInAnyOrderGiveEveryItemInIndexOrder) {
  std::vector<ItemScore> items = {Scored(-1.25, true), Scored(-2.5, false), ItemScore{},
                                  Scored(-0.125, true)};
  items[2].skipped = true;
  mesa::v1::TaskPartial a, b;
  a.set_task("t");
  b.set_task("t");
  a.set_items(4);
  b.set_items(4);
  *b.add_records() = ItemRecordOf(3, items[3]);
  *b.add_records() = ItemRecordOf(0, items[0]);
  *a.add_records() = ItemRecordOf(2, items[2]);
  *a.add_records() = ItemRecordOf(1, items[1]);
  absl::StatusOr<std::vector<ItemScore>> merged = MergeItemRecords(4, {b, a});
  ASSERT_TRUE(merged.ok()) << merged.status();
  for (int i = 0; i < 4; ++i) {
    const ItemScore &x = (*merged)[i], &y = items[i];
    ASSERT_EQ(x.requests.size(), y.requests.size()) << i;
    for (size_t k = 0; k < x.requests.size(); ++k) {
      EXPECT_EQ(x.requests[k].loglikelihood, y.requests[k].loglikelihood);
      EXPECT_EQ(x.requests[k].tokens, y.requests[k].tokens);
      EXPECT_EQ(x.requests[k].greedy, y.requests[k].greedy);
    }
    EXPECT_EQ(x.truncated, y.truncated);
    EXPECT_EQ(x.skipped, y.skipped);
    EXPECT_EQ(x.boundary_merge, y.boundary_merge);
    EXPECT_EQ(x.contains, y.contains);
    EXPECT_EQ(x.match_all, y.match_all);
    EXPECT_EQ(x.match_any, y.match_any);
  }
}

TEST(MergeItemRecords, MissingRepeatedOrForeignRecordsAreRefused) {
  mesa::v1::TaskPartial p;
  p.set_task("t");
  p.set_items(2);
  *p.add_records() = ItemRecordOf(0, Scored(-1, true));
  EXPECT_EQ(MergeItemRecords(2, {p}).status().code(), absl::StatusCode::kInternal);  // missing 1
  mesa::v1::TaskPartial twice = p;
  *twice.add_records() = ItemRecordOf(0, Scored(-1, true));
  EXPECT_EQ(MergeItemRecords(2, {twice}).status().code(), absl::StatusCode::kInternal);
  mesa::v1::TaskPartial outside = p;
  *outside.add_records() = ItemRecordOf(2, Scored(-1, true));
  EXPECT_EQ(MergeItemRecords(2, {outside}).status().code(), absl::StatusCode::kInternal);
  mesa::v1::TaskPartial other = p;
  other.set_items(3);
  EXPECT_EQ(MergeItemRecords(2, {other}).status().code(), absl::StatusCode::kInternal);
  mesa::v1::TaskPartial malformed = p;
  *malformed.add_records() = ItemRecordOf(1, Scored(-1, true));
  malformed.mutable_records(1)->clear_tokens();
  EXPECT_EQ(MergeItemRecords(2, {malformed}).status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace mesa::model
