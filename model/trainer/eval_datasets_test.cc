// Evaluation jobs over several datasets (eval.datasets): a 3-dataset evaluation equals
// three single-dataset ones, a longer window than training is evaluated with its own curves, and
// tokens and positions are counted as the paper's App. J does (docs/math.md §7).
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "model/data/token_shard.h"
#include "model/trainer/trainer.h"

namespace mesa::model {
namespace {

namespace fs = std::filesystem;
constexpr uint32_t kBos = 256;

std::string Tmp(const std::string& name) { return std::string(getenv("TEST_TMPDIR")) + "/" + name; }

// Documents of 5 to 40 letters, each after a BOS; a different seed gives another set.
std::vector<uint32_t> Documents(int64_t tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> letter(0, 7), length(5, 40);
  std::vector<uint32_t> out;
  while (static_cast<int64_t>(out.size()) < tokens) {
    out.push_back(kBos);
    for (int i = length(rng); i > 0; --i) out.push_back('a' + letter(rng));
  }
  out.resize(tokens);
  return out;
}

mesa::v1::JobSpec TrainSpec() {
  mesa::v1::JobSpec spec;
  spec.set_name("datasets");
  auto* m = spec.mutable_model();
  m->set_vocab_size(257);
  m->set_d_model(32);
  m->set_n_layers(1);
  m->set_n_heads(2);
  m->set_head_dim(16);
  m->set_mixer("mesa");
  m->set_cg_steps(4);
  auto* d = spec.mutable_data();
  d->set_train_path(Tmp("ds_train.bin"));
  d->set_seq_len(32);
  d->set_batch_size(4);
  spec.mutable_optimizer()->set_lr(1e-2f);
  spec.mutable_training()->set_steps(3);
  spec.mutable_training()->set_seed(3);
  return spec;
}

class EvalDatasetsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(WriteTokenShard(Tmp("ds_train.bin"), Documents(20000, 1)).ok());
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(
          WriteTokenShard(Tmp("ds_val_" + std::to_string(i) + ".bin"), Documents(3000, 10 + i))
              .ok());
    }
    // Shard 3: documents of BOS + 31 letters, so that every 32-token window starts a document.
    std::vector<uint32_t> windows = Documents(40 * 32, 13);
    for (size_t i = 0; i < windows.size(); ++i) {
      if (i % 32 == 0)
        windows[i] = kBos;
      else if (windows[i] == kBos)
        windows[i] = 'a';
    }
    windows.push_back(kBos);
    ASSERT_TRUE(WriteTokenShard(Tmp("ds_val_3.bin"), windows).ok());
    auto config = ResolveJobConfig(TrainSpec(), ResolveOptions{});
    ASSERT_TRUE(config.ok()) << config.status();
    fs::create_directories(Tmp("ds_run"));
    EventSink sink;
    sink.set_quiet(true);
    auto trained = RunTraining(*config, Options(), sink);
    ASSERT_TRUE(trained.ok()) << trained.status();
  }

  static TrainerOptions Options() {
    TrainerOptions options;
    options.workdir = Tmp("ds_run");
    options.num_threads = 1;
    options.run_id = "job-datasets";
    return options;
  }

  // An evaluation of the trained checkpoint over `datasets` {name, shard index, seq_len}.
  static mesa::v1::EvalMetrics Eval(
      const std::vector<std::tuple<std::string, int, int>>& sets, bool internals = false,
      const mesa::v1::CgSweep* sweep = nullptr,
      const std::function<void(mesa::v1::JobSpec&)>& change = nullptr) {
    mesa::v1::JobSpec spec = TrainSpec();
    if (sweep != nullptr) *spec.mutable_eval()->mutable_cg_sweep() = *sweep;
    spec.mutable_eval()->set_internals(internals);
    if (internals) {  // a tolerance: each layer reports the steps it took to reach it
      spec.mutable_model()->set_cg_tol(1e-3f);
      spec.mutable_model()->set_cg_max_steps(30);
    }
    spec.set_type(mesa::v1::JOB_TYPE_EVAL);
    spec.clear_optimizer();
    spec.mutable_training()->set_steps(0);
    spec.mutable_eval()->set_checkpoint(Tmp("ds_run/checkpoints"));
    spec.mutable_eval()->set_per_position(true);
    spec.mutable_eval()->set_max_batches(3);
    for (const auto& [name, shard, seq_len] : sets) {
      mesa::v1::EvalDataset* d = spec.mutable_eval()->add_datasets();
      d->set_name(name);
      d->set_val_path(Tmp("ds_val_" + std::to_string(shard) + ".bin"));
      d->set_seq_len(seq_len);
    }
    if (change) change(spec);
    auto config = ResolveJobConfig(spec, ResolveOptions{});
    EXPECT_TRUE(config.ok()) << config.status();
    EventSink sink;
    sink.set_quiet(true);
    auto result = RunEvaluation(*config, Options(), sink);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->result.eval() : mesa::v1::EvalMetrics();
  }
};

