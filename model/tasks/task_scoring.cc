#include "model/tasks/task_scoring.h"

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tasks/niah.h"
#include "model/tasks/shared_context.h"
#include "model/tasks/task_sharding.h"
#include "spec/bleu.h"
#include "spec/task_results.h"
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
  bool has_bos = true;
};

// The few-shot prefix of example i: num_fewshot distinct demonstrations (other items of the task,
// or options.demonstrations), each its context and answer, drawn from a generator seeded by the
// seed and i.
absl::StatusOr<std::string> FewshotPrefix(const std::vector<TaskExample>& examples, int i,
                                          const TaskScoreOptions& options) {
  if (options.num_fewshot == 0) return std::string();
  const std::vector<TaskExample>& pool =
      options.demonstrations != nullptr ? *options.demonstrations : examples;
  const int self = options.demonstrations != nullptr ? -1 : i;
  std::mt19937_64 rng(options.seed * 1000003 + i);
  absl::flat_hash_set<int> seen;
  std::string prefix;
  while (static_cast<int>(seen.size()) < options.num_fewshot) {
    // The raw output modulo the pool: the same draws from every standard library.
    const int j = static_cast<int>(rng() % pool.size());
    if (j == self || !seen.insert(j).second) continue;
    const TaskExample& shown = pool[j];
    if (shown.form == TaskForm::kNeedle ||
        (shown.form == TaskForm::kGeneration && shown.answers.empty())) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", shown.line, " of the demonstrations has no answer to show"));
    }
    absl::StrAppend(&prefix, shown.Demonstration(), spec::kTaskFewshotSeparator);
  }
  return prefix;
}

// Fixed CG steps: each of an item's `inputs` scored or prefilled tokens took max_steps (with a
// tolerance the scoring forward counts them instead).
void AddFixedPrefillSteps(int64_t inputs, const MesaSolve& solve, ItemScore& item) {
  item.cg_steps_prefill += static_cast<double>(inputs) * solve.max_steps;
  item.cg_tokens_prefill += inputs;
}

// Adds the CG steps of a completion's first `kept` tokens to the item's decoding counts (models
// without Mesa layers have none).
void AddDecodeCgSteps(const Completion& done, size_t kept, ItemScore& item) {
  if (done.cg_layers == 0) return;
  kept = std::min(kept, done.cg_steps.size());
  for (size_t k = 0; k < kept; ++k) item.cg_steps_decode += done.cg_steps[k];
  item.cg_tokens_decode += static_cast<int64_t>(kept);
}

// Decodes every target example greedily (options.generator), `batch` prompts per call, and sets
// its greedy_match by the normalised text.
absl::Status DecodeTargets(const std::vector<TaskExample>& examples,
                           const std::vector<Request>& requests, const Tokenizer& tokenizer,
                           int batch, const TaskScoreOptions& options, TaskScore* score) {
  std::vector<const Request*> targets;
  for (const Request& r : requests) {
    if (examples[r.example].form == TaskForm::kTarget) targets.push_back(&r);
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
      prompts.emplace_back(r.sequence.begin() + r.has_bos, r.sequence.begin() + r.first_target + 1);
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
      AddDecodeCgSteps((*done)[i], tokens.size(), score->items[r.example]);
      score->greedy_match[r.example] =
          NormalizeAnswer(text) == NormalizeAnswer(examples[r.example].target);
      score->greedy_text[r.example] = std::move(text);
    }
  }
  return absl::OkStatus();
}

// The completion cut before the first occurrence of any stop string.
std::string CutAtStop(std::string text, const std::vector<std::string>& stop) {
  size_t end = text.size();
  for (const std::string& s : stop) end = std::min(end, text.find(s));
  text.resize(end);
  return text;
}

