#include "model/tasks/task_sharding.h"

#include <algorithm>
#include <numeric>

namespace mesa::model {
namespace {

// Item indices by cost, descending, index breaking ties.
std::vector<int> CostOrder(const std::vector<int64_t>& costs) {
  std::vector<int> order(costs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return costs[a] > costs[b]; });
  return order;
}

}  // namespace

std::vector<int> DealItems(const std::vector<int64_t>& costs, int ranks) {
  const std::vector<int> order = CostOrder(costs);
  std::vector<int> owner(costs.size(), 0);
  if (ranks <= 1) return owner;
  for (size_t k = 0; k < order.size(); ++k) {
    const int round = static_cast<int>(k / ranks), place = static_cast<int>(k % ranks);
    owner[order[k]] = round % 2 == 0 ? place : ranks - 1 - place;
  }
  return owner;
}

std::vector<bool> ShardItems(const std::vector<int64_t>& costs, int index, int count) {
  std::vector<bool> in(costs.size(), true);
  if (count <= 1) return in;
  const std::vector<int> order = CostOrder(costs);
  for (size_t p = 0; p < order.size(); ++p) in[order[p]] = static_cast<int>(p % count) == index;
  return in;
}

}  // namespace mesa::model