TEST_F(EvalDatasetsTest, ThreeDatasetsEqualThreeSingleEvaluations) {
  const mesa::v1::EvalMetrics all = Eval({{"a", 0, 32}, {"b", 1, 32}, {"long", 2, 96}});
  ASSERT_EQ(all.datasets_size(), 3);
  double loss_sum = 0, ppl_sum = 0;
  for (int i = 0; i < 3; ++i) {
    const mesa::v1::DatasetResult& d = all.datasets(i);
    const mesa::v1::EvalMetrics one = Eval({{d.name(), i, d.seq_len()}});
    ASSERT_EQ(one.datasets_size(), 1);
    const mesa::v1::DatasetResult& alone = one.datasets(0);
    EXPECT_EQ(d.name(), alone.name());
    EXPECT_DOUBLE_EQ(d.loss(), alone.loss()) << d.name();
    EXPECT_EQ(d.tokens(), alone.tokens());
    EXPECT_EQ(d.sequences(), alone.sequences());
    ASSERT_EQ(d.nll_at_position_size(), d.seq_len());
    for (int k = 0; k < d.seq_len(); ++k) {
      EXPECT_DOUBLE_EQ(d.nll_at_position(k), alone.nll_at_position(k)) << d.name() << " " << k;
      EXPECT_EQ(d.count_at_position(k), alone.count_at_position(k));
    }
    EXPECT_NEAR(d.perplexity(), std::exp(d.loss()), 1e-9 * d.perplexity());
    loss_sum += d.loss();
    ppl_sum += d.perplexity();
  }
  EXPECT_NEAR(all.average_loss(), loss_sum / 3, 1e-12);
  EXPECT_NEAR(all.average_perplexity(), ppl_sum / 3, 1e-9);
  // The legacy fields are the first dataset's.
  EXPECT_DOUBLE_EQ(all.val_loss(), all.datasets(0).loss());
  // Different data, different losses: each set really was read.
  EXPECT_NE(all.datasets(0).loss(), all.datasets(1).loss());
}

