// mesa-export: a checkpoint as a Hugging Face directory for FLA's MesaNetForCausalLM
// (docs/export.md). Exit codes as mesa-train's: 2 for the user's mistakes (a model FLA cannot
// express, an existing output directory, tokenizer files of another hash), 1 for the machine's.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"
#include "base/cli_flags.h"
#include "model/checkpoint/checkpoint.h"
#include "model/export/hf_export.h"
#include "model/trainer/trainer.h"

ABSL_FLAG(std::string, checkpoint, "", "Checkpoint root or step directory.");
ABSL_FLAG(std::string, out, "", "The Hugging Face directory to create (must not exist).");
ABSL_FLAG(std::string, dtype, "fp32",
          "Weights: fp32 (exact) or bf16; float32 and bfloat16 are the same.");
ABSL_FLAG(std::vector<std::string>, tokenizer_files, {},
          "The tokenizer's files when not at the paths the checkpoint recorded: tokenizer.json "
          "(hf) or encoder.json,vocab.bpe (gpt2); their SHA-256 must be the recorded ones.");

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(argc, argv,
                               "mesa-export --checkpoint DIR --out HF_DIR [--dtype fp32|bf16] "
                               "[--tokenizer_files FILES]");
  absl::StatusOr<mesa::model::ExportResult> result =
      mesa::model::ExportToHf({.checkpoint = absl::GetFlag(FLAGS_checkpoint),
                               .out_dir = absl::GetFlag(FLAGS_out),
                               .dtype = absl::GetFlag(FLAGS_dtype),
                               .tokenizer_files = absl::GetFlag(FLAGS_tokenizer_files)});
  if (!result.ok()) {
    std::fprintf(stderr, "mesa-export: %s\n", std::string(result.status().message()).c_str());
    return result.status().code() == absl::StatusCode::kAlreadyExists
               ? static_cast<int>(mesa::v1::TRAINER_EXIT_USER_ERROR)
               : static_cast<int>(mesa::model::ExitCodeFor(result.status()));
  }
  mesa::model::WarnSkippedCheckpoints("mesa-export", result->skipped_checkpoints);
  std::printf("%s -> %s: %s\n", result->checkpoint_dir.c_str(), absl::GetFlag(FLAGS_out).c_str(),
              absl::StrJoin(result->files, ", ").c_str());
  return 0;
}
