#include "model/tasks/task_sharding.h"

#include <algorithm>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mesa::model {

std::vector<int> DealItems(const std::vector<int64_t>& costs, int ranks) {
  std::vector<int> order(costs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return costs[a] > costs[b]; });
  std::vector<int> owner(costs.size(), 0);
  if (ranks <= 1) return owner;
  for (size_t k = 0; k < order.size(); ++k) {
    const int round = static_cast<int>(k / ranks), place = static_cast<int>(k % ranks);
    owner[order[k]] = round % 2 == 0 ? place : ranks - 1 - place;
  }
  return owner;
}

mesa::v1::TaskItemRecord ItemRecordOf(int64_t index, const ItemScore& score) {
  mesa::v1::TaskItemRecord r;
  r.set_index(index);
  for (const RequestScore& q : score.requests) {
    r.add_loglikelihood(q.loglikelihood);
    r.add_tokens(q.tokens);
    r.add_greedy(q.greedy);
  }
  r.set_truncated(score.truncated);
  r.set_skipped(score.skipped);
  r.set_boundary_merge(score.boundary_merge);
  r.set_contains(score.contains);
  r.set_match_all(score.match_all);
  r.set_match_any(score.match_any);
  return r;
}

ItemScore ItemScoreOf(const mesa::v1::TaskItemRecord& r) {
  ItemScore s;
  for (int k = 0; k < r.loglikelihood_size(); ++k) {
    s.requests.push_back({r.loglikelihood(k), k < r.tokens_size() ? r.tokens(k) : 0,
                          k < r.greedy_size() && r.greedy(k)});
  }
  s.truncated = r.truncated();
  s.skipped = r.skipped();
  s.boundary_merge = r.boundary_merge();
  s.contains = r.contains();
  s.match_all = r.match_all();
  s.match_any = r.match_any();
  return s;
}

absl::StatusOr<std::vector<ItemScore>> MergeItemRecords(
    int64_t items, const std::vector<mesa::v1::TaskPartial>& partials) {
  std::vector<ItemScore> scores(items);
  std::vector<bool> seen(items, false);
  int64_t count = 0;
  for (const mesa::v1::TaskPartial& p : partials) {
    if (p.items() != items) {
      return absl::InternalError(absl::StrCat("task ", p.task(), ": a partial of ", p.items(),
                                              " items merged into ", items));
    }
    for (const mesa::v1::TaskItemRecord& r : p.records()) {
      if (r.index() < 0 || r.index() >= items || seen[r.index()]) {
        return absl::InternalError(absl::StrCat("task ", p.task(), ": item record ", r.index(),
                                                " is out of range or repeated (", items,
                                                " items)"));
      }
      if (r.tokens_size() != r.loglikelihood_size() || r.greedy_size() != r.loglikelihood_size()) {
        return absl::InternalError(
            absl::StrCat("task ", p.task(), ": item record ", r.index(), " is malformed"));
      }
      seen[r.index()] = true;
      scores[r.index()] = ItemScoreOf(r);
      ++count;
    }
  }
  if (count != items) {
    return absl::InternalError(absl::StrCat("task records cover ", count, " of ", items, " items"));
  }
  return scores;
}

}  // namespace mesa::model
