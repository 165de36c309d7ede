// mesa-import: a Hugging Face directory of FLA's MesaNetForCausalLM (FLA's checkpoints and our
// exports) as a checkpoint root for checkpoint.init_from (docs/export.md). Exit codes as
// mesa-train's: 2 for the user's mistakes, 1 for the machine's.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "base/cli_flags.h"
#include "model/export/hf_import.h"
#include "model/trainer/trainer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, hf_dir, "", "The Hugging Face directory (config.json, model.safetensors).");
ABSL_FLAG(std::string, out, "", "The checkpoint root to create (must not exist or be empty).");

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(argc, argv, "mesa-import --hf_dir HF_DIR --out CHECKPOINT_ROOT");
  absl::StatusOr<mesa::model::ImportResult> result = mesa::model::ImportFromHf(
      {.hf_dir = absl::GetFlag(FLAGS_hf_dir), .out = absl::GetFlag(FLAGS_out)});
  if (!result.ok()) {
    std::fprintf(stderr, "mesa-import: %s\n", std::string(result.status().message()).c_str());
    return result.status().code() == absl::StatusCode::kAlreadyExists
               ? static_cast<int>(mesa::v1::TRAINER_EXIT_USER_ERROR)
               : static_cast<int>(mesa::model::ExitCodeFor(result.status()));
  }
  // The model section a fine-tuning job needs for checkpoint.init_from to accept it.
  const nlohmann::json out = {{"checkpoint", result->checkpoint_dir},
                              {"model", nlohmann::json::parse(result->model_json)},
                              {"tokenizer_recorded", result->has_tokenizer}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
