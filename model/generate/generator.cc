#include "model/generate/generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/inference/stop_sequences.h"
#include "spec/generation.h"
#include "spec/mixers.h"

namespace mesa::model {

double SolvingLayersMean(const ModelConfig& config, const std::vector<double>& layer_steps) {
  double sum = 0;
  int solving = 0;
  for (size_t l = 0; l < layer_steps.size(); ++l) {
    if (!spec::TraitsOf(config.LayerMixer(static_cast<int>(l))).solves_with_cg) continue;
    sum += layer_steps[l];
    ++solving;
  }
  return solving > 0 ? sum / solving : 0.0;
}

std::vector<int32_t> RowHeadCgSteps(const ModelConfig& config, const ForwardStats& stats, int row,
                                    int fixed_steps) {
  std::vector<int32_t> out;
  const int heads = config.n_heads;
  for (size_t l = 0; l < stats.layer_head_cg_steps.size(); ++l) {
    if (!spec::TraitsOf(config.LayerMixer(static_cast<int>(l))).solves_with_cg) continue;
    const std::vector<int32_t>& counts = stats.layer_head_cg_steps[l];
    for (int h = 0; h < heads; ++h) {
      const size_t i = static_cast<size_t>(row) * heads + h;
      out.push_back(i < counts.size() ? counts[i] : fixed_steps);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Generator>> Generator::Create(const ModelConfig& config,
                                                             const std::vector<float>& params,
                                                             Backend* backend, int max_rows,
                                                             int chunk) {
  if (max_rows < 1 || chunk < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("generator rows ", max_rows, " and chunk ", chunk, " must be >= 1"));
  }
  absl::StatusOr<std::unique_ptr<MesaNet>> net = MesaNet::Create(config, backend, max_rows, chunk);
  if (!net.ok()) return net.status();
  if (static_cast<int64_t>(params.size()) != (*net)->num_params()) {
    return absl::InvalidArgumentError(absl::StrCat("parameters: ", params.size(), " values for a ",
                                                   (*net)->num_params(), "-parameter model"));
  }
  (*net)->SetParamsFromHost(params.data());
  return std::unique_ptr<Generator>(new Generator(*std::move(net), max_rows, chunk));
}

absl::StatusOr<std::vector<Completion>> Generator::Generate(const std::vector<std::string>& prompts,
                                                            const Tokenizer& tokenizer,
                                                            const GenerateOptions& options) {
  std::vector<std::vector<int32_t>> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (static_cast<int64_t>(prompts[i].size()) > spec::kMaxPromptBytes) {
      return absl::InvalidArgumentError(absl::StrCat("prompt ", i, " has ", prompts[i].size(),
                                                     " bytes, over the limit of ",
                                                     spec::kMaxPromptBytes));
    }
    ids.push_back(tokenizer.Encode(prompts[i]));
  }
  absl::StatusOr<std::vector<Completion>> out = GenerateTokens(ids, &tokenizer, options);
  if (!out.ok()) return out;
  for (size_t i = 0; i < prompts.size(); ++i) (*out)[i].prompt = prompts[i];
  return out;
}

namespace {

absl::Status ValidateRequest(const std::vector<std::vector<int32_t>>& prompts, int max_rows,
                             const Tokenizer* tokenizer, const GenerateOptions& options,
                             int vocab) {
  if (prompts.empty()) return absl::InvalidArgumentError("no prompts");
  if (static_cast<int>(prompts.size()) > std::min(max_rows, spec::kMaxPrompts)) {
    return absl::InvalidArgumentError(absl::StrCat(prompts.size(), " prompts, over the limit of ",
                                                   std::min(max_rows, spec::kMaxPrompts)));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("prompt ", i, " is empty"));
    }
    if (static_cast<int64_t>(prompts[i].size()) > spec::kMaxPromptTokens) {
      return absl::InvalidArgumentError(absl::StrCat("prompt ", i, " has ", prompts[i].size(),
                                                     " tokens, over the limit of ",
                                                     spec::kMaxPromptTokens));
    }
    for (int32_t t : prompts[i]) {
      if (t < 0 || t >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("prompt ", i, ": token ", t, " outside the vocabulary [0, ", vocab, ")"));
      }
    }
  }
  if (options.max_new_tokens < 1 || options.max_new_tokens > spec::kMaxNewTokens) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens ", options.max_new_tokens,
                                                   " outside [1, ", spec::kMaxNewTokens, "]"));
  }
  if (static_cast<int>(options.stop.size()) > spec::kMaxStopSequences) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.stop.size(), " stop sequences, over the limit of ", spec::kMaxStopSequences));
  }
  for (const std::string& s : options.stop) {
    if (s.empty() || static_cast<int>(s.size()) > spec::kMaxStopSequenceBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("a stop sequence must have 1 to ", spec::kMaxStopSequenceBytes, " bytes"));
    }
  }
  if (!options.stop.empty() && tokenizer == nullptr) {
    return absl::InvalidArgumentError("stop sequences need a tokenizer");
  }
  if (options.solve.max_steps < 0 || !(options.solve.tolerance >= 0)) {
    return absl::InvalidArgumentError("cg_max_steps must be >= 0 and cg_tol >= 0");
  }
  return ValidateSamplingOptions(options.sampling);
}