// Windows of 96 tokens from a model trained on 32: the curve runs to position 95, and the counts
// are the paper's: every non-BOS target is scored once; a target at document position k (tokens
// since the window's last BOS) adds to NLL_k; targets before a window's first BOS are scored but
// have no position.
TEST_F(EvalDatasetsTest, LongerWindowsCountTokensAndPositionsAsThePaper) {
  constexpr int kSeqLen = 96, kBatch = 4, kBatches = 3;
  const mesa::v1::EvalMetrics m = Eval({{"long", 2, kSeqLen}});
  ASSERT_EQ(m.datasets_size(), 1);
  const mesa::v1::DatasetResult& d = m.datasets(0);
  EXPECT_EQ(d.seq_len(), kSeqLen);
  EXPECT_EQ(d.sequences(), kBatch * kBatches);
  EXPECT_TRUE(std::isfinite(d.loss()));
  // Recount from the shard: windows of kSeqLen + 1 tokens, consecutive (the loader's layout).
  const std::vector<uint32_t> tokens = Documents(3000, 12);
  int64_t scored = 0;
  std::vector<int64_t> count(kSeqLen, 0);
  for (int w = 0; w < kBatch * kBatches; ++w) {
    int64_t position = -1;
    for (int t = 0; t < kSeqLen; ++t) {
      const uint32_t input = tokens[int64_t{w} * kSeqLen + t];
      const uint32_t target = tokens[int64_t{w} * kSeqLen + t + 1];
      position = input == kBos ? 0 : position >= 0 ? position + 1 : -1;
      if (target == kBos) continue;
      ++scored;
      if (position >= 0) ++count[position];
    }
  }
  EXPECT_EQ(d.tokens(), scored);
  ASSERT_EQ(d.count_at_position_size(), kSeqLen);
  for (int k = 0; k < kSeqLen; ++k) EXPECT_EQ(d.count_at_position(k), count[k]) << k;
  // Positions past the longest document (40 letters) are never scored.
  EXPECT_EQ(d.count_at_position(kSeqLen - 1), 0);
  EXPECT_GT(d.count_at_position(0), 0);
}

// windows "documents": a row per document from its BOS (5 to 40 letters in 48-token rows: never
// cut), so position k counts the documents longer than k letters, every letter is scored once,
// and eval.average_curves averages exp(mean NLL so far) over the datasets at every position both
// scored.
TEST_F(EvalDatasetsTest, DocumentWindowsGiveEachDocumentARowAndCurvesAverage) {
  constexpr int kSeqLen = 48, kRows = 4 * 3;  // batch 4, max_batches 3
  const mesa::v1::EvalMetrics m =
      Eval({{"docs", 0, kSeqLen}, {"other", 1, kSeqLen}}, false, nullptr, [](mesa::v1::JobSpec& s) {
        for (mesa::v1::EvalDataset& d : *s.mutable_eval()->mutable_datasets()) {
          d.set_windows("documents");
        }
        s.mutable_eval()->add_average_curves("docs");
        s.mutable_eval()->add_average_curves("other");
      });
  ASSERT_EQ(m.datasets_size(), 2);
  const mesa::v1::DatasetResult& d = m.datasets(0);
  EXPECT_EQ(d.sequences(), kRows);
  // The first kRows documents of shard 0, by their letters.
  const std::vector<uint32_t> tokens = Documents(3000, 10);
  std::vector<int> letters;
  for (uint32_t t : tokens) {
    if (t == kBos) {
      letters.push_back(0);
    } else {
      ++letters.back();
    }
  }
  int64_t scored = 0;
  std::vector<int64_t> count(kSeqLen, 0);
  for (int r = 0; r < kRows; ++r) {
    scored += letters[r];
    for (int k = 0; k < letters[r]; ++k) ++count[k];
  }
  EXPECT_EQ(d.tokens(), scored);
  for (int k = 0; k < kSeqLen; ++k) EXPECT_EQ(d.count_at_position(k), count[k]) << k;
  const mesa::v1::AveragedCurve& a = m.averaged_curve();
  ASSERT_EQ(a.datasets_size(), 2);
  ASSERT_GT(a.positions_size(), 4);
  EXPECT_EQ(a.positions(0), 0);
  for (int i = 0; i < a.positions_size(); ++i) {
    const int k = a.positions(i);
    EXPECT_GT(m.datasets(0).count_at_position(k), 0);
    EXPECT_GT(m.datasets(1).count_at_position(k), 0);
    EXPECT_NEAR(
        a.mean_so_far_perplexity(i),
        (std::exp(m.datasets(0).mean_nll_so_far(k)) + std::exp(m.datasets(1).mean_nll_so_far(k))) /
            2,
        1e-9 * a.mean_so_far_perplexity(i));
  }
}