// Decodes every generation item greedily (options.generator): its prompt, left-truncated to
// max_length − max_new_tokens tokens after BOS, in batches of items that share max_new_tokens
// and stop strings; scores `contains` of its answers.
absl::Status DecodeGenerations(const std::vector<TaskExample>& examples,
                               const std::vector<std::string>& prefixes,
                               const std::vector<bool>& mine, const Tokenizer& tokenizer, int batch,
                               int max_length, const TaskScoreOptions& options, TaskScore* score) {
  struct Prompt {
    int item;
    int max_new_tokens;
    const std::vector<std::string>* stop;
    std::vector<int32_t> tokens;
  };
  std::vector<Prompt> prompts;
  // Needle items with a target (niah.score greedy): teacher-forced, not decoded.
  std::vector<int> forced;
  std::vector<std::vector<int32_t>> forced_prompts, forced_targets;
  for (size_t i = 0; i < examples.size(); ++i) {
    const TaskExample& e = examples[i];
    if (e.form != TaskForm::kGeneration && e.form != TaskForm::kNeedle) continue;
    if (!mine[i]) continue;
    if (options.generator == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("line ", e.line, ": generation items need the evaluation's generator"));
    }
    if (e.form == TaskForm::kNeedle && !e.target.empty()) {
      forced.push_back(static_cast<int>(i));
      forced_prompts.push_back(tokenizer.Encode(e.context));
      forced_targets.push_back(tokenizer.Encode(e.target));
      continue;
    }
    Prompt p{static_cast<int>(i), e.max_new_tokens > 0 ? e.max_new_tokens : options.max_new_tokens,
             e.stop ? &*e.stop : &options.stop, tokenizer.Encode(prefixes[i] + e.context)};
    // Needle items are generated to fit their own length, which may exceed the window.
    const int64_t room = e.form == TaskForm::kNeedle
                             ? static_cast<int64_t>(p.tokens.size())
                             : int64_t{max_length} - p.max_new_tokens;  // prompt tokens after BOS
    if (room < 1) {
      score->items[i].skipped = true;  // nothing of the prompt fits beside the completion
      continue;
    }
    if (static_cast<int64_t>(p.tokens.size()) > room) {
      if (options.truncation == Truncation::kFail) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", e.line, ": the prompt is ", p.tokens.size(),
                         " tokens; with max_new_tokens ", p.max_new_tokens, " the window holds ",
                         room, " (set truncation: left to keep the last ones)"));
      }
      p.tokens.erase(p.tokens.begin(), p.tokens.end() - room);
      score->items[i].truncated = true;
    }
    if (p.tokens.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("line ", e.line, ": the prompt encodes to no tokens"));
    prompts.push_back(std::move(p));
  }
  if (!forced.empty()) {
    absl::StatusOr<std::vector<Generator::ContinuationScore>> scored =
        options.generator->ScoreContinuations(forced_prompts, forced_targets, options.solve);
    if (!scored.ok()) return scored.status();
    for (size_t k = 0; k < forced.size(); ++k) {
      ItemScore& item = score->items[forced[k]];
      item.match_all = (*scored)[k].greedy ? 1.0 : 0.0;
      item.match_any = (*scored)[k].greedy;
      score->greedy_text[forced[k]] = (*scored)[k].greedy ? examples[forced[k]].target : "";
    }
  }
  // Items that decode alike share calls; each keeps its own result slot.
  std::stable_sort(prompts.begin(), prompts.end(), [](const Prompt& a, const Prompt& b) {
    return std::tie(a.max_new_tokens, *a.stop) < std::tie(b.max_new_tokens, *b.stop);
  });
  for (size_t first = 0; first < prompts.size();) {
    size_t end = first + 1;
    while (end < prompts.size() && end - first < static_cast<size_t>(batch) &&
           prompts[end].max_new_tokens == prompts[first].max_new_tokens &&
           *prompts[end].stop == *prompts[first].stop) {
      ++end;
    }
    std::vector<std::vector<int32_t>> tokens;
    for (size_t k = first; k < end; ++k) tokens.push_back(prompts[k].tokens);
    GenerateOptions generate;
    generate.solve = options.solve;
    generate.sampling.temperature = 0;  // greedy
    generate.max_new_tokens = prompts[first].max_new_tokens;
    generate.stop = *prompts[first].stop;
    absl::StatusOr<std::vector<Completion>> done =
        options.generator->GenerateTokens(tokens, &tokenizer, generate);
    if (!done.ok()) return done.status();
    for (size_t k = first; k < end; ++k) {
      const int i = prompts[k].item;
      const Completion& completion = (*done)[k - first];
      std::string text = CutAtStop(completion.completion, generate.stop);
      AddDecodeCgSteps(completion, completion.tokens.size(), score->items[i]);
      if (completion.cg_layers > 0 && options.solve.tolerance == 0) {
        // With a tolerance the prefill is not counted per item.
        AddFixedPrefillSteps(static_cast<int64_t>(prompts[k].tokens.size()), options.solve,
                             score->items[i]);
      }
      if (examples[i].form == TaskForm::kNeedle) {
        const NiahMatch match = ScoreNiah(text, examples[i].answers);
        score->items[i].match_all = match.match_all;
        score->items[i].match_any = match.match_any;
      } else {
        const std::vector<std::string>& answers = examples[i].answers;
        score->items[i].contains = ContainsAnswer(text, answers);
        const std::string normalized = NormalizeAnswer(text);
        score->items[i].exact =
            std::any_of(answers.begin(), answers.end(),
                        [&](const std::string& a) { return normalized == NormalizeAnswer(a); });
        if (options.bleu) {
          score->items[i].bleu_stats =
              spec::SegmentBleu(text, answers.empty() ? "" : answers[0]).ToList();
        }
      }
      score->greedy_text[i] = std::move(text);
    }
    first = end;
  }
  return absl::OkStatus();
}

