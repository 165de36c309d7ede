// Scoring task items by the model's log-likelihood (the MesaNet paper's App. L, as
// lm-evaluation-harness does; docs/math.md §7.1–7.3): every request of every item is encoded as a
// pair (model/tasks/pair_encoding.h), laid out in rows of the evaluation's batch, scored in one
// forward per batch, and the item scores turned into the task's metrics
// (model/tasks/task_metrics.h); targets without `score: greedy` are decoded and compared, and
// generation items (the recall suite) decoded and searched for their answers.
#ifndef MESANET_MODEL_TASKS_TASK_SCORING_H_
#define MESANET_MODEL_TASKS_TASK_SCORING_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "model/generate/generator.h"
#include "model/net/mesanet.h"
#include "model/tasks/pair_encoding.h"
#include "model/tasks/task_file.h"
#include "model/tasks/task_metrics.h"
#include "model/tokenizer/tokenizer.h"
#include "spec/tasks.h"

namespace mesa::model {

struct TaskScoreOptions {
  int num_fewshot = 0;  // examples shown before each one, with their answers
  uint64_t seed = 0;    // picks the few-shot examples
  // Where the demonstrations come from: these items (e.g. a validation split), or when null
  // the task's other items.
  const std::vector<TaskExample>* demonstrations = nullptr;
  // Generation items are scored by BLEU against their first answer too (ItemScore::bleu_stats).
  bool bleu = false;
  MesaSolve solve;
  // Targets: with a generator (the evaluation's), exact match by greedy decoding of as many tokens
  // as the target has, compared after NormalizeAnswer. Without one, every target token must be the
  // argmax given the ones before it (the same as greedy decoding, token for token).
  Generator* generator = nullptr;
  // The window of a row in inputs (0 = seq_len; at most seq_len) and what an over-long row does.
  int max_length = 0;
  Truncation truncation = Truncation::kLeft;
  // BOS before non-empty contexts (the service's models expect it; false for parity runs).
  bool add_bos = true;
  // The metrics to report; empty = every one the items give (spec::DefaultTaskMetrics).
  std::vector<std::string> metrics;
  // Where the rows are scored: a net planned for rows of at most `inputs` tokens (the longest
  // request's), usually shorter and more of them than the caller's; unset, or a ScoringNet
  // without a net: the caller's. A row's scores do not depend on the net it runs in.
  struct ScoringNet {
    MesaNet* net = nullptr;
    int batch = 0;
    int seq_len = 0;
  };
  std::function<absl::StatusOr<ScoringNet>(int inputs)> net_for_rows;
  // Where shared contexts (reuse_context) are scored: a net of many rows and a short window, the
  // contexts and continuations run through it in pieces of its window; unset, or a ScoringNet
  // without a net: the rows' net. Its shape must not depend on the rank count.
  std::function<absl::StatusOr<ScoringNet>()> net_for_waves;
  // Generation items without their own: tokens to decode and the strings that end a completion.
  int max_new_tokens = spec::kDefaultTaskNewTokens;
  std::vector<std::string> stop;
  // Items spread over `count` ranks (model/tasks/task_sharding.h): this rank scores the items
  // DealItems gives `rank`, and `gather` exchanges every rank's serialized TaskPartial (all ranks
  // call it once per task, in the same order) so every rank computes the same metrics. Text
  // outputs (TaskScore::greedy_text) stay with the rank that decoded them.
  struct Shard {
    int rank = 0;
    int count = 1;
    std::function<absl::StatusOr<std::vector<std::string>>(const std::string& mine)> gather;
  };
  Shard shard;
  // eval.shard: this job scores only its share of the items (ShardItems over the same costs), its
  // ranks dealing that share among themselves, and reports their records (TaskScore::partial)
  // instead of metrics.
  struct JobShard {
    int index = 0;
    int count = 1;
  };
  JobShard job_shard;
  // Multiple-choice items whose rows share their context run it once and score each continuation
  // from its saved state (model/tasks/shared_context.h) instead of a row per choice.
  bool reuse_context = false;
  // Ranks exchange the decoded texts too, so that every rank's greedy_text holds every item's
  // (eval.items_output).
  bool gather_text = false;
};

// The normalisation of exact match: leading and trailing whitespace (space, tab, CR, LF) removed.
std::string NormalizeAnswer(const std::string& text);

struct TaskScore {
  int64_t examples = 0;
  int64_t multiple_choice = 0;  // of them with choices
  // The older fields of the result (its accuracy, accuracy_norm).
  double accuracy = 0;
  double accuracy_norm = 0;
  // The metric fields of the task's result (model/tasks/task_metrics.h); with a job shard only
  // `items`.
  mesa::v1::TaskResult metrics;
  // With a job shard: the records of its items, in index order.
  mesa::v1::TaskPartial partial;
  // Items this rank scored from a shared context (TaskScoreOptions::reuse_context).
  int64_t reused_contexts = 0;
  // Per item: the scores of its requests (empty when skipped).
  std::vector<ItemScore> items;
  // Per item: the summed log-likelihood (nats) of each request (empty when skipped).
  std::vector<std::vector<double>> loglikelihood;
  // Per item: cloze and target items, whether the greedy continuation equals the target.
  std::vector<bool> greedy_match;
  // Per item, with a generator: the text greedy decoding produced (target and generation items;
  // a generation item's up to its first stop string). Sharded: this rank's items only, unless
  // TaskScoreOptions::gather_text.
  std::vector<std::string> greedy_text;
  // Per item: whether this job scored it (all, or its eval.shard's share).
  std::vector<bool> in_job;
};

// Scores `examples` with `net` (planned for `batch` sequences of `seq_len` tokens), one request
// per row: BOS, the context, the continuation, padded with BOS. Errors name the item's line.
absl::StatusOr<TaskScore> ScoreTask(MesaNet& net, const Tokenizer& tokenizer,
                                    const std::vector<TaskExample>& examples, int batch,
                                    int seq_len, const TaskScoreOptions& options);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TASKS_TASK_SCORING_H_
