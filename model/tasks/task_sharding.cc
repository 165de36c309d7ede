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

UnitShare ShareUnits(const std::vector<int64_t>& costs, int job_shard, int job_shards, int rank,
                     int ranks) {
  UnitShare share;
  share.in_job = ShardItems(costs, job_shard, job_shards);
  share.mine = share.in_job;
  if (ranks <= 1) return share;
  std::vector<int64_t> job_costs;
  for (size_t u = 0; u < costs.size(); ++u) {
    if (share.in_job[u]) job_costs.push_back(costs[u]);
  }
  const std::vector<int> owner = DealItems(job_costs, ranks);
  for (size_t u = 0, k = 0; u < costs.size(); ++u) {
    if (share.in_job[u]) share.mine[u] = owner[k++] == rank;
  }
  return share;
}

}  // namespace mesa::model
