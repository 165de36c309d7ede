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
  kParity,
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
  // regbench (Akyürek et al.'s draws; 0 / false: one shape filling the window).
  int min_states = 0;
  bool alphabet_per_automaton = false;
  int min_strings = 0;
  int max_string_length = 0;
  int test_automata = 0;
  int min_length = 0;  // parity: string lengths are uniform in [min_length, seq_len]
  int score_from = 0;  // parity: the first scored string length (1-based)
};

// A task's token ids (vocab_size, plus noise_vocab_size for noisy_recall) number at most this:
// above MAD's largest memorization vocabulary (8,192) and Zoology's MQAR default (8,192).
inline constexpr int kMaxSyntheticTokens = 65536;
// Synthetic jobs use the byte tokenizer, whose BOS (256) is the target of every unscored position
// (the loss skips BOS targets). A task id at or above 256 is therefore fed as id + 1
// (SyntheticTokenId), so that ids below 256, and every result with them, stay as they were.
inline constexpr int32_t kSyntheticBos = 256;
inline constexpr int32_t SyntheticTokenId(int32_t task_id) {
  return task_id < kSyntheticBos ? task_id : task_id + 1;
}
inline constexpr int kMaxSyntheticTasks = 16;
// regbench: token 0 separates the strings, 1 .. vocab_size - 1 are the alphabet; vocab_size at most
// 64 so that each position's set of valid next tokens is one 64-bit mask.
inline constexpr int32_t kRegBenchDelimiter = 0;
inline constexpr int kMaxRegBenchVocab = 64;
inline constexpr int kMaxRegBenchStates = 64;
inline constexpr int kMaxRegBenchTestAutomata = 10000;
// parity: 0 pads, 1 and 2 are the bits 0 and 1, 3 and 4 the labels even and odd.
inline constexpr int32_t kParityBit0 = 1;
inline constexpr int32_t kParityEven = 3;
inline constexpr int kParityVocab = 5;
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
// `window` tokens and at most kMaxSyntheticTokens token ids.
std::vector<std::string> SyntheticTaskProblems(const mesa::v1::SyntheticTask& task, int window);

// The smallest model.vocab_size that holds a task's ids as fed (SyntheticTokenId) and BOS: 257 up
// to 256 task ids, else the task's ids + 1. Call on a task without SyntheticTaskProblems.
int SyntheticModelVocab(const SyntheticTaskParams& task);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_SYNTHETIC_H_
