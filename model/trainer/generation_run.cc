#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/utf8.h"
#include "kernels/common/limits.h"
#include "model/generate/from_checkpoint.h"
#include "model/trainer/trainer.h"
#include "spec/generation.h"

namespace mesa::model {

mesa::v1::Completion CompletionResult(const Completion& c) {
  mesa::v1::Completion p;
  p.set_prompt(c.prompt);
  std::string text = base::SanitizeUtf8(c.completion);
  text.resize(base::Utf8PrefixLength(text, spec::kMaxCompletionBytes));
  p.set_completion(std::move(text));
  p.mutable_tokens()->Add(c.tokens.begin(), c.tokens.end());
  p.mutable_logprobs()->Add(c.logprobs.begin(), c.logprobs.end());
  p.set_cg_steps_mean(c.cg_steps_mean);
  p.mutable_cg_steps()->Add(c.cg_steps.begin(), c.cg_steps.end());
  p.set_finish_reason(c.finish_reason);
  p.set_cg_layers(c.cg_layers);
  p.set_cg_heads(c.cg_heads);
  for (const std::vector<int32_t>& token : c.cg_steps_by_layer_head) {
    p.mutable_cg_steps_by_layer_head()->Add(token.begin(), token.end());
  }
  return p;
}

absl::StatusOr<RunResult> RunGeneration(const JobConfig& config, const TrainerOptions& options,
                                        EventSink& events) {
  const mesa::v1::GenerateConfig& g = config.spec.generate();
  CheckpointGenerateOptions run;
  run.checkpoint = g.checkpoint();
  run.prompts.assign(g.prompts().begin(), g.prompts().end());
  run.generate.max_new_tokens =
      g.max_new_tokens() > 0 ? g.max_new_tokens() : spec::kDefaultMaxNewTokens;
  run.generate.sampling = {.temperature = g.has_temperature() ? g.temperature() : 1.0f,
                           .top_k = g.top_k(),
                           .top_p = g.has_top_p() ? g.top_p() : 1.0f,
                           .seed = g.seed()};
  run.generate.stop.assign(g.stop().begin(), g.stop().end());
  run.cg_tol = g.cg_tol();
  run.cg_max_steps = g.cg_max_steps() > 0 ? g.cg_max_steps() : kernels::kDefaultCgSteps;
  run.device = !options.device.empty() ? options.device : config.training.device;
  if (run.device.empty()) run.device = "auto";
  run.threads = options.num_threads;
  run.encoder_json = g.encoder_json();
  run.vocab_bpe = g.vocab_bpe();
  run.tokenizer_file = g.tokenizer_file();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<CheckpointGenerateResult> out = GenerateFromCheckpoint(run);
  if (!out.ok()) return out.status();
  for (const std::string& reason : out->skipped_checkpoints) {
    mesa::v1::TrainerEvent warning;
    warning.mutable_warning()->set_message("skipped a damaged checkpoint: " + reason);
    events.Emit(std::move(warning));
    events.Log("skipped a damaged checkpoint: " + reason);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  RunResult result;
  result.checkpoint_dir = out->checkpoint_dir;
  result.result.set_checkpoint_path(out->checkpoint_dir);
  result.result.set_step(out->step);
  result.result.set_seconds(seconds);
  int64_t tokens = 0;
  for (const Completion& c : out->completions) {
    *result.result.add_completions() = CompletionResult(c);
    tokens += static_cast<int64_t>(c.tokens.size());
  }
  result.result.set_tokens(tokens);
  mesa::v1::TrainerEvent event;
  *event.mutable_result() = result.result;
  events.Emit(std::move(event));
  events.Log(absl::StrFormat("generated %d tokens for %d prompt(s) from %s on %s in %.2f s", tokens,
                             out->completions.size(), out->checkpoint_dir, out->device, seconds));
  return result;
}

}  // namespace mesa::model