// Generation state of one prompt.
struct Row {
  Completion out;
  Sampler sampler;
  std::optional<StopMatcher> stops;
  std::string text;  // of every generated token so far
  int32_t next = 0;  // the token the next step reads
  bool done = false;
};

}  // namespace

absl::Status Generator::Prefill(const std::vector<int32_t>& prompt, int row, const MesaSolve& solve,
                                DecodeState& state) {
  std::vector<int32_t> seq = {net_->config().bos_token};
  seq.insert(seq.end(), prompt.begin(), prompt.end() - 1);
  for (size_t begin = 0; begin < seq.size(); begin += chunk_) {
    const int n = static_cast<int>(std::min<size_t>(chunk_, seq.size() - begin));
    absl::StatusOr<ForwardStats> s =
        net_->Advance(seq.data() + begin, 1, n, solve, state, row, /*logits=*/false);
    if (!s.ok()) return s.status();
    if (!s->finite) return absl::InternalError("non-finite values in the prefill");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Generator::ContinuationScore>> Generator::ScoreContinuations(
    const std::vector<std::vector<int32_t>>& prompts,
    const std::vector<std::vector<int32_t>>& continuations, const MesaSolve& solve) {
  if (prompts.size() != continuations.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prompts.size(), " prompts for ", continuations.size(), " continuations"));
  }
  // Row 0 scores, row 1 stays clear and resets row 0 before each pair.
  absl::StatusOr<std::unique_ptr<DecodeState>> state = net_->NewDecodeState(2);
  if (!state.ok()) return state.status();
  std::vector<ContinuationScore> out;
  std::vector<float> losses, logprobs;
  std::vector<int32_t> argmax;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& prompt = prompts[i];
    const std::vector<int32_t>& continuation = continuations[i];
    if (prompt.empty() || continuation.empty() ||
        static_cast<int>(continuation.size()) + 1 > chunk_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pair ", i, ": a prompt of ", prompt.size(), " tokens and a continuation of ",
          continuation.size(), " (1 to ", chunk_ - 1, ")"));
    }
    if (absl::Status s = net_->CopyDecodeRows(**state, {1}, 0); !s.ok()) return s;
    if (absl::Status s = Prefill(prompt, 0, solve, **state); !s.ok()) return s;
    // The prompt's last token and the continuation but its last: their logits predict the
    // continuation.
    std::vector<int32_t> tail = {prompt.back()};
    tail.insert(tail.end(), continuation.begin(), continuation.end() - 1);
    const int n = static_cast<int>(tail.size());
    absl::StatusOr<ForwardStats> s = net_->Advance(tail.data(), 1, n, solve, **state, 0);
    if (!s.ok()) return s.status();
    if (!s->finite) return absl::InternalError("non-finite values in the continuation");
    if (absl::Status l = net_->LossesOfLastAdvance(continuation.data(), &losses); !l.ok()) return l;
    net_->GreedyFromLogits(&argmax, &logprobs);
    ContinuationScore score{0, true};
    for (int k = 0; k < n; ++k) {
      score.loglikelihood -= losses[k];
      score.greedy = score.greedy && argmax[k] == continuation[k];
    }
    out.push_back(score);
  }
  return out;
}

