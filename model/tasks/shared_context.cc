#include "model/tasks/shared_context.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace mesa::model {

int WaveStateSize(int max_rows) { return max_rows + max_rows / 2 + 1; }

int WaveStateRows(int state_rows) {
  // The largest max_rows with WaveStateSize(max_rows) <= state_rows.
  int rows = (state_rows - 1) * 2 / 3 + 1;
  while (rows > 0 && WaveStateSize(rows) > state_rows) --rows;
  return rows;
}

int SharedPrefixLength(const std::vector<const std::vector<int32_t>*>& rows,
                       const std::vector<int>& first_targets) {
  if (rows.size() < 2 || first_targets.size() != rows.size()) return 0;
  const int f = first_targets[0];
  if (f < 1) return 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (first_targets[r] != f || static_cast<int>(rows[r]->size()) < f + 1) return 0;
    if (!std::equal(rows[r]->begin(), rows[r]->begin() + f, rows[0]->begin())) return 0;
  }
  return f;
}

std::vector<std::vector<int>> PackWaves(const std::vector<SharedContextItem>& items, int max_rows) {
  std::vector<int> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return items[a].first_target > items[b].first_target; });
  std::vector<std::vector<int>> waves;
  int rows = 0;
  for (int i : order) {
    const int n = static_cast<int>(items[i].rows.size());
    if (waves.empty() || rows + n > max_rows) {
      waves.emplace_back();
      rows = 0;
    }
    waves.back().push_back(i);
    rows += n;
  }
  return waves;
}

