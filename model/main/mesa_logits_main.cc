// mesa-logits: the logits of a checkpoint's model on given token sequences, for comparing an
// export with FLA (scripts/fla/compare_logits.py, docs/export.md).
//   mesa-logits --checkpoint DIR --tokens FILE --out logits.safetensors [--device cpu|cuda|auto]
//               [--precision fp32|bf16|auto]
// FILE holds one sequence per line (token ids separated by spaces, all of one length); the output
// holds "logits", float32 [sequences, length, vocab_size] (before any soft-cap). Exit codes as
// mesa-train's.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/cli_flags.h"
#include "base/file_util.h"
#include "formats/safetensors.h"
#include "model/backend/choice/backend_choice.h"
#include "model/checkpoint/checkpoint.h"
#include "model/export/hf_export.h"
#include "model/net/mesanet.h"
#include "model/trainer/session.h"
#include "model/trainer/trainer.h"
#include "spec/precision.h"

ABSL_FLAG(std::string, checkpoint, "", "Checkpoint root or step directory.");
ABSL_FLAG(std::string, tokens, "", "Token ids, one sequence per line.");
ABSL_FLAG(std::string, out, "", "Output safetensors file.");
ABSL_FLAG(std::string, device, "cpu", "auto, cpu or cuda.");
ABSL_FLAG(std::string, precision, "fp32",
          "Activations: fp32, bf16 (CUDA only) or auto (bf16 on CUDA, fp32 on the CPU), as "
          "training.precision.");

namespace {

using mesa::model::ModelConfig;

absl::StatusOr<std::vector<std::vector<int32_t>>> ReadTokens(const std::string& path, int vocab) {
  // A token file is small text; a FIFO or device is refused (base::ReadFile).
  absl::StatusOr<std::string> text = mesa::base::ReadFile(path, size_t{1} << 30);
  if (!text.ok()) return text.status();
  std::vector<std::vector<int32_t>> rows;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++number;
    std::vector<int32_t> row;
    // Ids are separated by any ASCII whitespace: files written on Windows (CRLF) or with tabs read
    // the same as with spaces.
    for (absl::string_view item :
         absl::StrSplit(line, absl::ByAnyChar(" \t\r\v\f"), absl::SkipWhitespace())) {
      int32_t id;
      if (!absl::SimpleAtoi(item, &id) || id < 0 || id >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", number, ": not a token id below ", vocab));
      }
      row.push_back(id);
    }
    if (row.empty()) continue;
    if (!rows.empty() && row.size() != rows[0].size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": another length"));
    }
    rows.push_back(std::move(row));
  }
  if (rows.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no tokens"));
  return rows;
}

// Before any work: the flags that must be given are, and --out can be written where it says.
absl::Status CheckPaths() {
  for (const auto& [name, value] :
       {std::pair<const char*, std::string>{"--checkpoint", absl::GetFlag(FLAGS_checkpoint)},
        {"--tokens", absl::GetFlag(FLAGS_tokens)},
        {"--out", absl::GetFlag(FLAGS_out)}}) {
    if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(name, " is required"));
  }
  const std::filesystem::path out = absl::GetFlag(FLAGS_out);
  std::error_code error;
  if (std::filesystem::is_directory(out, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--out ", out.string(), " is a directory; give a file name"));
  }
  const std::filesystem::path parent = out.has_parent_path() ? out.parent_path() : ".";
  if (!std::filesystem::is_directory(parent, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--out: the directory ", parent.string(), " does not exist"));
  }
  if (access(parent.c_str(), W_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--out: the directory ", parent.string(), " is not writable"));
  }
  return absl::OkStatus();
}

absl::Status Run() {
  if (absl::Status s = CheckPaths(); !s.ok()) return s;
  // Then: a precision or device name the trainer would not take fails before anything is read.
  absl::StatusOr<mesa::spec::Precision> precision =
      mesa::spec::ParsePrecision(absl::GetFlag(FLAGS_precision));
  if (!precision.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--precision: ", precision.status().message()));
  }
  mesa::model::CudaBackendOptions cuda;
  cuda.activations = mesa::model::ActivationsFor(*precision);
  cuda.gemm_math = mesa::model::GemmMath::kFp32;
  absl::StatusOr<mesa::model::BackendChoice> choice =
      mesa::model::ChooseBackend(absl::GetFlag(FLAGS_device), cuda, {});
  if (!choice.ok()) return choice.status();
  if (!choice->on_gpu && *precision == mesa::spec::Precision::kBf16) {
    // The CPU backend has fp32 activations only: bf16 there would silently be fp32.
    return absl::InvalidArgumentError(absl::StrCat(
        "--precision bf16 needs a CUDA device, but --device ", absl::GetFlag(FLAGS_device),
        " runs on the CPU; use --precision auto or fp32"));
  }
  std::unique_ptr<mesa::model::Backend> backend = std::move(choice->backend);
  absl::StatusOr<mesa::model::OpenedCheckpoint> opened =
      mesa::model::OpenCheckpoint(absl::GetFlag(FLAGS_checkpoint), mesa::model::TrainedModel);
  if (!opened.ok()) return opened.status();
  mesa::model::WarnSkippedCheckpoints("mesa-logits", opened->data.skipped);
  // The function the model was trained as: with document resets when the run had them.
  opened->model.reset_at_bos = opened->data.state.reset_at_bos.value_or(false);
  const ModelConfig& model = opened->model;
  const mesa::model::CheckpointData* data = &opened->data;
  absl::StatusOr<std::vector<std::vector<int32_t>>> rows =
      ReadTokens(absl::GetFlag(FLAGS_tokens), model.vocab_size);
  if (!rows.ok()) return rows.status();
  const int batch = static_cast<int>(rows->size()), t = static_cast<int>((*rows)[0].size());
  absl::StatusOr<std::unique_ptr<mesa::model::MesaNet>> net =
      mesa::model::MesaNet::Create(model, backend.get(), batch, t);
  if (!net.ok()) return net.status();
  (*net)->SetParamsFromHost(data->params.data());
  std::vector<int32_t> tokens, targets;
  for (const std::vector<int32_t>& row : *rows) {
    tokens.insert(tokens.end(), row.begin(), row.end());
    targets.insert(targets.end(), row.begin() + 1, row.end());
    targets.push_back(model.bos_token);  // no loss on the last position
  }
  absl::StatusOr<mesa::model::ForwardStats> stats =
      (*net)->Forward(tokens.data(), targets.data(), batch, {model.cg_steps, 0.0f});
  if (!stats.ok()) return stats.status();
  std::vector<float> logits;
  (*net)->CopyLogitsToHost(&logits);
  const mesa::safetensors::TensorView view =
      mesa::safetensors::F32View("logits", {batch, t, model.vocab_size}, logits);
  return mesa::safetensors::WriteFile(absl::GetFlag(FLAGS_out), {&view, 1},
                                      {{"checkpoint", opened->description.dir},
                                       {"device", choice->device()},
                                       {"cg_steps", absl::StrCat(model.cg_steps)}});
}

}  // namespace

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(
      argc, argv,
      "mesa-logits --checkpoint DIR --tokens FILE --out logits.safetensors [--device "
      "cpu|cuda|auto]\n"
      "  The logits of a checkpoint's model on given token sequences (interop checks).");
  if (absl::Status s = Run(); !s.ok()) {
    std::fprintf(stderr, "mesa-logits: %s\n", std::string(s.message()).c_str());
    return static_cast<int>(mesa::model::ExitCodeFor(s));
  }
  return 0;
}
