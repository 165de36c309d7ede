// Needle-in-a-haystack items generated in-process (RULER's eight single-needle, multi-key,
// multi-value and multi-query configurations; docs/evaluation.md "Needle in a haystack"): a
// haystack of filler lines, natural-text sentences or distractor needles, with needle sentences
// ("the number for tavoki-remubo is 4811207") placed at drawn depths, then a question whose answer
// the model must complete. Item i of (seed, variant, length) comes from its own random stream, so
// any rank or shard regenerates it alone, and nothing is downloaded.
#ifndef MESANET_MODEL_TASKS_NIAH_H_
#define MESANET_MODEL_TASKS_NIAH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tasks/task_file.h"
#include "model/tokenizer/tokenizer.h"

namespace mesa::model {

// single_1, single_2, single_3, multikey_1, multikey_2, multikey_3, multivalue, multiquery.
const std::vector<std::string>& NiahVariants();

struct NiahConfig {
  std::string variant;
  int length = 0;  // tokens of prompt + completion the item must fit (with BOS)
  uint64_t seed = 0;
  int max_new_tokens = 128;  // RULER's
  // niah.score greedy: items carry " " + their value as a target to teacher-force instead.
  bool score_greedy = false;
  // The natural text of the text haystacks (single_2/3, multikey_1, multivalue, multiquery),
  // split into sentences at ". ", "? ", "! ".
  std::string haystack_text;
};

struct NiahItem {
  std::string prompt;                 // header, haystack with needles, question, answer prefix
  std::vector<std::string> expected;  // the values the completion must contain
  std::vector<std::string> keys;      // the keys asked
  int first_depth = 0;                // the depth (percent) of the first asked needle
  int units = 0;                      // haystack units (lines or sentences) in the prompt
};

// SplitMix64 seeded with FNV-1a-64 of "<seed>/<variant>/<length>/<index>": item `index`'s stream.
class NiahRandom {
 public:
  NiahRandom(uint64_t seed, absl::string_view variant, int length, int64_t index);
  uint64_t Next();
  // Uniform in [0, n) (n > 0), by rejection.
  uint64_t Below(uint64_t n);

 private:
  uint64_t state_;
};

// The largest haystack size (in units) at which item 0's prompt plus max_new_tokens fits
// config.length tokens with BOS, found by bisection; FailedPrecondition when not even the
// needles fit, InvalidArgument for an unknown variant or a text variant without text.
absl::StatusOr<int> NiahUnits(const NiahConfig& config, const Tokenizer& tokenizer);

// Item `index` at `units` haystack units (NiahUnits), trimmed further in steps (25 units) if it
// still overflows.
absl::StatusOr<NiahItem> GenerateNiahItem(const NiahConfig& config, const Tokenizer& tokenizer,
                                          int units, int64_t index);

// Every item of `variants` x `lengths` (items_per_cell each, index 0.. per cell), as task items
// of the needle form: the prompt, the expected values as answers, max_new_tokens, the tag.
absl::StatusOr<std::vector<TaskExample>> NiahTaskItems(const std::vector<std::string>& variants,
                                                       const std::vector<int>& lengths,
                                                       int items_per_cell, const NiahConfig& base,
                                                       const Tokenizer& tokenizer);

struct NiahMatch {
  double match_all = 0;  // the share of expected values found
  bool match_any = false;
};

// RULER's scoring: the output trimmed, ASCII control characters turned into newlines, trimmed
// again; a value is found when it occurs in it ignoring the case of ASCII letters.
NiahMatch ScoreNiah(absl::string_view output, const std::vector<std::string>& expected);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TASKS_NIAH_H_