// eval.curve_bins_per_octave: the curves of a 96-token window as 64 exact positions and two bins
// ([64, 89] and [90, 95] at 2 per octave): each bin's NLL pools its positions' targets, its count
// sums theirs, and its mean-so-far NLL is the last position's.
TEST_F(EvalDatasetsTest, BinnedCurvesPoolPositionsGeometrically) {
  const mesa::v1::EvalMetrics exact = Eval({{"long", 2, 96}});
  const mesa::v1::EvalMetrics binned =
      Eval({{"long", 2, 96}}, false, nullptr,
           [](mesa::v1::JobSpec& s) { s.mutable_eval()->set_curve_bins_per_octave(2); });
  const mesa::v1::DatasetResult &e = exact.datasets(0), &b = binned.datasets(0);
  EXPECT_EQ(b.loss(), e.loss());
  ASSERT_EQ(b.nll_at_position_size(), 66);
  ASSERT_EQ(b.bin_first_position_size(), 66);
  EXPECT_EQ(b.bin_first_position(64), 64);
  EXPECT_EQ(b.bin_last_position(64), 89);
  EXPECT_EQ(b.bin_last_position(65), 95);
  for (int k = 0; k < 64; ++k) EXPECT_EQ(b.nll_at_position(k), e.nll_at_position(k)) << k;
  for (int i = 64; i < 66; ++i) {
    double sum = 0;
    int64_t n = 0;
    for (int k = b.bin_first_position(i); k <= b.bin_last_position(i); ++k) {
      sum += e.nll_at_position(k) * static_cast<double>(e.count_at_position(k));
      n += e.count_at_position(k);
    }
    EXPECT_EQ(b.count_at_position(i), n) << i;
    if (n > 0) EXPECT_NEAR(b.nll_at_position(i), sum / static_cast<double>(n), 1e-12) << i;
    EXPECT_EQ(b.mean_nll_so_far(i), e.mean_nll_so_far(b.bin_last_position(i))) << i;
  }
  EXPECT_TRUE(binned.nll_at_position().empty());  // the first dataset's copy goes with its bins
}

// eval.internals: per layer the forward solve's mean CG steps to the tolerance, per head Λ's range
// (λ starts at 1 and three small steps move it little).
TEST_F(EvalDatasetsTest, InternalsReportCgStepsPerLayerAndLambdaPerHead) {
  const mesa::v1::EvalMetrics m = Eval({{"a", 0, 32}}, /*internals=*/true);
  ASSERT_EQ(m.internals_size(), 1);
  const mesa::v1::LayerInternals& layer = m.internals(0);
  EXPECT_EQ(layer.mixer(), "mesa");
  EXPECT_GT(layer.cg_steps_mean(), 0.5);
  EXPECT_LE(layer.cg_steps_mean(), 30.0);
  // One Mesa layer: its mean is the model's.
  EXPECT_NEAR(layer.cg_steps_mean(), m.cg_steps_mean(), 1e-9);
  ASSERT_EQ(layer.heads_size(), 2);
  double head_steps = 0;
  for (const mesa::v1::HeadInternals& h : layer.heads()) {
    EXPECT_LE(h.lambda_min(), h.lambda_mean());
    EXPECT_LE(h.lambda_mean(), h.lambda_max());
    EXPECT_GT(h.lambda_min(), 0.25);  // the floor
    EXPECT_NEAR(h.lambda_mean(), 1.0, 0.1);
    // The gates over the evaluated tokens: in (0, 1), and they vary from token to token.
    for (auto [lo, mean, hi, sd] :
         {std::tuple{h.gamma_min(), h.gamma_mean(), h.gamma_max(), h.gamma_std()},
          std::tuple{h.beta_min(), h.beta_mean(), h.beta_max(), h.beta_std()}}) {
      EXPECT_GT(lo, 0.0);
      EXPECT_LT(lo, mean);
      EXPECT_LT(mean, hi);
      EXPECT_LE(hi, 1.0);
      EXPECT_GT(sd, 0.0);
      EXPECT_LE(sd, (hi - lo) / 2);
    }
    // cond(H + Λ) at the last position of each of the first batch's 4 rows; H is PSD, so
    // 1 <= cond <= (λ_max + λ_max(H)) / λ_min, and λ_max(H) <= trace(H) < T * max β.
    EXPECT_EQ(h.condition_rows(), 4);
    EXPECT_GE(h.condition_min(), 1.0);
    EXPECT_LE(h.condition_min(), h.condition_mean());
    EXPECT_LE(h.condition_mean(), h.condition_max());
    EXPECT_LT(h.condition_max(), (h.lambda_max() + 32 * h.beta_max()) / h.lambda_min());
    EXPECT_GT(h.cg_steps_mean(), 0.5);
    head_steps += h.cg_steps_mean() / 2;
  }
  // The heads' means average to the layer's.
  EXPECT_NEAR(head_steps, layer.cg_steps_mean(), 1e-9);
  EXPECT_EQ(Eval({{"a", 0, 32}}).internals_size(), 0);
}