absl::StatusOr<std::vector<Completion>> Generator::GenerateTokens(
    const std::vector<std::vector<int32_t>>& prompts, const Tokenizer* tokenizer,
    const GenerateOptions& options) {
  const ModelConfig& config = net_->config();
  const int vocab = config.vocab_size;
  if (absl::Status s = ValidateRequest(prompts, max_rows_, tokenizer, options, vocab); !s.ok()) {
    return s;
  }
  const int rows = static_cast<int>(prompts.size());
  absl::StatusOr<std::unique_ptr<DecodeState>> state = net_->NewDecodeState(rows);
  if (!state.ok()) return state.status();

  std::vector<Row> row_state;
  for (int r = 0; r < rows; ++r) {
    SamplingOptions sampling = options.sampling;
    sampling.seed += static_cast<uint64_t>(r);
    absl::StatusOr<Sampler> sampler = Sampler::Create(sampling);
    if (!sampler.ok()) return sampler.status();
    Row row{.sampler = *std::move(sampler)};
    if (!options.stop.empty()) {
      absl::StatusOr<StopMatcher> m = StopMatcher::Create({.strings = options.stop});
      if (!m.ok()) return m.status();
      row.stops = *std::move(m);
    }
    row_state.push_back(std::move(row));
  }

  // Prefill: BOS and every prompt token but the last, in pieces of at most chunk_ tokens; the
  // last one is read by the first decoding step, so every generated token's distribution comes
  // from one step whose CG steps are its own.
  for (int r = 0; r < rows; ++r) {
    if (absl::Status s = Prefill(prompts[r], r, options.solve, **state); !s.ok()) return s;
    row_state[r].next = prompts[r].back();
  }

  // Decoding: all rows step together (finished rows read a token whose result is ignored); each
  // row's CG steps are the mean of its own heads' counts (tolerance mode: every (sequence, head)
  // stops on its own residual).
  std::vector<float> logits;
  std::vector<int32_t> next(rows);
  const int heads = config.n_heads;
  // Appends the chosen token to `row`, or ends it (BOS, a stop string, max_new_tokens).
  auto take = [&](Row& row, SampledToken chosen, double cg,
                  std::vector<int32_t> by_head) -> absl::Status {
    if (chosen.token == config.bos_token) {  // the document ends: so does the completion
      row.out.finish_reason = "eos";
      row.done = true;
      return absl::OkStatus();
    }
    row.out.tokens.push_back(chosen.token);
    row.out.logprobs.push_back(chosen.logprob);
    row.out.cg_steps.push_back(cg);
    row.out.cg_steps_by_layer_head.push_back(std::move(by_head));
    row.next = chosen.token;
    if (row.stops.has_value()) {
      const std::string piece = tokenizer->Decode({chosen.token});
      row.text += piece;
      if (std::optional<StopMatch> m = row.stops->Append(chosen.token, piece); m.has_value()) {
        row.out.tokens.resize(m->tokens_before);
        row.out.logprobs.resize(m->tokens_before);
        row.out.cg_steps.resize(m->tokens_before);
        row.out.cg_steps_by_layer_head.resize(m->tokens_before);
        row.text.resize(m->text_bytes_before);
        row.out.finish_reason = "stop";
        row.done = true;
        return absl::OkStatus();
      }
    }
    if (static_cast<int>(row.out.tokens.size()) >= options.max_new_tokens) {
      row.out.finish_reason = "length";
      row.done = true;
    }
    return absl::OkStatus();
  };
  // Greedy choices need no logits on the host (the sampler's greedy rule: the largest soft-capped
  // logit, the lowest id among ties); sampling reads them back.
  const bool greedy = options.sampling.temperature == 0 || options.sampling.top_k == 1;
  std::vector<int32_t> greedy_tokens;
  std::vector<float> greedy_logprobs;
  // One decoding step of every row; finished rows read a token whose result is ignored.
  auto step = [&]() -> absl::Status {
    for (int r = 0; r < rows; ++r) next[r] = row_state[r].next;
    absl::StatusOr<ForwardStats> s = net_->Advance(next.data(), rows, 1, options.solve, **state, 0);
    if (!s.ok()) return s.status();
    if (greedy) {
      net_->GreedyFromLogits(&greedy_tokens, &greedy_logprobs);
    } else {
      net_->CopyLogitsToHost(&logits);
      SoftCapLogits(config.logit_softcap, logits);
    }
    for (int r = 0; r < rows; ++r) {
      Row& row = row_state[r];
      if (row.done) continue;
      SampledToken chosen;
      if (greedy) {
        chosen = {greedy_tokens[r], greedy_logprobs[r]};
      } else {
        absl::StatusOr<SampledToken> sampled =
            row.sampler.Next(std::span<const float>(logits.data() + int64_t{r} * vocab, vocab));
        if (!sampled.ok()) return sampled.status();
        chosen = *sampled;
      }
      std::vector<int32_t> by_head = RowHeadCgSteps(config, *s, r, options.solve.max_steps);
      const double cg = by_head.empty() ? 0.0
                                        : std::accumulate(by_head.begin(), by_head.end(), 0.0) /
                                              static_cast<double>(by_head.size());
      if (absl::Status st = take(row, chosen, cg, std::move(by_head)); !st.ok()) return st;
    }
    return absl::OkStatus();
  };
  while (std::any_of(row_state.begin(), row_state.end(), [](const Row& r) { return !r.done; })) {
    if (absl::Status st = step(); !st.ok()) return st;
  }

  std::vector<Completion> out;
  for (Row& row : row_state) {
    Completion& c = row.out;
    c.cg_layers = config.MesaLayers();
    c.cg_heads = c.cg_layers > 0 ? heads : 0;
    if (tokenizer != nullptr) {
      c.completion = row.stops.has_value() ? row.text : tokenizer->Decode(c.tokens);
    }
    if (!c.cg_steps.empty()) {
      c.cg_steps_mean = std::accumulate(c.cg_steps.begin(), c.cg_steps.end(), 0.0) /
                        static_cast<double>(c.cg_steps.size());
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace mesa::model
