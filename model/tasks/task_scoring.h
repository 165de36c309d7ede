// Scoring task examples by the model's log-likelihood (the MesaNet paper's App. L, as
// lm-eval-harness does): multiple choice by the summed log-likelihood of each continuation given
// the context (acc) and by that sum over the continuation's length in characters (acc_norm);
// targets by exact match under greedy decoding.
#ifndef MESANET_MODEL_TASKS_TASK_SCORING_H_
#define MESANET_MODEL_TASKS_TASK_SCORING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/generate/generator.h"
#include "model/net/mesanet.h"
#include "model/tasks/task_file.h"
#include "model/tokenizer/tokenizer.h"

namespace mesa::model {

struct TaskScoreOptions {
  int num_fewshot = 0;  // examples of the same file shown before each one, with their answers
  uint64_t seed = 0;    // picks the few-shot examples
  MesaSolve solve;
  // Targets: with a generator (the evaluation's), exact match by greedy decoding of as many tokens
  // as the target has, compared after NormalizeAnswer. Without one, every target token must be the
  // argmax given the ones before it (the same as greedy decoding, token for token).
  Generator* generator = nullptr;
};

// The normalisation of exact match: leading and trailing whitespace (space, tab, CR, LF) removed.
std::string NormalizeAnswer(const std::string& text);

struct TaskScore {
  int64_t examples = 0;
  int64_t multiple_choice = 0;  // of them with choices; the rest have a target
  // The share of examples answered right: the most likely choice (or the greedy target) is gold.
  double accuracy = 0;
  // The same with each choice's log-likelihood divided by its length in code points (targets
  // count as under `accuracy`).
  double accuracy_norm = 0;
  // Per example: the summed log-likelihood (nats) of each choice, or of the target.
  std::vector<std::vector<double>> loglikelihood;
  // Per example: whether the greedy continuation equals the target (targets only).
  std::vector<bool> greedy_match;
  // Per example, with a generator: the text greedy decoding produced (targets only).
  std::vector<std::string> greedy_text;
};

// Scores `examples` with `net` (planned for `batch` sequences of `seq_len` tokens), one
// (example, continuation) per row: BOS, the context, the continuation, padded with BOS. A
// sequence longer than seq_len + 1 tokens is an error naming the example's line.
absl::StatusOr<TaskScore> ScoreTask(MesaNet& net, const Tokenizer& tokenizer,
                                    const std::vector<TaskExample>& examples, int batch,
                                    int seq_len, const TaskScoreOptions& options);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TASKS_TASK_SCORING_H_
