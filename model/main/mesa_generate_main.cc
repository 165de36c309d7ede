// mesa-generate: text from a trained checkpoint, by prefill and constant-memory recurrent decoding
// (docs/inference.md). Exit codes as mesa-train's: 2 for the user's mistakes, 1 for the machine's.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "base/cli_flags.h"
#include "kernels/common/limits.h"
#include "model/checkpoint/checkpoint.h"
#include "model/generate/from_checkpoint.h"
#include "model/trainer/trainer.h"
#include "nlohmann/json.hpp"
#include "spec/device.h"
#include "spec/generation.h"

ABSL_FLAG(std::string, checkpoint, "", "Checkpoint root or step directory.");
ABSL_FLAG(std::string, prompt, "", "One prompt.");
ABSL_FLAG(std::string, prompts, "", "JSONL file, one {\"prompt\": TEXT} per line.");
ABSL_FLAG(int, max_new_tokens, mesa::spec::kDefaultMaxNewTokens, "Tokens to generate per prompt.");
ABSL_FLAG(float, temperature, 1.0f, "Sampling temperature; 0 = greedy.");
ABSL_FLAG(int, top_k, 0, "Keep the k most likely tokens (0 = all).");
ABSL_FLAG(float, top_p, 1.0f, "Nucleus sampling mass in (0, 1].");
ABSL_FLAG(uint64_t, seed, 0, "Seed; prompt i samples with seed + i.");
ABSL_FLAG(std::vector<std::string>, stop, {}, "Stop strings (comma-separated).");
ABSL_FLAG(float, cg_tol, 0.0f,
          "Mesa layers: stop CG when the residual is below this fraction of the first one "
          "(0 = fixed steps).");
ABSL_FLAG(int, cg_max_steps, mesa::kernels::kDefaultCgSteps,
          "Mesa layers: CG steps (fixed), or their bound with --cg_tol.");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or cuda.");
ABSL_FLAG(int, threads, 0, "CPU threads (0 = all cores).");
ABSL_FLAG(int, prefill_chunk, 256, "Prompt tokens per prefill forward.");
ABSL_FLAG(bool, json, false, "One JSON object per prompt instead of text.");
ABSL_FLAG(std::string, encoder_json, "", "GPT-2 encoder.json (gpt2-tokenized checkpoints).");
ABSL_FLAG(std::string, vocab_bpe, "", "GPT-2 vocab.bpe (gpt2-tokenized checkpoints).");
ABSL_FLAG(std::string, tokenizer_file, "",
          "tokenizer.json of hf-tokenized checkpoints (default: the path the checkpoint "
          "recorded; its SHA-256 must match).");

namespace {

absl::StatusOr<std::vector<std::string>> ReadPrompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::vector<std::string> prompts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object() || !row.contains("prompt") || !row["prompt"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", number, ": expected a JSON object with a string field \"prompt\""));
    }
    prompts.push_back(row["prompt"].get<std::string>());
    if (static_cast<int>(prompts.size()) > mesa::spec::kMaxPrompts) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": more than ", mesa::spec::kMaxPrompts, " prompts"));
    }
  }
  return prompts;
}

}  // namespace

int main(int argc, char** argv) {
  const bool prompt_given = mesa::base::FlagOnCommandLine(argc, argv, "prompt");
  mesa::base::ParseFlagsOrExit(
      argc, argv,
      "mesa-generate --checkpoint DIR (--prompt TEXT | --prompts FILE.jsonl) "
      "[--max_new_tokens N] [--temperature T] [--top_k K] [--top_p P] [--seed S] "
      "[--cg_tol EPS] [--cg_max_steps N] [--device cpu|cuda|auto] [--json]");
  auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "mesa-generate: %s\n", std::string(status.message()).c_str());
    return static_cast<int>(mesa::model::ExitCodeFor(status));
  };
  mesa::model::CheckpointGenerateOptions options;
  options.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  const std::string prompt = absl::GetFlag(FLAGS_prompt), prompts = absl::GetFlag(FLAGS_prompts);
  if (prompt_given && prompt.empty()) {
    return fail(absl::InvalidArgumentError(
        "--prompt is empty: give the text to continue (a model continues a prompt of at least one "
        "token)"));
  }
  if (!prompt.empty() == !prompts.empty()) {
    return fail(absl::InvalidArgumentError("give exactly one of --prompt and --prompts"));
  }
  if (!prompts.empty()) {
    absl::StatusOr<std::vector<std::string>> read = ReadPrompts(prompts);
    if (!read.ok()) return fail(read.status());
    options.prompts = *std::move(read);
  } else {
    options.prompts = {prompt};
  }
  options.generate.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  options.generate.sampling = {.temperature = absl::GetFlag(FLAGS_temperature),
                               .top_k = absl::GetFlag(FLAGS_top_k),
                               .top_p = absl::GetFlag(FLAGS_top_p),
                               .seed = absl::GetFlag(FLAGS_seed)};
  options.generate.stop = absl::GetFlag(FLAGS_stop);
  options.cg_tol = absl::GetFlag(FLAGS_cg_tol);
  options.cg_max_steps = absl::GetFlag(FLAGS_cg_max_steps);
  options.device = absl::GetFlag(FLAGS_device);
  // Before the checkpoint is read; the backend choice would refuse it too, without the flag's name.
  if (auto device = mesa::spec::ParseDevice(options.device); !device.ok()) {
    return fail(absl::InvalidArgumentError(absl::StrCat("--device: ", device.status().message())));
  }
  options.threads = absl::GetFlag(FLAGS_threads);
  if (absl::Status s = mesa::base::CheckThreadsFlag(options.threads); !s.ok()) return fail(s);
  options.chunk = absl::GetFlag(FLAGS_prefill_chunk);
  options.encoder_json = absl::GetFlag(FLAGS_encoder_json);
  options.vocab_bpe = absl::GetFlag(FLAGS_vocab_bpe);
  options.tokenizer_file = absl::GetFlag(FLAGS_tokenizer_file);

  absl::StatusOr<mesa::model::CheckpointGenerateResult> result =
      mesa::model::GenerateFromCheckpoint(options);
  if (!result.ok()) return fail(result.status());
  mesa::model::WarnSkippedCheckpoints("mesa-generate", result->skipped_checkpoints);
  for (const mesa::model::Completion& c : result->completions) {
    if (absl::GetFlag(FLAGS_json)) {
      std::printf("%s\n", mesa::model::CompletionJson(c).c_str());
    } else {
      std::printf("%s%s\n", c.prompt.c_str(), c.completion.c_str());
    }
  }
  if (!absl::GetFlag(FLAGS_json)) {
    std::fprintf(stderr, "mesa-generate: %s on %s, %zu prompt(s)\n", result->checkpoint_dir.c_str(),
                 result->device.c_str(), result->completions.size());
  }
  return 0;
}
