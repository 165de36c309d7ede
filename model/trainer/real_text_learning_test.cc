// Learning tests on real English text for the delta-rule mixers: tiny byte-level models trained
// through RunTraining on the repository's own documentation (docs/*.md, about 260 KB), scored on
// held-out text. The bar is the held-out cross-entropy of the best smoothed byte-bigram model
// of the training text: a model whose mixers contribute nothing sees only the current byte
// (embedding, MLP, head) and cannot beat a bigram model, so clearing that bar by a margin means
// the sequence mixer learned to use the context. trainer_test's learning tests use a synthetic
// Markov corpus that a per-token model can learn alone.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "gtest/gtest.h"
#include "model/data/token_shard.h"
#include "model/trainer/trainer.h"

namespace mesa::model {
namespace {

namespace fs = std::filesystem;
constexpr uint32_t kBos = 256;  // the byte tokenizer's BOS (model/tokenizer/byte_tokenizer.h)
constexpr int kVocab = 257;

std::string Tmp(const std::string& name) { return std::string(getenv("TEST_TMPDIR")) + "/" + name; }

// Every docs/*.md (runfiles, sorted by name) as one document each: the first 90 % of its bytes
// go to training, the rest to validation, each part after a BOS.
struct Text {
  std::vector<uint32_t> train, val;
  int files = 0;
};

Text LoadDocs() {
  std::vector<fs::path> paths;
  for (const auto& entry : fs::directory_iterator("docs")) {
    if (entry.path().extension() == ".md") paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  Text text;
  for (const fs::path& path : paths) {
    absl::StatusOr<std::string> bytes = base::ReadFile(path.string());
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (!bytes.ok() || bytes->size() < 1000) continue;
    const size_t cut = bytes->size() * 9 / 10;
    text.train.push_back(kBos);
    text.val.push_back(kBos);
    for (size_t i = 0; i < bytes->size(); ++i) {
      (i < cut ? text.train : text.val).push_back(static_cast<unsigned char>((*bytes)[i]));
    }
    ++text.files;
  }
  return text;
}

// Held-out cross-entropy (nats per token) of unigram and interpolated bigram models counted on
// `train`: p(b | a) = (c(a, b) + k u(b)) / (c(a) + k), u = add-1/2 unigram; the best k of a few,
// chosen on `val` itself, so the bigram figure is if anything optimistic.
struct NgramBaselines {
  double unigram = 0, bigram = 0;
};

NgramBaselines Baselines(const std::vector<uint32_t>& train, const std::vector<uint32_t>& val) {
  std::vector<double> uni(kVocab, 0.5);
  std::vector<double> ctx(kVocab, 0), pair(kVocab * kVocab, 0);
  for (uint32_t t : train) uni[t] += 1;
  for (size_t i = 1; i < train.size(); ++i) {
    ctx[train[i - 1]] += 1;
    pair[train[i - 1] * kVocab + train[i]] += 1;
  }
  double total = 0;
  for (double u : uni) total += u;
  for (double& u : uni) u /= total;
  NgramBaselines b;
  int64_t targets = 0;  // the trainer's loss leaves BOS targets out
  for (size_t i = 1; i < val.size(); ++i) {
    if (val[i] == kBos) continue;
    b.unigram -= std::log(uni[val[i]]);
    ++targets;
  }
  b.unigram /= static_cast<double>(targets);
  b.bigram = INFINITY;
  for (double k : {0.3, 1.0, 3.0, 10.0, 30.0, 100.0}) {
    double nll = 0;
    for (size_t i = 1; i < val.size(); ++i) {
      const uint32_t a = val[i - 1], c = val[i];
      if (c != kBos) nll -= std::log((pair[a * kVocab + c] + k * uni[c]) / (ctx[a] + k));
    }
    b.bigram = std::min(b.bigram, nll / static_cast<double>(targets));
  }
  return b;
}

struct Outcome {
  double first_loss = 0, final_loss = 0, val_loss = 0;
  NgramBaselines baselines;
};

Outcome Train(const std::vector<std::string>& mixers, int64_t steps) {
  static const Text text = LoadDocs();
  static const NgramBaselines baselines = Baselines(text.train, text.val);
  static const bool written = [] {
    EXPECT_TRUE(WriteTokenShard(Tmp("docs_train.bin"), text.train).ok());
    EXPECT_TRUE(WriteTokenShard(Tmp("docs_val.bin"), text.val).ok());
    return true;
  }();
  (void)written;
  EXPECT_GE(text.files, 10);
  EXPECT_GE(text.train.size(), 150000u);

  mesa::v1::JobSpec spec;
  spec.set_name("real-text");
  auto* m = spec.mutable_model();
  m->set_vocab_size(kVocab);
  m->set_d_model(64);
  m->set_n_layers(2);
  m->set_n_heads(2);
  m->set_head_dim(32);
  for (const std::string& mixer : mixers) m->add_layer_mixers(mixer);
  if (std::find(mixers.begin(), mixers.end(), "mesa") != mixers.end()) m->set_cg_steps(10);
  auto* d = spec.mutable_data();
  d->set_train_path(Tmp("docs_train.bin"));
  d->set_val_path(Tmp("docs_val.bin"));
  d->set_tokenizer("byte");
  d->set_seq_len(128);
  d->set_batch_size(8);
  auto* o = spec.mutable_optimizer();
  o->set_lr(1e-2f);
  o->set_warmup_steps(10);
  spec.mutable_training()->set_steps(steps);
  spec.mutable_training()->set_seed(7);
  spec.mutable_training()->set_eval_batches(0);  // all of the held-out text, once at the end

  absl::StatusOr<JobConfig> config = ResolveJobConfig(spec, ResolveOptions{});
  EXPECT_TRUE(config.ok()) << config.status();
  Outcome out{.baselines = baselines};
  if (!config.ok()) return out;
  const std::string workdir = Tmp("learn_" + absl::StrJoin(mixers, "_"));
  fs::remove_all(workdir);
  fs::create_directories(workdir);
  TrainerOptions options;
  options.workdir = workdir;
  options.num_threads = 2;
  EventSink sink;
  sink.set_quiet(true);
  std::map<int64_t, double> losses;
  sink.set_observer([&losses](const mesa::v1::TrainerEvent& e) {
    if (e.has_step() && !e.step().skipped()) losses[e.step().step()] = e.step().loss();
  });
  absl::StatusOr<RunResult> result = RunTraining(*config, options, sink);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok() || losses.empty()) return out;
  out.first_loss = losses.begin()->second;
  out.final_loss = result->final_loss;
  out.val_loss = result->result.eval().val_loss();
  std::printf(
      "[%s] %lld steps: first loss %.3f, final %.3f, held-out %.3f; held-out unigram %.3f, "
      "bigram %.3f nats/byte (%d files, %zu train / %zu held-out bytes)\n",
      absl::StrJoin(mixers, ", ").c_str(), static_cast<long long>(steps), out.first_loss,
      out.final_loss, out.val_loss, baselines.unigram, baselines.bigram, text.files,
      text.train.size(), text.val.size());
  return out;
}

void ExpectLearnsContext(const std::vector<std::string>& mixers, int64_t steps, double margin) {
  const Outcome out = Train(mixers, steps);
  // Starts near ln(257) = 5.55: nothing learned yet.
  EXPECT_GT(out.first_loss, std::log(257.0) - 0.5);
  EXPECT_LT(out.first_loss, std::log(257.0) + 1.5);
  EXPECT_LT(out.val_loss, out.baselines.bigram - margin)
      << "the held-out loss does not beat a byte-bigram model by " << margin
      << " nats: the mixers did not learn to use the context";
}

// 250 steps of 8 x 128 bytes (about 1.1 epochs of the training text); 8-18 s each on the shared
// 2-core machine when it is quiet, up to 27 s while other builds run. Held-out loss at seeds
// 7 / 8 / 9, against a byte-bigram cross-entropy of 2.750 nats (docs of 2026-11-25, so the bar is
// 2.550): DeltaNet 2.368 / 2.410 / 2.352, Gated DeltaNet 2.319 / 2.381 / 2.300, [deltanet, mesa]
// 2.364 / 2.427 / 2.312. With the DeltaNet operator's output and its gradients zeroed (seed 7):
// DeltaNet and Gated DeltaNet 2.820 (a per-token model, above even the bigram), all three tests
// fail; [deltanet, mesa] 2.559, just over the bar: its Mesa layer alone nearly gets there.
constexpr int64_t kSteps = 250;
constexpr double kMargin = 0.2;  // nats below the bigram bar

TEST(RealTextLearningTest, TinyDeltaNetBeatsByteBigramOnHeldOutDocs) {
  ExpectLearnsContext({"deltanet"}, kSteps, kMargin);
}

TEST(RealTextLearningTest, TinyGatedDeltaNetBeatsByteBigramOnHeldOutDocs) {
  ExpectLearnsContext({"gated_deltanet"}, kSteps, kMargin);
}

// Layer 0 DeltaNet, layer 1 Mesa (10 CG steps). The DeltaNet-specific guarantee is the two tests
// above: here the Mesa layer alone lands within 0.01 nats of the bar.
TEST(RealTextLearningTest, TinyDeltaNetMesaHybridBeatsByteBigramOnHeldOutDocs) {
  ExpectLearnsContext({"deltanet", "mesa"}, kSteps, kMargin);
}

}  // namespace
}  // namespace mesa::model
