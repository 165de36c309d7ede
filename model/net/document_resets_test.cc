// Packed documents (data.reset_at_bos, docs/math.md §8.6): a row of several documents, each
// starting with BOS, is scored at every position as if its document were evaluated alone, by every
// kind of mixer at once; without resets the later documents see the earlier ones.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"
#include "model/layers/document_starts.h"
#include "model/net/mesanet.h"
#include "model/net/test_models.h"

namespace mesa::model {
namespace {

constexpr int kVocab = 259, kBos = 256;
// Lengths of the packed documents: the second crosses the CPU kernels' 64-token chunk boundary.
const std::vector<int> kDocLengths = {30, 41, 29};

struct Packed {
  std::vector<int32_t> tokens, targets;  // [T]: BOS + text of each document, then the next token
  std::vector<int> starts;               // each document's first position
};

Packed MakePacked(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> text(0, kBos - 1);
  Packed p;
  for (int length : kDocLengths) {
    p.starts.push_back(static_cast<int>(p.tokens.size()));
    p.tokens.push_back(kBos);
    for (int i = 1; i < length; ++i) p.tokens.push_back(text(rng));
  }
  // The target after the last token is the BOS of the document that would follow.
  p.targets.assign(p.tokens.begin() + 1, p.tokens.end());
  p.targets.push_back(kBos);
  return p;
}

ModelConfig HybridConfig(bool reset_at_bos) {
  ModelConfig config =
      SmallTestConfig({MixerKind::kMesa, MixerKind::kDeltaNet, MixerKind::kGatedDeltaNet,
                       MixerKind::kSwa, MixerKind::kAttention, MixerKind::kHawk,
                       MixerKind::kMamba2Mesa, MixerKind::kMlstm, MixerKind::kMamba2},
                      kVocab, kBos);
  config.attention_window = 6;
  config.reset_at_bos = reset_at_bos;
  return config;
}

// Per-position losses of `tokens` / `targets` as one row.
std::vector<float> RowLosses(const ModelConfig& config, CpuBackend& backend,
                             const std::vector<float>& params, const std::vector<int32_t>& tokens,
                             const std::vector<int32_t>& targets) {
  const int t = static_cast<int>(tokens.size());
  auto net = MesaNet::Create(config, &backend, 1, t);
  EXPECT_TRUE(net.ok()) << net.status();
  if (!net.ok()) return {};
  (*net)->SetParamsFromHost(params.data());
  auto stats = (*net)->Forward(tokens.data(), targets.data(), 1, {config.cg_steps, 0.0f});
  EXPECT_TRUE(stats.ok() && stats->finite) << stats.status();
  std::vector<float> losses;
  (*net)->CopyLossesToHost(&losses);
  return losses;
}

TEST(DocumentResetsTest, DocumentStartsFollowBosTokens) {
  const std::vector<int32_t> tokens = {5,           kBos, 7,    8, kBos, kBos, 9,
                                       /*row 2*/ 1, 2,    kBos, 3, 4,    6,    0};
  std::vector<int32_t> starts(tokens.size());
  DocumentStarts(tokens.data(), 2, 7, kBos, starts.data());
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 1, 1, 1, 4, 5, 5, 0, 0, 2, 2, 2, 2, 2}));
}

TEST(DocumentResetsTest, PackedRowEqualsEachDocumentAlone) {
  CpuBackendOptions options;
  options.num_threads = 1;
  CpuBackend backend(options);
  const ModelConfig config = HybridConfig(/*reset_at_bos=*/true);
  const std::vector<float> params = NoisyTestParams(config, &backend, 5, 9, 0.05f);
  const Packed packed = MakePacked(17);
  const std::vector<float> together =
      RowLosses(config, backend, params, packed.tokens, packed.targets);
  ASSERT_EQ(together.size(), packed.tokens.size());
  double worst = 0;
  for (size_t d = 0; d < kDocLengths.size(); ++d) {
    const auto begin = packed.starts[d], end = begin + kDocLengths[d];
    const std::vector<float> alone = RowLosses(
        config, backend, params, {packed.tokens.begin() + begin, packed.tokens.begin() + end},
        {packed.targets.begin() + begin, packed.targets.begin() + end});
    ASSERT_EQ(alone.size(), static_cast<size_t>(kDocLengths[d]));
    for (int i = 0; i < kDocLengths[d]; ++i) {
      EXPECT_NEAR(together[begin + i], alone[i], 1e-5 * std::max(1.0f, std::abs(alone[i])))
          << "document " << d << " position " << i;
      worst = std::max(worst, static_cast<double>(std::abs(together[begin + i] - alone[i])));
    }
  }
  // The prediction of the next document's BOS is excluded from the loss, as before resets.
  EXPECT_EQ(together[packed.starts[1] - 1], 0.0f);
  RecordProperty("max_abs_loss_difference", std::to_string(worst));
}

TEST(DocumentResetsTest, WithoutResetsLaterDocumentsSeeEarlierOnes) {
  CpuBackendOptions options;
  options.num_threads = 1;
  CpuBackend backend(options);
  const ModelConfig with = HybridConfig(true), without = HybridConfig(false);
  const std::vector<float> params = NoisyTestParams(with, &backend, 5, 9, 0.05f);
  const Packed packed = MakePacked(17);
  const std::vector<float> reset = RowLosses(with, backend, params, packed.tokens, packed.targets);
  const std::vector<float> plain =
      RowLosses(without, backend, params, packed.tokens, packed.targets);
  ASSERT_EQ(reset.size(), plain.size());
  // The first document is the same either way; each later one differs.
  for (int i = 0; i < packed.starts[1]; ++i) EXPECT_NEAR(reset[i], plain[i], 1e-5) << i;
  for (size_t d = 1; d < kDocLengths.size(); ++d) {
    double most = 0;
    for (int i = 0; i < kDocLengths[d]; ++i) {
      const int at = packed.starts[d] + i;
      most = std::max(most, static_cast<double>(std::abs(reset[at] - plain[at])));
    }
    EXPECT_GT(most, 1e-2) << "document " << d;
  }
}

// Decoding needs no resets: a prompt is one document, and its logits are those of the training
// forward of the same tokens with resets on.
TEST(DocumentResetsTest, DecodingOneDocumentMatchesTheForwardWithResets) {
  CpuBackendOptions options;
  options.num_threads = 1;
  CpuBackend backend(options);
  const ModelConfig config = HybridConfig(true);
  const std::vector<float> params = NoisyTestParams(config, &backend, 5, 9, 0.05f);
  const Packed packed = MakePacked(23);
  const int t = kDocLengths[0];
  auto net = MesaNet::Create(config, &backend, 1, t);
  ASSERT_TRUE(net.ok()) << net.status();
  (*net)->SetParamsFromHost(params.data());
  ASSERT_TRUE((*net)
                  ->Forward(packed.tokens.data(), packed.targets.data(), 1, {config.cg_steps, 0.0f})
                  .ok());
  std::vector<float> forward, decoded;
  (*net)->CopyLogitsToHost(&forward);
  auto state = (*net)->NewDecodeState(1);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(
      (*net)->Advance(packed.tokens.data(), 1, t, {config.cg_steps, 0.0f}, **state, 0).ok());
  (*net)->CopyLogitsToHost(&decoded);
  ASSERT_EQ(forward.size(), decoded.size());
  for (size_t i = 0; i < forward.size(); ++i) ASSERT_NEAR(forward[i], decoded[i], 1e-4) << i;
}

}  // namespace
}  // namespace mesa::model
