// Synthetic tasks (data.synthetic): MQAR, the MAD tasks and RegBench; their names, defaults and the
// rules their parameters obey, in one place for the spec validator and the generators
// (model/data/synthetic.h).
#ifndef MESANET_SPEC_SYNTHETIC_H_
#define MESANET_SPEC_SYNTHETIC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "mesa/v1/job.pb.h"

namespace mesa::spec {

enum class SyntheticKind {
  kMqar,
  kInContextRecall,
  kNoisyRecall,
  kFuzzyRecall,
  kSelectiveCopying,
  kCompression,
  kMemorization,
  kRegBench,
};

// A task with every default applied.
struct SyntheticTaskParams {
  SyntheticKind kind = SyntheticKind::kMqar;
  std::string name;
  int seq_len = 0;
  int vocab_size = 0;
  int num_kv_pairs = 0;
  float frac_noise = 0;
  int noise_vocab_size = 0;
  int k_motif_size = 0;
  int v_motif_size = 0;
  int num_tokens_to_copy = 0;
  int num_states = 0;
  int strings_per_sequence = 0;
};

// Token ids of every task stay below this (the byte vocabulary; BOS, 256, marks unscored targets).
inline constexpr int kSyntheticTokenLimit = 256;
inline constexpr int kMaxSyntheticTasks = 16;
// regbench: token 0 separates the strings, 1 .. vocab_size - 1 are the alphabet; vocab_size at most
// 64 so that each position's set of valid next tokens is one 64-bit mask.
inline constexpr int32_t kRegBenchDelimiter = 0;
inline constexpr int kMaxRegBenchVocab = 64;
inline constexpr int kMaxRegBenchStates = 64;
inline constexpr int64_t kMaxSyntheticExamples = int64_t{1} << 30;
inline constexpr int64_t kDefaultSyntheticTrainExamples = 12800;
inline constexpr int64_t kDefaultSyntheticEvalExamples = 1280;

std::optional<SyntheticKind> SyntheticKindFromName(absl::string_view name);
// "mqar, in_context_recall, ..." for messages.
std::string SyntheticTaskNames();

// The task's parameters with defaults applied. Call after SyntheticTaskProblems found none.
SyntheticTaskParams ResolveSyntheticTask(const mesa::v1::SyntheticTask& task);

// What is wrong with a task ("field: message", the field below the task, e.g. "seq_len: ..."),
// empty when it can be generated: a known name, parameters in range, examples that fit
// `window` tokens and token ids below kSyntheticTokenLimit.
std::vector<std::string> SyntheticTaskProblems(const mesa::v1::SyntheticTask& task, int window);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_SYNTHETIC_H_
