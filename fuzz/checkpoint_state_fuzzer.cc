// libFuzzer target: a checkpoint's state.json reader (model/checkpoint/checkpoint.h). The input is
// written as state.json of a step directory beside a valid model.safetensors; loading must succeed
// or give an error, never crash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "model/checkpoint/checkpoint.h"

namespace {

mesa::model::ModelConfig TinyConfig() {
  mesa::model::ModelConfig config;
  config.vocab_size = 16;
  config.d_model = 8;
  config.n_layers = 1;
  config.n_heads = 1;
  config.head_dim = 4;
  config.mlp_hidden = 8;
  config.bos_token = 15;
  return config;
}

struct Fixture {
  Fixture() : layout(config) {
    const std::string root = "/tmp/mesa-fuzz-checkpoint-" + std::to_string(getpid());
    std::filesystem::remove_all(root);
    std::vector<float> params(layout.total(), 0.5f);
    mesa::model::TrainState state;
    step_dir = *mesa::model::SaveCheckpoint(root, config, layout, params.data(), nullptr, nullptr,
                                            state, /*keep_last=*/1);
  }
  mesa::model::ModelConfig config = TinyConfig();
  mesa::model::ParamLayout layout;
  std::string step_dir;
};

Fixture* fixture = nullptr;

}  // namespace

// Builds the step directory once. MESA_FUZZ_SEED_OUT=<file> copies its pristine state.json there
// (how fuzz/corpus/checkpoint_state/valid.json was made).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fixture = new Fixture();
  if (const char* out = std::getenv("MESA_FUZZ_SEED_OUT"); out != nullptr) {
    std::filesystem::copy_file(fixture->step_dir + "/state.json", out,
                               std::filesystem::copy_options::overwrite_existing);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FILE* file = fopen((fixture->step_dir + "/state.json").c_str(), "wb");
  if (file == nullptr) return 0;
  fwrite(data, 1, size, file);
  fclose(file);
  (void)mesa::model::LoadCheckpoint(fixture->step_dir, fixture->config, fixture->layout,
                                    /*want_optimizer=*/true);
  return 0;
}
