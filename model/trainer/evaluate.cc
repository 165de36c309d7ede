#include "model/trainer/evaluate.h"

#include <algorithm>
#include <cmath>

namespace mesa::model {

mesa::v1::EvalMetrics EvalResult::ToProto(bool per_position) const {
  mesa::v1::EvalMetrics m;
  m.set_val_loss(loss);
  m.set_val_perplexity(perplexity);
  m.set_tokens(tokens);
  m.set_batches(batches);
  m.set_cg_steps_mean(cg_steps_mean);
  m.set_cg_mode(cg_tol > 0 ? "tolerance" : "fixed");
  m.set_cg_tol(cg_tol);
  m.set_cg_max_steps(cg_max_steps);
  if (per_position) {
    m.mutable_nll_at_position()->Add(nll_at_position.begin(), nll_at_position.end());
    m.mutable_mean_nll_so_far()->Add(mean_nll_so_far.begin(), mean_nll_so_far.end());
    m.mutable_count_at_position()->Add(count_at_position.begin(), count_at_position.end());
  }
  return m;
}

void TakeSlice(const std::vector<int32_t>& full, int batch, int seq_len, const ContextSlice& slice,
               std::vector<int32_t>* part) {
  const int len = seq_len / slice.count;
  part->resize(static_cast<size_t>(batch) * len);
  for (int b = 0; b < batch; ++b) {
    std::copy_n(full.begin() + int64_t{b} * seq_len + int64_t{slice.index} * len, len,
                part->begin() + int64_t{b} * len);
  }
}

absl::StatusOr<EvalResult> Evaluate(MesaNet& net, DataLoader& loader, int batch, int seq_len,
                                    int64_t max_batches, const MesaSolve& solve, Communicator* comm,
                                    const ContextSlice& slice) {
  EvalResult result;
  result.cg_max_steps = solve.max_steps;
  result.cg_tol = solve.tolerance;
  const int32_t bos = net.config().bos_token;
  std::vector<double> nll_sum(seq_len, 0.0);
  std::vector<int64_t> count(seq_len, 0);
  double loss_sum = 0, cg_sum = 0;
  std::vector<int32_t> tokens, targets, part_tokens, part_targets;
  std::vector<float> losses;
  // This rank's columns of each sequence.
  const int part = seq_len / slice.count, begin = slice.index * part;
  while (max_batches == 0 || result.batches < max_batches) {
    absl::Status next = loader.Next(&tokens, &targets, /*wrap=*/false);
    if (absl::IsOutOfRange(next)) break;
    if (!next.ok()) return next;
    TakeSlice(tokens, batch, seq_len, slice, &part_tokens);
    TakeSlice(targets, batch, seq_len, slice, &part_targets);
    auto stats = net.Forward(part_tokens.data(), part_targets.data(), batch, solve);
    if (!stats.ok()) return stats.status();
    if (!stats->finite) return absl::InternalError("non-finite loss during evaluation");
    net.CopyLossesToHost(&losses);
    loss_sum += stats->loss_sum;
    result.tokens += stats->loss_tokens;
    cg_sum += stats->cg_steps_mean;
    ++result.batches;
    for (int b = 0; b < batch; ++b) {
      int64_t position = -1;
      for (int t = 0; t < seq_len; ++t) {
        const int64_t i = int64_t{b} * seq_len + t;
        if (tokens[i] == bos)
          position = 0;
        else if (position >= 0)
          ++position;
        if (position >= 0 && targets[i] != bos && t >= begin && t < begin + part) {
          nll_sum[position] += losses[int64_t{b} * part + t - begin];
          ++count[position];
        }
      }
    }
  }
  if (comm != nullptr && comm->world_size() > 1) {
    // [loss_sum, tokens, cg_sum, per-position sums..., per-position counts...]
    std::vector<double> packed = {loss_sum, static_cast<double>(result.tokens), cg_sum};
    packed.insert(packed.end(), nll_sum.begin(), nll_sum.end());
    for (int64_t c : count) packed.push_back(static_cast<double>(c));
    if (absl::Status s = comm->AllReduce(packed.data(), packed.size(), ReduceOp::kSum); !s.ok()) {
      return s;
    }
    loss_sum = packed[0];
    result.tokens = static_cast<int64_t>(packed[1]);
    cg_sum = packed[2] / comm->world_size();
    for (int k = 0; k < seq_len; ++k) {
      nll_sum[k] = packed[3 + k];
      count[k] = static_cast<int64_t>(packed[3 + seq_len + k]);
    }
  }
  if (result.batches == 0) {
    return absl::InvalidArgumentError("the validation data holds no complete batch");
  }
  result.loss = loss_sum / std::max<int64_t>(1, result.tokens);
  result.perplexity = std::exp(result.loss);
  result.cg_steps_mean = cg_sum / result.batches;
  double pooled_sum = 0;
  int64_t pooled_count = 0;
  for (int k = 0; k < seq_len; ++k) {
    pooled_sum += nll_sum[k];
    pooled_count += count[k];
    result.nll_at_position.push_back(count[k] > 0 ? nll_sum[k] / count[k] : 0.0);
    result.mean_nll_so_far.push_back(pooled_count > 0 ? pooled_sum / pooled_count : 0.0);
    result.count_at_position.push_back(count[k]);
  }
  return result;
}

}  // namespace mesa::model