absl::Status ScoreWave(MesaNet& net, DecodeState& state,
                       const std::vector<SharedContextItem>& items, const std::vector<int>& wave,
                       const MesaSolve& solve, int32_t bos, bool greedy, int chunk,
                       std::vector<std::vector<RequestScore>>* scores) {
  if (chunk < 1) return absl::InternalError(absl::StrCat("a wave in pieces of ", chunk));
  const int n = static_cast<int>(wave.size());
  int rows = 0, common = items[wave[0]].first_target;
  for (int i : wave) {
    rows += static_cast<int>(items[i].rows.size());
    common = std::min(common, items[i].first_target);
  }
  // The state's rows: the wave's rows [0, max_rows), the contexts' [max_rows, max_rows + n),
  // the clear row last.
  const int zero_row = state.rows() - 1, max_rows = WaveStateRows(state.rows());
  if (rows > max_rows || max_rows + n > zero_row) {
    return absl::InternalError(absl::StrCat("a wave of ", rows, " rows and ", n,
                                            " contexts for a state of ", state.rows(), " rows"));
  }
  // The common part of the contexts, one row per item, from clear states.
  if (absl::Status s = net.CopyDecodeRows(state, std::vector<int32_t>(n, zero_row), max_rows);
      !s.ok()) {
    return s;
  }
  std::vector<int32_t> tokens(int64_t{n} * common);
  for (int k = 0; k < n; ++k) {
    const std::vector<int32_t>& row = *items[wave[k]].rows[0];
    std::copy_n(row.begin(), common, tokens.begin() + int64_t{k} * common);
  }
  std::vector<int32_t> piece;
  for (int begin = 0; begin < common; begin += chunk) {
    const int len = std::min(chunk, common - begin);
    piece.resize(int64_t{n} * len);
    for (int k = 0; k < n; ++k) {
      std::copy_n(tokens.begin() + int64_t{k} * common + begin, len,
                  piece.begin() + int64_t{k} * len);
    }
    absl::StatusOr<ForwardStats> prefill =
        net.Advance(piece.data(), n, len, solve, state, max_rows, /*logits=*/false);
    if (!prefill.ok()) return prefill.status();
    if (!prefill->finite) return absl::InternalError("non-finite values while scoring a context");
  }
  // Each item's context state to its rows, [first[k], first[k + 1]), in one gather per buffer.
  std::vector<int> first(n + 1, 0);
  std::vector<int32_t> from;
  for (int k = 0; k < n; ++k) {
    first[k + 1] = first[k] + static_cast<int>(items[wave[k]].rows.size());
    from.insert(from.end(), first[k + 1] - first[k], max_rows + k);
  }
  if (absl::Status s = net.CopyDecodeRows(state, from, 0); !s.ok()) return s;
  // The rest of every row: its context past the common part and its continuation, padded at the
  // end (past a row's last input nothing is read back); targets before the continuation are BOS,
  // which is not scored.
  int t = 1;
  for (int i : wave) {
    for (const std::vector<int32_t>* row : items[i].rows) {
      t = std::max(t, static_cast<int>(row->size()) - 1 - common);
    }
  }
  tokens.assign(int64_t{rows} * t, bos);
  std::vector<int32_t> targets(int64_t{rows} * t, bos);
  for (int k = 0; k < n; ++k) {
    const SharedContextItem& item = items[wave[k]];
    for (size_t c = 0; c < item.rows.size(); ++c) {
      const std::vector<int32_t>& row = *item.rows[c];
      const int64_t at = int64_t{first[k] + static_cast<int>(c)} * t;
      for (size_t p = common; p + 1 < row.size(); ++p) {
        tokens[at + p - common] = row[p];
        if (static_cast<int>(p) >= item.first_target) targets[at + p - common] = row[p + 1];
      }
    }
  }
  // Losses and argmaxes [rows, t], piece by piece; a piece without targets needs no logits.
  std::vector<float> losses(int64_t{rows} * t, 0.0f), piece_losses, logprobs;
  std::vector<int32_t> argmax(int64_t{rows} * t, bos), piece_argmax, piece_targets;
  for (int begin = 0; begin < t; begin += chunk) {
    const int len = std::min(chunk, t - begin);
    piece.resize(int64_t{rows} * len);
    piece_targets.resize(int64_t{rows} * len);
    for (int r = 0; r < rows; ++r) {
      std::copy_n(tokens.begin() + int64_t{r} * t + begin, len, piece.begin() + int64_t{r} * len);
      std::copy_n(targets.begin() + int64_t{r} * t + begin, len,
                  piece_targets.begin() + int64_t{r} * len);
    }
    const bool scored = std::any_of(piece_targets.begin(), piece_targets.end(),
                                    [&](int32_t y) { return y != bos; });
    absl::StatusOr<ForwardStats> rest =
        net.Advance(piece.data(), rows, len, solve, state, 0, /*logits=*/scored);
    if (!rest.ok()) return rest.status();
    if (!rest->finite) return absl::InternalError("non-finite values while scoring continuations");
    if (!scored) continue;
    if (absl::Status s = net.LossesOfLastAdvance(piece_targets.data(), &piece_losses); !s.ok()) {
      return s;
    }
    if (greedy) net.GreedyFromLogits(&piece_argmax, &logprobs);
    for (int r = 0; r < rows; ++r) {
      std::copy_n(piece_losses.begin() + int64_t{r} * len, len,
                  losses.begin() + int64_t{r} * t + begin);
      if (greedy) {
        std::copy_n(piece_argmax.begin() + int64_t{r} * len, len,
                    argmax.begin() + int64_t{r} * t + begin);
      }
    }
  }
  scores->assign(n, {});
  for (int k = 0; k < n; ++k) {
    const SharedContextItem& item = items[wave[k]];
    for (size_t c = 0; c < item.rows.size(); ++c) {
      const std::vector<int32_t>& row = *item.rows[c];
      const int64_t at = int64_t{first[k] + static_cast<int>(c)} * t;
      RequestScore out;
      double nll = 0;
      bool match = greedy;
      for (size_t p = item.first_target; p + 1 < row.size(); ++p) {
        nll += losses[at + p - common];
        match = match && argmax[at + p - common] == row[p + 1];
      }
      out.loglikelihood = -nll;
      out.tokens = static_cast<int64_t>(row.size()) - 1 - item.first_target;
      out.greedy = match;
      (*scores)[k].push_back(out);
    }
  }
  return absl::OkStatus();
}

}  // namespace mesa::model
