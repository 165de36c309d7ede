#include "model/tasks/task_sharding.h"

#include <algorithm>
#include <random>
#include <vector>

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

TEST(ShardItems, PositionsInCostOrderModuloTheCount) {
  // Cost order: item 3 (9), 0 (7), 1 (5), 4 (5), 2 (1), 5 (1); positions mod 3.
  const std::vector<int64_t> costs = {7, 5, 1, 9, 5, 1};
  EXPECT_EQ(ShardItems(costs, 0, 3), (std::vector<bool>{false, false, false, true, true, false}));
  EXPECT_EQ(ShardItems(costs, 1, 3), (std::vector<bool>{true, false, true, false, false, false}));
  EXPECT_EQ(ShardItems(costs, 2, 3), (std::vector<bool>{false, true, false, false, false, true}));
  EXPECT_EQ(ShardItems(costs, 0, 1), std::vector<bool>(6, true));
}

TEST(ShareUnits, TheJobsShareDealtOverItsRanks) {
  const std::vector<int64_t> costs = {7, 5, 1, 9, 5, 1};
  // Shard 0 of 2: units 3, 1, 2 (positions 0, 2, 4 by cost); two ranks take them in snake order.
  const UnitShare r0 = ShareUnits(costs, 0, 2, 0, 2), r1 = ShareUnits(costs, 0, 2, 1, 2);
  EXPECT_EQ(r0.in_job, (std::vector<bool>{false, true, true, true, false, false}));
  EXPECT_EQ(r0.in_job, r1.in_job);
  for (size_t u = 0; u < costs.size(); ++u) {
    EXPECT_EQ(r0.mine[u] + r1.mine[u], r0.in_job[u] ? 1 : 0) << u;  // each once, in the job
  }
  EXPECT_EQ(ShareUnits(costs, 0, 1, 0, 1).mine, std::vector<bool>(6, true));
}

}  // namespace
}  // namespace mesa::model