// eval.cg_sweep with eval.per_position: each tolerance setting has its curve of mean CG steps per
// position. Every window of shard 3 starts a document, so every token has a position, each
// position has the same number of tokens, and the curve's mean is the setting's mean steps.
TEST_F(EvalDatasetsTest, CgSweepReportsMeanStepsPerPositionForTolerances) {
  mesa::v1::CgSweep sweep;
  sweep.add_fixed_steps(2);
  sweep.add_tolerances(1e-2f);
  sweep.add_tolerances(1e-4f);
  sweep.set_max_steps(30);
  const mesa::v1::EvalMetrics m = Eval({{"w", 3, 32}}, /*internals=*/false, &sweep);
  ASSERT_EQ(m.cg_sweep_size(), 3);
  EXPECT_EQ(m.cg_sweep(0).cg_steps_at_position_size(), 0);  // fixed steps: no curve
  std::vector<double> means;
  for (int i = 1; i < 3; ++i) {
    const mesa::v1::CgSweepPoint& p = m.cg_sweep(i);
    ASSERT_EQ(p.cg_steps_at_position_size(), 32) << i;
    double sum = 0;
    for (double steps : p.cg_steps_at_position()) {
      EXPECT_GE(steps, 0.0);
      EXPECT_LE(steps, 30.0);
      sum += steps;
    }
    EXPECT_NEAR(sum / 32, p.cg_steps_mean(), 1e-9 * p.cg_steps_mean()) << i;
    // The state grows along a document: its first token's system (Λ + one rank-one term) is
    // solved in fewer steps than its last.
    EXPECT_LT(p.cg_steps_at_position(0), p.cg_steps_at_position(31)) << i;
    means.push_back(p.cg_steps_mean());
  }
  EXPECT_LT(means[0], means[1]);  // a tighter tolerance takes more steps
}

TEST_F(EvalDatasetsTest, AMissingDatasetShardNamesTheDataset) {
  mesa::v1::JobSpec spec = TrainSpec();
  spec.set_type(mesa::v1::JOB_TYPE_EVAL);
  spec.clear_optimizer();
  spec.mutable_training()->set_steps(0);
  spec.mutable_eval()->set_checkpoint(Tmp("ds_run/checkpoints"));
  mesa::v1::EvalDataset* d = spec.mutable_eval()->add_datasets();
  d->set_name("gone");
  d->set_val_path(Tmp("no_such_*.bin"));
  auto config = ResolveJobConfig(spec, ResolveOptions{});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("eval.datasets[0].val_path"), std::string::npos)
      << config.status();
}

}  // namespace
}  // namespace mesa::model
