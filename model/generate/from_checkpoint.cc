#include "model/generate/from_checkpoint.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/backend/choice/backend_choice.h"
#include "model/backend/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/checkpoint/checkpoint.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "model/tokenizer/gpt2_tokenizer.h"
#include "model/tokenizer/hf_tokenizer.h"
#include "nlohmann/json.hpp"

namespace mesa::model {
namespace {

using json = nlohmann::json;

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> CheckpointTokenizerFor(
    const CheckpointDescription& described, const CheckpointGenerateOptions& options) {
  absl::StatusOr<spec::TokenizerRecord> record =
      spec::CheckpointTokenizer(described.tokenizer_json, described.spec_json, described.dir);
  if (!record.ok()) return record.status();
  const ModelConfig& model = described.model;
  std::vector<std::string> given;
  if (record->kind == "gpt2") {
    if (options.encoder_json.empty() != options.vocab_bpe.empty()) {
      return absl::InvalidArgumentError("--encoder_json and --vocab_bpe go together");
    }
    if (!options.encoder_json.empty()) given = {options.encoder_json, options.vocab_bpe};
  } else if (record->kind == "hf" && !options.tokenizer_file.empty()) {
    given = {options.tokenizer_file};
  }
  absl::StatusOr<std::vector<std::string>> files = spec::TokenizerFiles(*record, given);
  if (!files.ok()) return files.status();
  std::unique_ptr<Tokenizer> tokenizer;
  if (record->kind == "byte") {
    tokenizer = std::make_unique<ByteTokenizer>();
  } else if (record->kind == "gpt2") {
    if (files->size() != 2) {
      return absl::InvalidArgumentError(
          "the checkpoint was trained with the gpt2 tokenizer: pass --encoder_json and "
          "--vocab_bpe");
    }
    absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> gpt2 =
        Gpt2Tokenizer::Load((*files)[0], (*files)[1]);
    if (!gpt2.ok()) return gpt2.status();
    tokenizer = *std::move(gpt2);
  } else if (record->kind == "hf") {
    absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> hf = LoadHfTokenizer(files->at(0));
    if (!hf.ok()) return hf.status();
    tokenizer = *std::move(hf);
  } else {
    // SentencePiece stays out of protobuf-linked binaries (docs/formats.md, Tokenizers).
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint was trained with the ", record->kind,
        " tokenizer, which mesa-generate cannot load; use a Hugging Face tokenizer.json (hf)"));
  }
  if (tokenizer->vocab_size() > model.vocab_size || tokenizer->bos_id() != model.bos_token) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", record->kind, " tokenizer (", tokenizer->vocab_size(), " tokens, BOS ",
                     tokenizer->bos_id(), ") does not fit the checkpoint's model (vocab_size ",
                     model.vocab_size, ", BOS ", model.bos_token, ")"));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Backend>> DecodingBackend(const std::string& device_name,
                                                         int threads, std::string* device) {
  CudaBackendOptions cuda_options;
  // Fixed-step decoding reports its step count without reading it back (one sync per layer).
  cuda_options.exact_cg_steps = false;
  CpuBackendOptions cpu;
  cpu.num_threads = threads;
  // Device "cuda" without a usable GPU: UNAVAILABLE, "device \"cuda\" requested: ..."; an unknown
  // name: INVALID_ARGUMENT (spec/device.h).
  absl::StatusOr<BackendChoice> choice = ChooseBackend(device_name, cuda_options, cpu);
  if (!choice.ok()) return choice.status();
  *device = choice->device();
  return std::move(choice->backend);
}

absl::StatusOr<CheckpointGenerateResult> GenerateFromCheckpoint(
    const CheckpointGenerateOptions& options) {
  if (options.checkpoint.empty()) return absl::InvalidArgumentError("no checkpoint given");
  absl::StatusOr<OpenedCheckpoint> opened = OpenCheckpoint(options.checkpoint);
  if (!opened.ok()) return opened.status();
  const CheckpointDescription* described = &opened->description;
  const ModelConfig& model = opened->model;
  const CheckpointData* data = &opened->data;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      CheckpointTokenizerFor(*described, options);
  if (!tokenizer.ok()) return tokenizer.status();

  CheckpointGenerateResult result;
  result.checkpoint_dir = described->dir;
  result.step = described->step;
  result.skipped_checkpoints = data->skipped;
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      DecodingBackend(options.device, options.threads, &result.device);
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

namespace {

// Per token, per Mesa layer, the CG steps of each head: [tokens][layers][heads].
json ByLayerHead(const Completion& c) {
  json tokens = json::array();
  for (const std::vector<int32_t>& flat : c.cg_steps_by_layer_head) {
    json layers = json::array();
    for (int l = 0; l < c.cg_layers; ++l) {
      json heads = json::array();
      for (int h = 0; h < c.cg_heads; ++h) {
        const size_t i = static_cast<size_t>(l) * c.cg_heads + h;
        heads.push_back(i < flat.size() ? flat[i] : 0);
      }
      layers.push_back(std::move(heads));
    }
    tokens.push_back(std::move(layers));
  }
  return tokens;
}

}  // namespace

std::string CompletionJson(const Completion& c) {
  json out = {{"prompt", c.prompt},
              {"completion", c.completion},
              {"tokens", c.tokens},
              {"logprobs", c.logprobs},
              {"cg_steps_mean", c.cg_steps_mean},
              {"cg_steps", c.cg_steps},
              {"cg_steps_by_layer_head", ByLayerHead(c)},
              {"finish_reason", c.finish_reason}};
  // Completions are bytes; text that is not valid UTF-8 is escaped rather than refused.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace mesa::model
