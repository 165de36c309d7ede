// mesa-export: a checkpoint as a Hugging Face directory, FLA's MesaNetForCausalLM where that is
// exact, else a remote-code model with its own modeling code (docs/export.md). Exit codes as
// mesa-train's: 2 for the user's mistakes (--format=fla for a model FLA cannot express, an
// existing output directory, tokenizer files of another hash), 1 for the machine's.
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
ABSL_FLAG(std::string, format, "auto",
          "fla (FLA's MesaNetForCausalLM; refused where it would compute another function), "
          "remote_code (transformers with trust_remote_code: every model, exactly) or auto "
          "(fla where exact, else remote_code).");
ABSL_FLAG(std::string, max_shard_size, "5GB",
          "Largest weights file, as transformers' save_pretrained takes it: bytes, or a number "
          "with KB, MB or GB (powers of 1000); bigger models are sharded with "
          "model.safetensors.index.json.");
ABSL_FLAG(std::vector<std::string>, eval_results, {},
          "EVAL jobs' results for the model card: files of `mesactl get JOB --json`.");

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(argc, argv,
                               "mesa-export --checkpoint DIR --out HF_DIR [--format auto|fla|"
                               "remote_code] [--dtype fp32|bf16] [--tokenizer_files FILES] "
                               "[--max_shard_size 5GB] [--eval_results FILES]");
  const absl::StatusOr<int64_t> shard_bytes =
      mesa::model::ParseShardSize(absl::GetFlag(FLAGS_max_shard_size));
  if (!shard_bytes.ok()) {
    std::fprintf(stderr, "mesa-export: --max_shard_size: %s\n",
                 std::string(shard_bytes.status().message()).c_str());
    return static_cast<int>(mesa::v1::TRAINER_EXIT_USER_ERROR);
  }
  absl::StatusOr<mesa::model::ExportResult> result =
      mesa::model::ExportToHf({.checkpoint = absl::GetFlag(FLAGS_checkpoint),
                               .out_dir = absl::GetFlag(FLAGS_out),
                               .dtype = absl::GetFlag(FLAGS_dtype),
                               .tokenizer_files = absl::GetFlag(FLAGS_tokenizer_files),
                               .format = absl::GetFlag(FLAGS_format),
                               .max_shard_bytes = *shard_bytes,
                               .eval_results = absl::GetFlag(FLAGS_eval_results)});
  if (!result.ok()) {
    std::fprintf(stderr, "mesa-export: %s\n", std::string(result.status().message()).c_str());
    return result.status().code() == absl::StatusCode::kAlreadyExists
               ? static_cast<int>(mesa::v1::TRAINER_EXIT_USER_ERROR)
               : static_cast<int>(mesa::model::ExitCodeFor(result.status()));
  }
  mesa::model::WarnSkippedCheckpoints("mesa-export", result->skipped_checkpoints);
  std::printf("%s -> %s (%s%s): %s\n", result->checkpoint_dir.c_str(),
              absl::GetFlag(FLAGS_out).c_str(), result->format.c_str(),
              result->format_reason.empty()
                  ? ""
                  : absl::StrCat("; FLA's format would differ: ", result->format_reason).c_str(),
              absl::StrJoin(result->files, ", ").c_str());
  return 0;
}
