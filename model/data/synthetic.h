// Synthetic tasks generated in-process from a seed (data.synthetic; docs/trainer.md): Zoology's
// multi-query associative recall (MQAR), the six MAD tasks and RegBench (in-context learning of
// random regular languages). Each example is a pure function of
// (seed, task index, split, example index), so every rank and every resumed run sees the same data
// without files. Only answer positions carry a target; the loss and the accuracy are taken there.
#ifndef MESANET_MODEL_DATA_SYNTHETIC_H_
#define MESANET_MODEL_DATA_SYNTHETIC_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "model/data/batch_source.h"
#include "spec/synthetic.h"

namespace mesa::model {

using spec::kRegBenchDelimiter;
using spec::SyntheticKind;
using spec::SyntheticTaskParams;

// targets[t] of a position that is not an answer.
inline constexpr int32_t kNoTarget = -1;

enum class SyntheticSplit { kTrain = 0, kEval = 1 };

struct SyntheticExample {
  // task.seq_len token ids as fed to the model: the task's ids, those from 256 up one higher
  // (spec::SyntheticTokenId), so each is below spec::SyntheticModelVocab(task) and none is BOS.
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;  // the token to predict after inputs[t], or kNoTarget
  // Tasks where several next tokens are right (regbench): bit v of valid_next[t] is set when token
  // v may follow inputs[t]; the accuracy counts an argmax in this set. Empty for the other tasks.
  std::vector<uint64_t> valid_next;
};

// regbench's automaton: per state, its outgoing edges (symbol, next state); state 0 starts each
// string. Exposed for the tests, which check every sampled string against it.
struct RegBenchAutomaton {
  std::vector<std::vector<std::pair<int32_t, int>>> edges;
};
RegBenchAutomaton RegBenchAutomatonOf(const SyntheticTaskParams& task, uint64_t seed,
                                      int task_index, SyntheticSplit split, int64_t index);

SyntheticExample GenerateExample(const SyntheticTaskParams& task, uint64_t seed, int task_index,
                                 SyntheticSplit split, int64_t index);

struct SyntheticSourceOptions {
  std::vector<SyntheticTaskParams> tasks;
  uint64_t seed = 0;
  int64_t examples = 0;  // per task, of the split
  SyntheticSplit split = SyntheticSplit::kTrain;
  // Evaluation: the one task read (its examples once, in order). Training: -1, every task,
  // example j of the stream being example (j / tasks) % examples of task j % tasks.
  int only_task = -1;
  int batch = 1;
  int window = 0;         // data.seq_len; shorter examples are padded with unscored zeros
  int32_t no_target = 0;  // what an unscored target becomes (the model's BOS id)
  int rank = 0;
  int world_size = 1;
};

// Micro-batches of synthetic examples: rank r of W takes examples position + r*B .. + B - 1, and
// every rank advances by B*W (the shard loader's layout).
class SyntheticSource : public BatchSource {
 public:
  explicit SyntheticSource(SyntheticSourceOptions options);
  absl::Status Next(std::vector<int32_t>* tokens, std::vector<int32_t>* targets,
                    bool wrap = true) override;
  const DataPosition& position() const override { return position_; }
  absl::Status SetPosition(const DataPosition& position) override;
  const std::vector<uint64_t>& valid_next() const override { return valid_next_; }

 private:
  SyntheticSourceOptions options_;
  bool has_valid_sets_;  // a task with several right answers: Next fills valid_next_
  std::vector<uint64_t> valid_next_;
  int64_t stream_length_;  // examples in one pass
  DataPosition position_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_DATA_SYNTHETIC_H_
