// Validation: loss, perplexity and the per-position NLL curves of docs/math.md §7.
#ifndef MESANET_MODEL_TRAINER_EVALUATE_H_
#define MESANET_MODEL_TRAINER_EVALUATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "mesa/v1/trainer.pb.h"
#include "model/comm/communicator.h"
#include "model/data/data_loader.h"
#include "model/net/mesanet.h"

namespace mesa::model {

struct EvalResult {
  double loss = 0;        // mean NLL over non-BOS targets
  double perplexity = 0;  // exp(loss)
  int64_t tokens = 0;
  int64_t batches = 0;
  double cg_steps_mean = 0;
  int cg_max_steps = 0;
  float cg_tol = 0;
  // Position k = tokens since the last BOS in the window (0 = first token of a document).
  // Targets before the first BOS of a window have unknown position and are left out of the curves.
  std::vector<double> nll_at_position;  // NLL_k (eq. 27)
  std::vector<double> mean_nll_so_far;  // NLL_{:k} (eq. 26): pooled mean over positions <= k
  std::vector<int64_t> count_at_position;

  // The curves only with `per_position`.
  mesa::v1::EvalMetrics ToProto(bool per_position) const;
};

// Context parallelism (training.context_parallel): the slice along time of each sequence that a
// rank runs, slice `index` of `count` equal ones.
struct ContextSlice {
  int index = 0;
  int count = 1;
};

// Columns [index * seq_len / count, (index + 1) * seq_len / count) of row-major [batch, seq_len].
void TakeSlice(const std::vector<int32_t>& full, int batch, int seq_len, const ContextSlice& slice,
               std::vector<int32_t>* part);

// Runs up to `max_batches` micro-batches per rank (0 = all, one pass without wrapping) from
// `loader` (of whole sequences of `seq_len`; `net` runs `slice` of them). With a communicator,
// sums and counts are reduced over ranks (every rank must run the same number of batches, which
// the shared data position guarantees). Positions for the curves count from the last BOS of the
// whole sequence, so context-parallel curves equal one rank's.
absl::StatusOr<EvalResult> Evaluate(MesaNet& net, DataLoader& loader, int batch, int seq_len,
                                    int64_t max_batches, const MesaSolve& solve,
                                    Communicator* comm = nullptr, const ContextSlice& slice = {});

}  // namespace mesa::model

#endif  // MESANET_MODEL_TRAINER_EVALUATE_H_
