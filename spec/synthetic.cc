#include "spec/synthetic.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mesa::spec {
namespace {

struct TaskInfo {
  const char* name;
  SyntheticKind kind;
  int seq_len;
  int vocab_size;
};

// Defaults: the MAD protocol's per-task settings as we read them (Poli et al. 2024; docs/trainer.md
// has the table and the departures), Zoology's MQAR at a byte vocabulary, and RegBench (Akyürek et
// al. 2024) with an alphabet of 12 symbols.
constexpr TaskInfo kTasks[] = {
    {"mqar", SyntheticKind::kMqar, 64, 256},
    {"in_context_recall", SyntheticKind::kInContextRecall, 128, 16},
    {"noisy_recall", SyntheticKind::kNoisyRecall, 128, 16},
    {"fuzzy_recall", SyntheticKind::kFuzzyRecall, 128, 32},
    {"selective_copying", SyntheticKind::kSelectiveCopying, 256, 16},
    {"compression", SyntheticKind::kCompression, 32, 16},
    {"memorization", SyntheticKind::kMemorization, 32, 256},
    {"regbench", SyntheticKind::kRegBench, 128, 13},
    {"parity", SyntheticKind::kParity, 40, kParityVocab},
};

const TaskInfo* Find(absl::string_view name) {
  for (const TaskInfo& t : kTasks) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

int Or(int value, int fallback) { return value != 0 ? value : fallback; }

}  // namespace

std::optional<SyntheticKind> SyntheticKindFromName(absl::string_view name) {
  const TaskInfo* t = Find(name);
  if (t == nullptr) return std::nullopt;
  return t->kind;
}

std::string SyntheticTaskNames() {
  std::string out;
  for (const TaskInfo& t : kTasks) absl::StrAppend(&out, out.empty() ? "" : ", ", t.name);
  return out;
}

SyntheticTaskParams ResolveSyntheticTask(const mesa::v1::SyntheticTask& task) {
  const TaskInfo* info = Find(task.task());
  SyntheticTaskParams p;
  if (info == nullptr) return p;
  p.kind = info->kind;
  p.name = info->name;
  p.seq_len = Or(task.seq_len(), info->seq_len);
  p.vocab_size = Or(task.vocab_size(), info->vocab_size);
  p.num_kv_pairs = p.kind == SyntheticKind::kMqar ? Or(task.num_kv_pairs(), 8) : 0;
  p.frac_noise = p.kind == SyntheticKind::kNoisyRecall
                     ? (task.frac_noise() != 0 ? task.frac_noise() : 0.2f)
                     : 0.0f;
  p.noise_vocab_size = p.kind == SyntheticKind::kNoisyRecall ? Or(task.noise_vocab_size(), 16) : 0;
  p.k_motif_size = p.kind == SyntheticKind::kFuzzyRecall ? Or(task.k_motif_size(), 3) : 0;
  p.v_motif_size = p.kind == SyntheticKind::kFuzzyRecall ? Or(task.v_motif_size(), 3) : 0;
  p.num_tokens_to_copy =
      p.kind == SyntheticKind::kSelectiveCopying ? Or(task.num_tokens_to_copy(), 16) : 0;
  p.num_states = p.kind == SyntheticKind::kRegBench ? Or(task.num_states(), 6) : 0;
  p.strings_per_sequence =
      p.kind == SyntheticKind::kRegBench ? Or(task.strings_per_sequence(), 8) : 0;
  if (p.kind == SyntheticKind::kRegBench) {
    p.min_states = Or(task.min_states(), p.num_states);
    p.alphabet_per_automaton = task.alphabet_per_automaton();
    p.min_strings = Or(task.min_strings(), p.strings_per_sequence);
    p.max_string_length = task.max_string_length();
    p.test_automata = task.test_automata();
  }
  p.min_length = p.kind == SyntheticKind::kParity ? Or(task.min_length(), p.seq_len) : 0;
  p.score_from = p.kind == SyntheticKind::kParity ? Or(task.score_from(), 1) : 0;
  return p;
}

std::vector<std::string> SyntheticTaskProblems(const mesa::v1::SyntheticTask& task, int window) {
  std::vector<std::string> out;
  const TaskInfo* info = Find(task.task());
  if (info == nullptr) {
    out.push_back(absl::StrCat("task: must be one of ", SyntheticTaskNames(), ", got \"",
                               task.task().substr(0, 64), "\""));
    return out;
  }
  const SyntheticKind kind = info->kind;
  // Parameters of other tasks are refused rather than ignored.
  auto only = [&](const char* field, bool set, SyntheticKind owner) {
    if (set && kind != owner) {
      out.push_back(absl::StrCat(field, ": applies only to another task; leave it unset"));
    }
  };
  only("num_kv_pairs", task.num_kv_pairs() != 0, SyntheticKind::kMqar);
  only("frac_noise", task.frac_noise() != 0, SyntheticKind::kNoisyRecall);
  only("noise_vocab_size", task.noise_vocab_size() != 0, SyntheticKind::kNoisyRecall);
  only("k_motif_size", task.k_motif_size() != 0, SyntheticKind::kFuzzyRecall);
  only("v_motif_size", task.v_motif_size() != 0, SyntheticKind::kFuzzyRecall);
  only("num_tokens_to_copy", task.num_tokens_to_copy() != 0, SyntheticKind::kSelectiveCopying);
  only("num_states", task.num_states() != 0, SyntheticKind::kRegBench);
  only("strings_per_sequence", task.strings_per_sequence() != 0, SyntheticKind::kRegBench);
  only("min_states", task.min_states() != 0, SyntheticKind::kRegBench);
  only("alphabet_per_automaton", task.alphabet_per_automaton(), SyntheticKind::kRegBench);
  only("min_strings", task.min_strings() != 0, SyntheticKind::kRegBench);
  only("max_string_length", task.max_string_length() != 0, SyntheticKind::kRegBench);
  only("test_automata", task.test_automata() != 0, SyntheticKind::kRegBench);
  only("min_length", task.min_length() != 0, SyntheticKind::kParity);
  only("score_from", task.score_from() != 0, SyntheticKind::kParity);
  if (!out.empty()) return out;
  const SyntheticTaskParams p = ResolveSyntheticTask(task);
  if (p.seq_len < 4 || p.seq_len > window) {
    out.push_back(absl::StrCat("seq_len: must be between 4 and data.seq_len (", window, "), got ",
                               p.seq_len, task.seq_len() == 0 ? " (the task's default)" : ""));
  }
  if (p.vocab_size < 4 || p.vocab_size > kMaxSyntheticTokens) {
    out.push_back(absl::StrCat("vocab_size: must be between 4 and ", kMaxSyntheticTokens, ", got ",
                               p.vocab_size));
  }
  if (!out.empty()) return out;
  switch (kind) {
    case SyntheticKind::kMqar:
      // The pairs, then one query (key and value) per pair; keys are distinct, 0 is the filler.
      if (p.num_kv_pairs < 1 || 4 * p.num_kv_pairs > p.seq_len ||
          p.num_kv_pairs > p.vocab_size / 2 - 1) {
        out.push_back(absl::StrCat("num_kv_pairs: must be at least 1, at most seq_len / 4 (",
                                   p.seq_len / 4, ") and vocab_size / 2 - 1 (",
                                   p.vocab_size / 2 - 1, "), got ", p.num_kv_pairs));
      }
      break;
    case SyntheticKind::kNoisyRecall:
      if (!(p.frac_noise >= 0 && p.frac_noise < 1)) {
        out.push_back(absl::StrCat("frac_noise: must be in [0, 1), got ", p.frac_noise));
      }
      if (p.noise_vocab_size < 1 || p.vocab_size + p.noise_vocab_size > kMaxSyntheticTokens) {
        out.push_back(
            absl::StrCat("noise_vocab_size: must be at least 1 with vocab_size + "
                         "noise_vocab_size at most ",
                         kMaxSyntheticTokens, ", got ", p.noise_vocab_size));
      }
      break;
    case SyntheticKind::kFuzzyRecall:
      for (auto [field, size] :
           {std::pair{"k_motif_size", p.k_motif_size}, std::pair{"v_motif_size", p.v_motif_size}}) {
        if (size < 1 || size > 16) {
          out.push_back(absl::StrCat(field, ": must be between 1 and 16, got ", size));
        }
      }
      if (out.empty() && 2 * (p.k_motif_size + p.v_motif_size) > p.seq_len) {
        out.push_back("seq_len: must hold two key-value motif pairs");
      }
      break;
    case SyntheticKind::kSelectiveCopying:
      if (p.num_tokens_to_copy < 1 || 2 * p.num_tokens_to_copy + 1 > p.seq_len) {
        out.push_back(absl::StrCat("num_tokens_to_copy: must be between 1 and (seq_len - 1) / 2 (",
                                   (p.seq_len - 1) / 2, "), got ", p.num_tokens_to_copy));
      }
      break;
    case SyntheticKind::kRegBench:
      if (p.vocab_size > kMaxRegBenchVocab) {
        out.push_back(absl::StrCat("vocab_size: regbench allows at most ", kMaxRegBenchVocab,
                                   " (the delimiter and the alphabet), got ", p.vocab_size));
      }
      if (p.num_states < 1 || p.num_states > kMaxRegBenchStates) {
        out.push_back(absl::StrCat("num_states: must be between 1 and ", kMaxRegBenchStates,
                                   ", got ", p.num_states));
      }
      if (p.min_states < 1 || p.min_states > p.num_states) {
        out.push_back(absl::StrCat("min_states: must be between 1 and num_states (", p.num_states,
                                   "), got ", p.min_states));
      }
      if (p.alphabet_per_automaton && p.num_states > p.vocab_size - 1) {
        out.push_back(
            absl::StrCat("num_states: alphabet_per_automaton draws as many symbols as "
                         "states from vocab_size - 1 (",
                         p.vocab_size - 1, "), got ", p.num_states));
      }
      if (p.min_strings < 1 || p.min_strings > p.strings_per_sequence) {
        out.push_back(absl::StrCat("min_strings: must be between 1 and strings_per_sequence (",
                                   p.strings_per_sequence, "), got ", p.min_strings));
      }
      if (p.max_string_length < 0 ||
          int64_t{p.strings_per_sequence} * (p.max_string_length + 1) > p.seq_len) {
        out.push_back(absl::StrCat(
            "max_string_length: must be at least 0 with strings_per_sequence x (max_string_length "
            "+ 1) at most seq_len (",
            p.seq_len, "), got ", p.max_string_length));
      } else if (p.max_string_length == 0 && 2 * p.strings_per_sequence > p.seq_len) {
        // Filling the window: each string has at least one symbol and its delimiter.
        out.push_back(absl::StrCat("strings_per_sequence: must be between 1 and seq_len / 2 (",
                                   p.seq_len / 2, "), got ", p.strings_per_sequence));
      }
      if (p.strings_per_sequence < 1) {
        out.push_back(
            absl::StrCat("strings_per_sequence: must be at least 1, got ", p.strings_per_sequence));
      }
      if (p.test_automata < 0 || p.test_automata > kMaxRegBenchTestAutomata) {
        out.push_back(absl::StrCat("test_automata: must be between 0 and ",
                                   kMaxRegBenchTestAutomata, ", got ", p.test_automata));
      }
      break;
    case SyntheticKind::kParity:
      if (p.vocab_size != kParityVocab) {
        out.push_back(absl::StrCat("vocab_size: parity uses ", kParityVocab,
                                   " ids (padding, two bits, two labels), got ", p.vocab_size));
      }
      if (p.min_length < 1 || p.min_length > p.seq_len) {
        out.push_back(absl::StrCat("min_length: must be between 1 and seq_len (", p.seq_len,
                                   "), got ", p.min_length));
      }
      if (p.score_from < 1 || p.score_from > p.seq_len) {
        out.push_back(absl::StrCat("score_from: must be between 1 and seq_len (", p.seq_len,
                                   "), got ", p.score_from));
      }
      break;
    case SyntheticKind::kInContextRecall:
    case SyntheticKind::kCompression:
    case SyntheticKind::kMemorization:
      break;
  }
  return out;
}

int SyntheticModelVocab(const SyntheticTaskParams& task) {
  const int32_t ids = task.vocab_size + task.noise_vocab_size;
  return std::max(kSyntheticBos, SyntheticTokenId(ids - 1)) + 1;
}

}  // namespace mesa::spec
