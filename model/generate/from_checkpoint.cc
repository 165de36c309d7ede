#include "model/generate/from_checkpoint.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/backend/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/checkpoint/checkpoint.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "model/tokenizer/gpt2_tokenizer.h"
#include "nlohmann/json.hpp"

namespace mesa::model {
namespace {

using json = nlohmann::json;

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFor(const std::string& spec_json,
                                                        const ModelConfig& model,
                                                        const CheckpointGenerateOptions& options) {
  const json spec = json::parse(spec_json, nullptr, /*allow_exceptions=*/false);
  std::string name = "byte";
  if (spec.is_object() && spec.contains("data") && spec["data"].is_object() &&
      spec["data"].value("tokenizer", std::string()) == "gpt2") {
    name = "gpt2";
  }
  std::unique_ptr<Tokenizer> tokenizer;
  if (name == "gpt2") {
    if (options.encoder_json.empty() || options.vocab_bpe.empty()) {
      return absl::InvalidArgumentError(
          "the checkpoint was trained with the gpt2 tokenizer: pass --encoder_json and "
          "--vocab_bpe");
    }
    absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> gpt2 =
        Gpt2Tokenizer::Load(options.encoder_json, options.vocab_bpe);
    if (!gpt2.ok()) return gpt2.status();
    tokenizer = *std::move(gpt2);
  } else {
    tokenizer = std::make_unique<ByteTokenizer>();
  }
  if (tokenizer->vocab_size() > model.vocab_size || tokenizer->bos_id() != model.bos_token) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", name, " tokenizer (", tokenizer->vocab_size(), " tokens, BOS ",
                     tokenizer->bos_id(), ") does not fit the checkpoint's model (vocab_size ",
                     model.vocab_size, ", BOS ", model.bos_token, ")"));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Backend>> BackendFor(const CheckpointGenerateOptions& options,
                                                    std::string* device) {
  if (options.device != "auto" && options.device != "cpu" && options.device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("device \"", options.device, "\": expected auto, cpu or cuda"));
  }
  if (options.device != "cpu") {
    CudaBackendOptions cuda_options;
    // Fixed-step decoding reports its step count without reading it back (one sync per layer).
    cuda_options.exact_cg_steps = false;
    absl::StatusOr<std::unique_ptr<Backend>> cuda = CreateCudaBackend(cuda_options);
    if (cuda.ok()) {
      *device = "cuda";
      return cuda;
    }
    if (options.device == "cuda") {
      return absl::UnavailableError(
          absl::StrCat("device \"cuda\" requested: ", cuda.status().message()));
    }
  }
  CpuBackendOptions cpu;
  cpu.num_threads = options.threads;
  *device = "cpu";
  return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(cpu));
}

}  // namespace

absl::StatusOr<CheckpointGenerateResult> GenerateFromCheckpoint(
    const CheckpointGenerateOptions& options) {
  if (options.checkpoint.empty()) return absl::InvalidArgumentError("no checkpoint given");
  absl::StatusOr<CheckpointDescription> described = DescribeCheckpoint(options.checkpoint);
  if (!described.ok()) return described.status();
  const ModelConfig& model = described->model;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      TokenizerFor(described->spec_json, model, options);
  if (!tokenizer.ok()) return tokenizer.status();
  absl::StatusOr<CheckpointData> data =
      LoadCheckpoint(described->dir, model, ParamLayout(model), /*want_optimizer=*/false);
  if (!data.ok()) return data.status();

  CheckpointGenerateResult result;
  result.checkpoint_dir = described->dir;
  result.step = described->step;
  absl::StatusOr<std::unique_ptr<Backend>> backend = BackendFor(options, &result.device);
  if (!backend.ok()) return backend.status();
  const int rows = std::max<int>(1, static_cast<int>(options.prompts.size()));
  absl::StatusOr<std::unique_ptr<Generator>> generator =
      Generator::Create(model, data->params, backend->get(), rows, options.chunk);
  if (!generator.ok()) return generator.status();
  GenerateOptions generate = options.generate;
  generate.solve = {options.cg_max_steps, options.cg_tol};
  absl::StatusOr<std::vector<Completion>> completions =
      (*generator)->Generate(options.prompts, **tokenizer, generate);
  if (!completions.ok()) return completions.status();
  result.completions = *std::move(completions);
  return result;
}

std::string CompletionJson(const Completion& c) {
  json out = {{"prompt", c.prompt},
              {"completion", c.completion},
              {"tokens", c.tokens},
              {"logprobs", c.logprobs},
              {"cg_steps_mean", c.cg_steps_mean},
              {"cg_steps", c.cg_steps},
              {"finish_reason", c.finish_reason}};
  // Completions are bytes; text that is not valid UTF-8 is escaped rather than refused.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace mesa::model
