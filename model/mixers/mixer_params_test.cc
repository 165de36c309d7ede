// Each mixer's parameter declaration against its tensor list in spec/mixers.h, which the job
// validator's and the trainer's parameter counts read: the same names, order and sizes.
#include "model/mixers/mixer_params.h"

#include <string>

#include "gtest/gtest.h"
#include "model/config/job_config.h"
#include "spec/mixers.h"

namespace mesa::model {
namespace {

TEST(MixerParamsTest, EveryMixerDeclaresExactlyItsSpecTensorList) {
  ModelConfig config;
  config.d_model = 24;
  config.n_heads = 3;
  config.head_dim = 4;
  config.conv_width = 5;
  config.rnn_width = 30;  // Hawk: 3 gate blocks of 10
  const spec::ModelShape shape{.vocab_size = 11,
                               .d_model = config.d_model,
                               .n_heads = config.n_heads,
                               .head_dim = config.head_dim,
                               .conv_width = config.conv_width,
                               .rnn_width = config.rnn_width};
  for (const spec::MixerTraits& mixer : spec::kMixers) {
    SCOPED_TRACE(mixer.name);
    ParamBuilder builder;
    const MixerWeights weights = DeclareMixerParams(mixer.kind, config, "model.layers.7.", builder);
    const std::vector<ParamTensor>& declared = builder.tensors();
    ASSERT_EQ(declared.size(), mixer.tensors.size());
    int64_t values = 0;
    for (size_t i = 0; i < declared.size(); ++i) {
      EXPECT_EQ(declared[i].name, std::string("model.layers.7.") + mixer.tensors[i].name);
      ASSERT_EQ(declared[i].shape.size(), mixer.tensors[i].shape.size()) << declared[i].name;
      for (size_t d = 0; d < declared[i].shape.size(); ++d) {
        EXPECT_EQ(declared[i].shape[d], spec::DimSize(mixer.tensors[i].shape[d], shape))
            << declared[i].name << " dimension " << d;
      }
      values += declared[i].size;
    }
    EXPECT_EQ(values, spec::MixerParameterCount(mixer, shape));
    EXPECT_EQ(builder.num_values(), values);
    // Every declared tensor's offset is in one of the mixer's slots.
    int filled = 0;
    for (int slot = 0; slot < MixerWeights::kSlots; ++slot) {
      if (weights[slot] < 0) continue;
      ++filled;
      bool found = false;
      for (const ParamTensor& t : declared) found |= t.offset == weights[slot];
      EXPECT_TRUE(found) << "slot " << slot;
    }
    EXPECT_EQ(filled, static_cast<int>(declared.size()));
  }
}

}  // namespace
}  // namespace mesa::model