// Exchanges the records of this rank's items (`mine`) with the other ranks' and replaces the
// scores of the job's items (`in_job`) by the merged ones (the same on every rank).
absl::Status GatherItemScores(const std::vector<TaskExample>& examples,
                              const std::vector<bool>& mine, const std::vector<bool>& in_job,
                              const TaskScoreOptions& options, TaskScore* score) {
  const TaskScoreOptions::Shard& shard = options.shard;
  mesa::v1::TaskPartial partial;
  partial.set_items(static_cast<int64_t>(examples.size()));
  for (size_t i = 0; i < examples.size(); ++i) {
    if (mine[i]) {
      mesa::v1::TaskItemRecord& r = *partial.add_records();
      r = ItemRecordOf(static_cast<int64_t>(i), examples[i], score->items[i]);
      if (options.gather_text) r.set_text(score->greedy_text[i]);
    }
  }
  absl::StatusOr<std::vector<std::string>> gathered = shard.gather(partial.SerializeAsString());
  if (!gathered.ok()) return gathered.status();
  std::vector<mesa::v1::TaskPartial> partials(gathered->size());
  for (size_t r = 0; r < gathered->size(); ++r) {
    if (!partials[r].ParseFromString((*gathered)[r])) {
      return absl::DataLossError(absl::StrCat("rank ", r, "'s task item records do not parse"));
    }
  }
  absl::StatusOr<std::vector<mesa::v1::TaskItemRecord>> merged =
      spec::MergeItemRecords(static_cast<int64_t>(examples.size()), partials, &in_job);
  if (!merged.ok()) return merged.status();
  for (size_t i = 0; i < examples.size(); ++i) {
    if (!in_job[i]) continue;
    const ItemScore item = ItemScoreOf((*merged)[i]);
    score->items[i] = item;
    if (options.gather_text) score->greedy_text[i] = (*merged)[i].text();
    score->loglikelihood[i].clear();
    for (const RequestScore& q : item.requests) score->loglikelihood[i].push_back(q.loglikelihood);
    const TaskForm form = examples[i].form;
    if ((form == TaskForm::kCloze || form == TaskForm::kTarget) && !item.requests.empty()) {
      score->greedy_match[i] = item.requests[0].greedy;
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
  if (options.demonstrations == nullptr &&
      options.num_fewshot >= static_cast<int>(examples.size())) {
    return absl::InvalidArgumentError(absl::StrCat("num_fewshot: ", options.num_fewshot,
                                                   " needs more than that many examples (",
                                                   examples.size(), " in the file)"));
  }
  if (options.demonstrations != nullptr &&
      options.num_fewshot > static_cast<int>(options.demonstrations->size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_fewshot: ", options.num_fewshot, " needs that many demonstrations (",
                     options.demonstrations->size(), " in fewshot_path)"));
  }
  if (options.max_length < 0 || options.max_length > seq_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_length: ", options.max_length, " is outside 0..seq_len (", seq_len, ")"));
  }
  const int max_length = options.max_length == 0 ? seq_len : options.max_length;
  if (options.num_fewshot > 0) {
    for (const TaskExample& e : examples) {
      if (e.form == TaskForm::kNeedle) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", e.line, ": generated needle items take no few-shot examples (num_fewshot 0)"));
      }
    }
  }
  const bool exact_match =
      options.metrics.empty() || std::find(options.metrics.begin(), options.metrics.end(),
                                           "exact_match") != options.metrics.end();
  const bool sharded = options.shard.count > 1;
  if (sharded && (options.shard.rank < 0 || options.shard.rank >= options.shard.count ||
                  !options.shard.gather)) {
    return absl::InternalError(absl::StrCat("task shard ", options.shard.rank, " of ",
                                            options.shard.count, " without a gather"));
  }
  const bool job_sharded = options.job_shard.count > 1;
  if (job_sharded &&
      (options.job_shard.index < 0 || options.job_shard.index >= options.job_shard.count)) {
    return absl::InvalidArgumentError(absl::StrCat("eval.shard: index ", options.job_shard.index,
                                                   " is outside 0..count-1 (count ",
                                                   options.job_shard.count, ")"));
  }
  const int32_t bos = tokenizer.bos_id();
  std::vector<Request> requests;
  TaskScore score;
  score.examples = static_cast<int64_t>(examples.size());
  score.items.resize(examples.size());
  score.loglikelihood.resize(examples.size());
  score.greedy_match.assign(examples.size(), false);
  score.greedy_text.assign(examples.size(), std::string());
  // Every rank lays out every item's rows: their lengths give the items' costs (how they are
  // dealt) and the longest row (the scoring net's shape), the same on every rank.
  std::vector<int64_t> costs(examples.size(), 0);
  std::vector<std::vector<Request>> rows_of(examples.size());
  std::vector<std::string> prefixes(examples.size());
  int longest = 1;
  for (size_t i = 0; i < examples.size(); ++i) {
    const TaskExample& e = examples[i];
    score.multiple_choice += e.multiple_choice();
    absl::StatusOr<std::string> drawn = FewshotPrefix(examples, static_cast<int>(i), options);
    if (!drawn.ok()) return drawn.status();
    prefixes[i] = *std::move(drawn);
    const std::string& prefix = prefixes[i];
    ItemScore& item = score.items[i];
    std::vector<Request> rows;
    for (int c = 0; c < e.num_requests(); ++c) {
      const EncodedPair pair =
          EncodePair(tokenizer, prefix + e.RequestContext(c), e.RequestContinuation(c));
      absl::StatusOr<ScoredRow> row =
          LayOutRow(pair, bos, options.add_bos, max_length, options.truncation);
      if (!row.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", e.line, ": request ", c, ": ", row.status().message()));
      }
      item.boundary_merge = item.boundary_merge || pair.boundary_merge;
      item.truncated = item.truncated || row->truncated;
      item.skipped = item.skipped || row->skipped;
      const bool has_bos = options.add_bos || pair.context.empty();  // as LayOutRow decides
      costs[i] += static_cast<int64_t>(row->sequence.size());
      rows.push_back(
          {static_cast<int>(i), c, std::move(row->sequence), row->first_target, has_bos});
    }
    if ((sharded || job_sharded) &&
        (e.form == TaskForm::kGeneration || e.form == TaskForm::kNeedle)) {
      costs[i] = static_cast<int64_t>(tokenizer.Encode(prefix + e.context).size()) +
                 (e.max_new_tokens > 0 ? e.max_new_tokens : options.max_new_tokens);
    }
    if (item.skipped) continue;  // a continuation alone exceeds the window
    item.requests.assign(rows.size(), RequestScore{});
    score.loglikelihood[i].assign(rows.size(), 0.0);
    for (const Request& r : rows) {
      longest = std::max(longest, static_cast<int>(r.sequence.size()) - 1);
    }
    rows_of[i] = std::move(rows);
  }
  // The net the rows run in: the caller's (batch x seq_len), or one planned for every rank's rows.
  MesaNet* scorer = &net;
  int rows_per_forward = batch, row_len = seq_len;
  if (options.net_for_rows && longest > 1) {
    absl::StatusOr<TaskScoreOptions::ScoringNet> planned = options.net_for_rows(longest);
    if (!planned.ok()) return planned.status();
    if (planned->net != nullptr) {
      if (planned->seq_len < longest || planned->batch < 1) {
        return absl::InternalError(absl::StrCat("a scoring net of ", planned->batch, " x ",
                                                planned->seq_len, " for rows of ", longest));
      }
      scorer = planned->net;
      rows_per_forward = planned->batch;
      row_len = planned->seq_len;
    }
  }
  // Context reuse: items whose rows share their context are packed into waves (shared_context.h);
  // a wave is one unit, every other item a unit of its own. Job shards and ranks share units, so
  // what a unit computes does not depend on how they are spread.
  // CG steps per item (models with Mesa layers): with fixed steps every scored token takes
  // max_steps; with a tolerance the scoring forwards count them per token, so rows are scored
  // whole (a shared context's steps would not be any one item's).
  const int cg_layers = scorer->config().MesaLayers();
  const bool measure_cg = cg_layers > 0 && options.solve.tolerance > 0;
  std::vector<SharedContextItem> shared;
  // The net waves run in: options.net_for_waves' (more rows of a shorter window, the rows run in
  // pieces), else the rows' own.
  MesaNet* wave_net = scorer;
  int wave_rows = rows_per_forward, wave_chunk = row_len;
  const auto shares_context = [&](size_t i) {
    return examples[i].multiple_choice() && rows_of[i].size() >= 2;
  };
  bool any_shared = false;
  for (size_t i = 0; i < examples.size() && !any_shared; ++i) any_shared = shares_context(i);
  if (options.reuse_context && !measure_cg && any_shared && options.net_for_waves) {
    absl::StatusOr<TaskScoreOptions::ScoringNet> planned = options.net_for_waves();
    if (!planned.ok()) return planned.status();
    if (planned->net != nullptr) {
      wave_net = planned->net;
      wave_rows = planned->batch;
      wave_chunk = planned->seq_len;
    }
  }
  if (options.reuse_context && !measure_cg && wave_rows >= 3) {
    for (size_t i = 0; i < examples.size(); ++i) {
      if (!shares_context(i) || rows_of[i].size() + 1 > static_cast<size_t>(wave_rows)) {
        continue;
      }
      SharedContextItem item;
      item.example = static_cast<int>(i);
      std::vector<int> first_targets;
      for (const Request& r : rows_of[i]) {
        item.rows.push_back(&r.sequence);
        first_targets.push_back(r.first_target);
      }
      item.first_target = SharedPrefixLength(item.rows, first_targets);
      if (item.first_target > 0) shared.push_back(std::move(item));
    }
  }
  const std::vector<std::vector<int>> waves = PackWaves(shared, wave_rows - 1);
  std::vector<std::vector<int>> units;  // examples per unit
  std::vector<int> wave_of_unit;        // -1: a plain item
  std::vector<bool> in_wave(examples.size(), false);
  for (size_t w = 0; w < waves.size(); ++w) {
    units.emplace_back();
    wave_of_unit.push_back(static_cast<int>(w));
    for (int k : waves[w]) {
      units.back().push_back(shared[k].example);
      in_wave[shared[k].example] = true;
    }
  }
  for (size_t i = 0; i < examples.size(); ++i) {
    if (in_wave[i]) continue;
    units.push_back({static_cast<int>(i)});
    wave_of_unit.push_back(-1);
  }
  std::vector<int64_t> unit_costs(units.size(), 0);
  for (size_t u = 0; u < units.size(); ++u) {
    for (int i : units[u]) unit_costs[u] += costs[i];
  }
  // The job's units (all, or its eval.shard's), dealt over its ranks.
  const UnitShare share = ShareUnits(unit_costs, options.job_shard.index, options.job_shard.count,
                                     options.shard.rank, options.shard.count);
  std::vector<bool> in_job(examples.size(), false), mine(examples.size(), false);
  std::vector<int> my_waves;
  for (size_t u = 0; u < units.size(); ++u) {
    for (int i : units[u]) {
      in_job[i] = share.in_job[u];
      mine[i] = share.mine[u];
    }
    if (share.mine[u] && wave_of_unit[u] >= 0) my_waves.push_back(wave_of_unit[u]);
  }
  for (size_t i = 0; i < examples.size(); ++i) {
    if (!mine[i] || in_wave[i]) continue;
    for (Request& r : rows_of[i]) requests.push_back(std::move(r));
  }
  if (!my_waves.empty()) {
    absl::StatusOr<std::unique_ptr<DecodeState>> state =
        wave_net->NewDecodeState(WaveStateSize(wave_rows - 1));
    if (!state.ok()) return state.status();
    std::vector<std::vector<RequestScore>> wave_scores;
    for (int w : my_waves) {
      if (absl::Status s = ScoreWave(*wave_net, **state, shared, waves[w], options.solve, bos,
                                     exact_match, wave_chunk, &wave_scores);
          !s.ok()) {
        return s;
      }
      score.reused_contexts += static_cast<int64_t>(waves[w].size());
      for (size_t k = 0; k < waves[w].size(); ++k) {
        const int i = shared[waves[w][k]].example;
        for (size_t c = 0; c < wave_scores[k].size(); ++c) {
          score.items[i].requests[c] = wave_scores[k][c];
          score.loglikelihood[i][c] = wave_scores[k][c].loglikelihood;
        }
        // Fixed steps (a tolerance scores rows whole): counted as for whole rows.
        for (const std::vector<int32_t>* row : shared[waves[w][k]].rows) {
          if (cg_layers == 0) break;
          AddFixedPrefillSteps(static_cast<int64_t>(row->size()) - 1, options.solve,
                               score.items[i]);
        }
      }
    }
  }
  // Rows of `rows_per_forward` requests; unused rows and the tail of each row are BOS (never
  // scored).
  std::vector<int32_t> tokens, targets, greedy, token_cg_steps;
  std::vector<float> losses, greedy_logprobs;
  if (measure_cg && !requests.empty()) {
    if (absl::Status s = scorer->KeepTokenCgSteps(true); !s.ok()) return s;
  }
  for (size_t first = 0; first < requests.size(); first += rows_per_forward) {
    const size_t rows = std::min<size_t>(rows_per_forward, requests.size() - first);
    tokens.assign(int64_t{rows_per_forward} * row_len, bos);
    targets.assign(int64_t{rows_per_forward} * row_len, bos);
    for (size_t r = 0; r < rows; ++r) {
      const std::vector<int32_t>& s = requests[first + r].sequence;
      for (size_t t = 0; t + 1 < s.size(); ++t) {
        tokens[r * row_len + t] = s[t];
        targets[r * row_len + t] = s[t + 1];
      }
    }
    auto stats = scorer->Forward(tokens.data(), targets.data(), rows_per_forward, options.solve);
    if (!stats.ok()) return stats.status();
    if (!stats->finite) return absl::InternalError("non-finite loss while scoring a task");
    scorer->CopyLossesToHost(&losses);
    if (measure_cg) scorer->CopyTokenCgStepsToHost(&token_cg_steps);
    // The argmax over the vocabulary: for cloze items, exact_match of choices, and targets that
    // no generator decodes.
    auto wants_greedy = [&](const Request& q) {
      switch (examples[q.example].form) {
        case TaskForm::kCloze:
          return true;
        case TaskForm::kMultipleChoice:
          return exact_match;
        case TaskForm::kTarget:
          return options.generator == nullptr;
        default:
          return false;
      }
    };
    const bool argmax =
        std::any_of(requests.begin() + first, requests.begin() + first + rows, wants_greedy);
    if (argmax) scorer->GreedyFromLogits(&greedy, &greedy_logprobs);
    for (size_t r = 0; r < rows; ++r) {
      const Request& q = requests[first + r];
      RequestScore& out = score.items[q.example].requests[q.choice];
      double nll = 0;
      bool match = argmax;
      for (size_t t = q.first_target; t + 1 < q.sequence.size(); ++t) {
        nll += losses[r * row_len + t];
        match = match && greedy[r * row_len + t] == q.sequence[t + 1];
      }
      out.loglikelihood = -nll;
      out.tokens = static_cast<int64_t>(q.sequence.size()) - 1 - q.first_target;
      if (cg_layers > 0) {
        // Every input of the row: [layers, rows, row_len, heads], 0 in layers without a solve.
        ItemScore& item = score.items[q.example];
        const int64_t inputs = static_cast<int64_t>(q.sequence.size()) - 1;
        if (!measure_cg) {
          AddFixedPrefillSteps(inputs, options.solve, item);
        } else {
          const int64_t heads = scorer->config().n_heads;
          int64_t sum = 0;
          for (int l = 0; l < scorer->config().n_layers; ++l) {
            const int32_t* at =
                token_cg_steps.data() + ((int64_t{l} * rows_per_forward + r) * row_len) * heads;
            for (int64_t k = 0; k < inputs * heads; ++k) sum += at[k];
          }
          item.cg_steps_prefill +=
              static_cast<double>(sum) / static_cast<double>(cg_layers * heads);
          item.cg_tokens_prefill += inputs;
        }
      }
      out.greedy = match && wants_greedy(q);
      score.loglikelihood[q.example][q.choice] = -nll;
      if (examples[q.example].form == TaskForm::kCloze ||
          examples[q.example].form == TaskForm::kTarget) {
        score.greedy_match[q.example] = out.greedy;
      }
    }
  }
  if (measure_cg && !requests.empty()) {
    if (absl::Status s = scorer->KeepTokenCgSteps(false); !s.ok()) return s;
  }
  if (options.generator != nullptr) {
    if (absl::Status s = DecodeTargets(examples, requests, tokenizer, batch, options, &score);
        !s.ok()) {
      return s;
    }
    for (size_t i = 0; i < examples.size(); ++i) {
      if (examples[i].form == TaskForm::kTarget && !score.items[i].skipped && mine[i]) {
        score.items[i].requests[0].greedy = score.greedy_match[i];
      }
    }
  }
  if (absl::Status s = DecodeGenerations(examples, prefixes, mine, tokenizer, batch, max_length,
                                         options, &score);
      !s.ok()) {
    return s;
  }
  if (sharded) {
    if (absl::Status s = GatherItemScores(examples, mine, in_job, options, &score); !s.ok()) {
      return s;
    }
  }
  score.in_job = in_job;
  if (job_sharded) {
    // The merge of the job's shards computes the metrics (spec::MergeShardResults).
    score.metrics.set_items(static_cast<int64_t>(examples.size()));
    score.partial.set_items(static_cast<int64_t>(examples.size()));
    for (size_t i = 0; i < examples.size(); ++i) {
      if (in_job[i]) {
        *score.partial.add_records() =
            ItemRecordOf(static_cast<int64_t>(i), examples[i], score.items[i]);
      }
    }
    return score;
  }
  absl::StatusOr<mesa::v1::TaskResult> metrics =
      ComputeTaskMetrics(examples, score.items, options.metrics);
  if (!metrics.ok()) return metrics.status();
  score.metrics = *std::move(metrics);
  score.accuracy = score.metrics.accuracy();
  score.accuracy_norm = score.metrics.accuracy_norm();
  return score;
}

}  // namespace mesa::model
