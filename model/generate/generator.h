// Text generation from a MesaNet: prefill of each prompt by the chunkwise forward (in pieces of at
// most `chunk` tokens), then recurrent decoding one token per step for every prompt at once, from
// the per-layer states (model/net/mesanet.h DecodeState); memory does not grow with the context.
// Each prompt is preceded by BOS, as every document is in the training data.
#ifndef MESANET_MODEL_GENERATE_GENERATOR_H_
#define MESANET_MODEL_GENERATE_GENERATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/backend/backend.h"
#include "model/config/job_config.h"
#include "model/inference/sampler.h"
#include "model/mixers/mixer_layer.h"
#include "model/net/mesanet.h"
#include "model/tokenizer/tokenizer.h"

namespace mesa::model {

struct GenerateOptions {
  int max_new_tokens = 64;
  SamplingOptions sampling;  // seed: prompt i draws with seed + i
  // Generation of a prompt ends when its completion ends with one of these (text); the stop
  // sequence is not part of the completion.
  std::vector<std::string> stop;
  // Mesa layers: fixed steps (tolerance 0) or tolerance ε with at most max_steps.
  MesaSolve solve;
};

struct Completion {
  std::string prompt;
  std::string completion;        // text of `tokens` (stop sequence removed)
  std::vector<int32_t> tokens;   // generated tokens, up to and excluding a stop sequence
  std::vector<double> logprobs;  // log p(token) under the model's unmodified distribution
  std::vector<double> cg_steps;  // per token: mean CG steps over the Mesa layers and heads
  // Per token, the CG steps of each Mesa layer's heads: cg_layers x cg_heads values (layer-major).
  std::vector<std::vector<int32_t>> cg_steps_by_layer_head;
  int cg_layers = 0, cg_heads = 0;
  double cg_steps_mean = 0;  // over the tokens
  // "length" (max_new_tokens), "stop" (a stop string; not in the completion) or "eos" (the model
  // chose BOS, which ends a document; not in the completion).
  std::string finish_reason;
};

class Generator {
 public:
  // `params` (host, the model's layout) are copied to the backend. Decodes up to `max_rows`
  // prompts at once; prompts are prefilled in pieces of at most `chunk` tokens.
  static absl::StatusOr<std::unique_ptr<Generator>> Create(const ModelConfig& config,
                                                           const std::vector<float>& params,
                                                           Backend* backend, int max_rows,
                                                           int chunk);

  // Completions of `prompts` (text, encoded with `tokenizer`). InvalidArgument for an empty
  // prompt, one over the limits of spec/generation.h, bad sampling options or stop sequences.
  absl::StatusOr<std::vector<Completion>> Generate(const std::vector<std::string>& prompts,
                                                   const Tokenizer& tokenizer,
                                                   const GenerateOptions& options);
  // The same from token ids (each prompt without the leading BOS, which is added).
  absl::StatusOr<std::vector<Completion>> GenerateTokens(
      const std::vector<std::vector<int32_t>>& prompts, const Tokenizer* tokenizer,
      const GenerateOptions& options);

  // Teacher forcing after arbitrarily long prompts: per pair, the summed log-probability of
  // `continuations[i]` after `prompts[i]` (token ids; the prompt without the leading BOS, which
  // is added) and whether every continuation token was the argmax (greedy). The prompt is
  // prefilled in pieces without logits, then its last token and the continuation run in one
  // piece with them (a continuation holds at most the window's tokens less one).
  struct ContinuationScore {
    double loglikelihood = 0;
    bool greedy = false;
  };
  absl::StatusOr<std::vector<ContinuationScore>> ScoreContinuations(
      const std::vector<std::vector<int32_t>>& prompts,
      const std::vector<std::vector<int32_t>>& continuations, const MesaSolve& solve);

  MesaNet& net() { return *net_; }

 private:
  Generator(std::unique_ptr<MesaNet> net, int max_rows, int chunk)
      : net_(std::move(net)), max_rows_(max_rows), chunk_(chunk) {}

  // Row `row` of `state` advanced over BOS and every token of `prompt` but the last, in pieces of
  // at most chunk_ tokens, without logits (the last token is read by the next step).
  absl::Status Prefill(const std::vector<int32_t>& prompt, int row, const MesaSolve& solve,
                       DecodeState& state);

  std::unique_ptr<MesaNet> net_;
  const int max_rows_, chunk_;
};

// The CG steps of row `row` of an Advance's rows, per layer that solves and head (layer-major):
// what the operator counted, or `fixed_steps` where it did not (fixed steps on CUDA).
std::vector<int32_t> RowHeadCgSteps(const ModelConfig& config, const ForwardStats& stats, int row,
                                    int fixed_steps);

// The mean CG steps per token over the layers that solve (0 when none does).
double SolvingLayersMean(const ModelConfig& config, const std::vector<double>& layer_steps);

}  // namespace mesa::model

#endif  // MESANET_MODEL_GENERATE_GENERATOR_H_
