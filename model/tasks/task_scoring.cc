#include "model/tasks/task_scoring.h"

#include <algorithm>
#include <random>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spec/tasks.h"

namespace mesa::model {
namespace {

// One row of a batch: the tokens of BOS + context + continuation, and where the continuation's
// targets start (index into the inputs).
struct Request {
  int example = 0;
  int choice = 0;
  std::vector<int32_t> sequence;
  int first_target = 0;
};

int64_t CodePoints(const std::string& text) {
  // Every byte that is not a UTF-8 continuation byte starts a code point.
  return std::count_if(text.begin(), text.end(),
                       [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

// The few-shot prefix of example i: num_fewshot other examples, each its context and answer.
std::string FewshotPrefix(const std::vector<TaskExample>& examples, int i,
                          const TaskScoreOptions& options) {
  if (options.num_fewshot == 0) return std::string();
  std::mt19937_64 rng(options.seed * 1000003 + i);
  std::uniform_int_distribution<int> pick(0, static_cast<int>(examples.size()) - 1);
  absl::flat_hash_set<int> seen;
  std::string prefix;
  while (static_cast<int>(seen.size()) < options.num_fewshot) {
    const int j = pick(rng);
    if (j == i || !seen.insert(j).second) continue;
    absl::StrAppend(&prefix, examples[j].context, examples[j].answer(),
                    spec::kTaskFewshotSeparator);
  }
  return prefix;
}

// Decodes every target example greedily (options.generator), `batch` prompts per call, and sets
// its greedy_match by the normalised text.
absl::Status DecodeTargets(const std::vector<TaskExample>& examples,
                           const std::vector<Request>& requests, const Tokenizer& tokenizer,
                           int batch, const TaskScoreOptions& options, TaskScore* score) {
  std::vector<const Request*> targets;
  for (const Request& r : requests) {
    if (!examples[r.example].multiple_choice()) targets.push_back(&r);
  }
  for (size_t first = 0; first < targets.size(); first += batch) {
    const size_t n = std::min<size_t>(batch, targets.size() - first);
    std::vector<std::vector<int32_t>> prompts;
    GenerateOptions generate;
    generate.solve = options.solve;
    generate.sampling.temperature = 0;  // greedy
    generate.max_new_tokens = 0;
    for (size_t i = first; i < first + n; ++i) {
      const Request& r = *targets[i];
      // BOS, context | target: the prompt is the context without its BOS (the generator adds it).
      prompts.emplace_back(r.sequence.begin() + 1, r.sequence.begin() + r.first_target + 1);
      if (prompts.back().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", examples[r.example].line, ": a target needs a context to decode from"));
      }
      generate.max_new_tokens = std::max<int>(
          generate.max_new_tokens, static_cast<int>(r.sequence.size()) - r.first_target - 1);
    }
    absl::StatusOr<std::vector<Completion>> done =
        options.generator->GenerateTokens(prompts, &tokenizer, generate);
    if (!done.ok()) return done.status();
    for (size_t i = 0; i < n; ++i) {
      const Request& r = *targets[first + i];
      // Every prompt decoded the group's longest target: keep as many tokens as this one has.
      std::vector<int32_t> tokens = (*done)[i].tokens;
      tokens.resize(std::min<size_t>(tokens.size(), r.sequence.size() - r.first_target - 1));
      std::string text = tokenizer.Decode(tokens);
      score->greedy_match[r.example] =
          NormalizeAnswer(text) == NormalizeAnswer(examples[r.example].target);
      score->greedy_text[r.example] = std::move(text);
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string NormalizeAnswer(const std::string& text) {
  const char* kSpace = " \t\r\n";
  const size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string::npos) return std::string();
  return text.substr(begin, text.find_last_not_of(kSpace) - begin + 1);
}

absl::StatusOr<TaskScore> ScoreTask(MesaNet& net, const Tokenizer& tokenizer,
                                    const std::vector<TaskExample>& examples, int batch,
                                    int seq_len, const TaskScoreOptions& options) {
  if (options.num_fewshot < 0 || options.num_fewshot > spec::kMaxTaskFewshot) {
    return absl::InvalidArgumentError(absl::StrCat("num_fewshot: ", options.num_fewshot,
                                                   " is outside 0..", spec::kMaxTaskFewshot));
  }
  if (options.num_fewshot >= static_cast<int>(examples.size())) {
    return absl::InvalidArgumentError(absl::StrCat("num_fewshot: ", options.num_fewshot,
                                                   " needs more than that many examples (",
                                                   examples.size(), " in the file)"));
  }
  const int32_t bos = tokenizer.bos_id();
  std::vector<Request> requests;
  TaskScore score;
  score.examples = static_cast<int64_t>(examples.size());
  score.loglikelihood.resize(examples.size());
  score.greedy_match.assign(examples.size(), false);
  score.greedy_text.assign(examples.size(), std::string());
  for (size_t i = 0; i < examples.size(); ++i) {
    const TaskExample& e = examples[i];
    const std::vector<int32_t> context =
        tokenizer.Encode(FewshotPrefix(examples, static_cast<int>(i), options) + e.context);
    const std::vector<std::string> continuations =
        e.multiple_choice() ? e.choices : std::vector<std::string>{e.target};
    score.multiple_choice += e.multiple_choice();
    score.loglikelihood[i].assign(continuations.size(), 0.0);
    for (size_t c = 0; c < continuations.size(); ++c) {
      Request r{static_cast<int>(i), static_cast<int>(c), {bos}, 0};
      r.sequence.insert(r.sequence.end(), context.begin(), context.end());
      r.first_target = static_cast<int>(r.sequence.size()) - 1;
      const std::vector<int32_t> tokens = tokenizer.Encode(continuations[c]);
      if (tokens.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", e.line, ": continuation ", c, " encodes to no tokens"));
      }
      r.sequence.insert(r.sequence.end(), tokens.begin(), tokens.end());
      const int64_t inputs = static_cast<int64_t>(r.sequence.size()) - 1;
      if (inputs > seq_len) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", e.line, ": BOS, few-shot examples, context and continuation ", c, " are ",
            inputs + 1, " tokens; the model scores at most seq_len + 1 = ", seq_len + 1));
      }
      requests.push_back(std::move(r));
    }
  }
  // Rows of `batch` requests; unused rows and the tail of each row are BOS (never scored).
  std::vector<int32_t> tokens, targets, greedy;
  std::vector<float> losses, greedy_logprobs;
  for (size_t first = 0; first < requests.size(); first += batch) {
    const size_t rows = std::min<size_t>(batch, requests.size() - first);
    tokens.assign(int64_t{batch} * seq_len, bos);
    targets.assign(int64_t{batch} * seq_len, bos);
    for (size_t r = 0; r < rows; ++r) {
      const std::vector<int32_t>& s = requests[first + r].sequence;
      for (size_t t = 0; t + 1 < s.size(); ++t) {
        tokens[r * seq_len + t] = s[t];
        targets[r * seq_len + t] = s[t + 1];
      }
    }
    auto stats = net.Forward(tokens.data(), targets.data(), batch, options.solve);
    if (!stats.ok()) return stats.status();
    if (!stats->finite) return absl::InternalError("non-finite loss while scoring a task");
    net.CopyLossesToHost(&losses);
    // The argmax over the vocabulary matters only for targets that no generator decodes.
    const bool argmax_targets =
        options.generator == nullptr &&
        std::any_of(requests.begin() + first, requests.begin() + first + rows,
                    [&](const Request& q) { return !examples[q.example].multiple_choice(); });
    if (argmax_targets) net.GreedyFromLogits(&greedy, &greedy_logprobs);
    for (size_t r = 0; r < rows; ++r) {
      const Request& q = requests[first + r];
      double nll = 0;
      for (size_t t = q.first_target; t + 1 < q.sequence.size(); ++t) {
        nll += losses[r * seq_len + t];
      }
      score.loglikelihood[q.example][q.choice] = -nll;
      if (!argmax_targets || examples[q.example].multiple_choice()) continue;
      bool match = true;
      for (size_t t = q.first_target; t + 1 < q.sequence.size(); ++t) {
        match = match && greedy[r * seq_len + t] == q.sequence[t + 1];
      }
      score.greedy_match[q.example] = match;
    }
  }
  if (options.generator != nullptr) {
    if (absl::Status s = DecodeTargets(examples, requests, tokenizer, batch, options, &score);
        !s.ok()) {
      return s;
    }
  }
  double right = 0, right_norm = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    const TaskExample& e = examples[i];
    if (!e.multiple_choice()) {
      right += score.greedy_match[i];
      right_norm += score.greedy_match[i];
      continue;
    }
    const std::vector<double>& ll = score.loglikelihood[i];
    int best = 0, best_norm = 0;
    for (size_t c = 1; c < ll.size(); ++c) {
      if (ll[c] > ll[best]) best = static_cast<int>(c);
      if (ll[c] / CodePoints(e.choices[c]) > ll[best_norm] / CodePoints(e.choices[best_norm])) {
        best_norm = static_cast<int>(c);
      }
    }
    right += best == e.gold;
    right_norm += best_norm == e.gold;
  }
  score.accuracy = right / static_cast<double>(examples.size());
  score.accuracy_norm = right_norm / static_cast<double>(examples.size());
  return score;
}

}  // namespace mesa::model
