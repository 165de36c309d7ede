// Validation: loss, perplexity and the per-position NLL curves of docs/math.md §7.
#ifndef MESANET_MODEL_TRAINER_EVALUATE_H_
#define MESANET_MODEL_TRAINER_EVALUATE_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mesa/v1/trainer.pb.h"
#include "model/comm/communicator.h"
#include "model/config/job_config.h"
#include "model/data/batch_source.h"
#include "model/net/mesanet.h"
#include "model/trainer/internals.h"

namespace mesa::model {

struct EvalResult {
  double loss = 0;        // mean NLL over non-BOS targets
  double perplexity = 0;  // exp(loss)
  int64_t tokens = 0;
  int64_t batches = 0;    // this rank's micro-batches
  int64_t sequences = 0;  // windows evaluated, over all ranks
  double cg_steps_mean = 0;
  // With score_accuracy: the share of scored targets that are the argmax of their logits.
  std::optional<double> accuracy;
  // Per layer, the mean CG steps per token of its forward solve (0 without a solve).
  std::vector<double> layer_cg_steps;
  int cg_max_steps = 0;
  float cg_tol = 0;
  // Position k = tokens since the last BOS in the window (0 = first token of a document).
  // Targets before the first BOS of a window have unknown position and are left out of the curves.
  std::vector<double> nll_at_position;  // NLL_k (eq. 27)
  std::vector<double> mean_nll_so_far;  // NLL_{:k} (eq. 26): pooled mean over positions <= k
  std::vector<int64_t> count_at_position;
  // With cg_per_position: per position k (as above, over every input token whose position is
  // known), the mean forward CG steps over the tokens, heads and layers that solve with CG.
  std::vector<double> cg_steps_at_position;
  // After BinCurves: the curves above are bins, bin i covering positions
  // [bin_first[i], bin_last[i]]; empty while they are per position.
  std::vector<int32_t> bin_first, bin_last;

  // eval.curve_bins_per_octave: pools the curves into spec::CurveBins(size, b) bins (per bin: the
  // pooled NLL, its targets, the mean NLL so far at its last position). The CG curve is left as it
  // is.
  void BinCurves(int bins_per_octave);
  // The curves only with `per_position`.
  mesa::v1::EvalMetrics ToProto(bool per_position) const;
  // One dataset of an evaluation job's result (mesa.v1.DatasetResult).
  mesa::v1::DatasetResult ToDatasetProto(const std::string& name, const std::string& val_path,
                                         int seq_len, bool per_position) const;
};

// Context parallelism (training.context_parallel): the slice along time of each sequence that a
// rank runs, slice `index` of `count` equal ones.
struct ContextSlice {
  int index = 0;
  int count = 1;
};

// Columns [index * seq_len / count, (index + 1) * seq_len / count) of row-major [batch, seq_len].
template <typename T>
void TakeSlice(const std::vector<T>& full, int batch, int seq_len, const ContextSlice& slice,
               std::vector<T>* part) {
  const int len = seq_len / slice.count;
  part->resize(static_cast<size_t>(batch) * len);
  for (int b = 0; b < batch; ++b) {
    std::copy_n(full.begin() + int64_t{b} * seq_len + int64_t{slice.index} * len, len,
                part->begin() + int64_t{b} * len);
  }
}

// Runs up to `max_batches` micro-batches per rank (0 = all, one pass without wrapping) from
// `loader` (of whole sequences of `seq_len`; `net` runs `slice` of them). With a communicator,
// sums and counts are reduced over ranks (every rank must run the same number of batches, which
// the shared data position guarantees). Positions for the curves count from the last BOS of the
// whole sequence, so context-parallel curves equal one rank's.
absl::StatusOr<EvalResult> Evaluate(MesaNet& net, BatchSource& loader, int batch, int seq_len,
                                    int64_t max_batches, const MesaSolve& solve,
                                    Communicator* comm = nullptr, bool score_accuracy = false,
                                    const ContextSlice& slice = {}, bool cg_per_position = false,
                                    InternalsProbe* internals = nullptr);

// eval.internals: per layer its mixer and mean forward CG steps (`layer_cg_steps`, from an
// evaluation), and for layers with Λ its per-head statistics, read from `params` (host, the
// layout's buffer).
std::vector<mesa::v1::LayerInternals> ModelInternals(const ModelConfig& model,
                                                     const std::vector<std::string>& mixers,
                                                     const ParamLayout& layout, const float* params,
                                                     const std::vector<double>& layer_cg_steps);

// The windows of one evaluation dataset: its shards, or its synthetic task's evaluation examples,
// split over `data_ranks` data-parallel replicas (under context parallelism the ranks of one
// replica read the same whole sequences).
absl::StatusOr<std::unique_ptr<BatchSource>> OpenEvalSource(const JobConfig& config,
                                                            const EvalSettings::Dataset& dataset,
                                                            int batch, int data_rank,
                                                            int data_ranks);

// The training stream of data.synthetic (every task, cycled through), or with `eval` the
// evaluation examples of every task (the periodic validation of training), split over
// `data_ranks` data-parallel replicas.
std::unique_ptr<BatchSource> SyntheticStream(const JobConfig& config, bool eval, int batch,
                                             int data_rank, int data_ranks);

// eval.average_curves: at each position k that every dataset named in `names` scored (their
// per-position curves, eval.per_position), the mean over them of exp(mean NLL so far at k).
// InvalidArgument naming a dataset that is missing or has no curve.
absl::StatusOr<mesa::v1::AveragedCurve> AverageCurves(
    const google::protobuf::RepeatedPtrField<mesa::v1::DatasetResult>& datasets,
    const std::vector<std::string>& names);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TRAINER_EVALUATE_H_
