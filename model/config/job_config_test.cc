#include "model/config/job_config.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "model/net/param_layout.h"
#include "spec/testing.h"
#include "spec/validate_job_spec.h"

namespace mesa::model {
namespace {

mesa::v1::JobSpec TinySpec() {
  mesa::v1::JobSpec spec;
  spec.set_name("tiny");
  auto* m = spec.mutable_model();
  m->set_vocab_size(257);
  m->set_d_model(32);
  m->set_n_layers(2);
  m->set_n_heads(2);
  m->set_head_dim(16);
  auto* d = spec.mutable_data();
  d->set_train_path("unused.bin");
  d->set_seq_len(16);
  d->set_batch_size(4);
  spec.mutable_optimizer()->set_lr(1e-3f);
  spec.mutable_training()->set_steps(10);
  return spec;
}

ResolveOptions NoFiles() {
  ResolveOptions options;
  options.expand_globs = false;
  return options;
}

TEST(JobConfigTest, AppliesDefaults) {
  auto config = ResolveJobConfig(TinySpec(), NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model.mixer, MixerKind::kMesa);
  EXPECT_EQ(config->model.cg_steps, 30);
  EXPECT_EQ(config->model.mlp_hidden, 96);
  EXPECT_EQ(config->model.conv_width, 4);
  EXPECT_FLOAT_EQ(config->model.lambda_floor, 0.25f);
  EXPECT_FLOAT_EQ(config->model.gamma_cap, 0.0025f);
  EXPECT_FLOAT_EQ(config->model.logit_softcap, 30.0f);
  EXPECT_EQ(config->model.bos_token, 256);
  EXPECT_FLOAT_EQ(config->optimizer.beta2, 0.98f);
  EXPECT_FLOAT_EQ(config->optimizer.weight_decay, 0.1f);
  EXPECT_FLOAT_EQ(config->optimizer.min_lr_ratio, 0.1f);
  EXPECT_FLOAT_EQ(config->optimizer.grad_clip, 1.0f);
  EXPECT_EQ(config->checkpoint.keep_last, 3);
  EXPECT_EQ(config->data.grad_accum_steps, 1);
}

// data.reset_at_bos: absent is on for shards of whole rows, off for synthetic tasks and context
// parallelism; a value given is kept, and the model runs with what was resolved.
TEST(JobConfigTest, ResetAtBosDefaults) {
  auto on = ResolveJobConfig(TinySpec(), NoFiles());
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->data.reset_at_bos);
  EXPECT_FALSE(on->data.reset_at_bos_set);
  EXPECT_TRUE(on->model.reset_at_bos);

  mesa::v1::JobSpec off = TinySpec();
  off.mutable_data()->set_reset_at_bos(false);
  auto config = ResolveJobConfig(off, NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->data.reset_at_bos);
  EXPECT_TRUE(config->data.reset_at_bos_set);
  EXPECT_FALSE(config->model.reset_at_bos);

  mesa::v1::JobSpec syn = TinySpec();
  syn.mutable_data()->clear_train_path();
  syn.mutable_data()->set_seq_len(256);
  syn.mutable_data()->mutable_synthetic()->add_tasks()->set_task("mqar");
  config = ResolveJobConfig(syn, NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->model.reset_at_bos);

  mesa::v1::JobSpec cp = TinySpec();
  cp.mutable_data()->set_seq_len(128);
  cp.mutable_training()->set_context_parallel(2);
  ResolveOptions two_ranks = NoFiles();
  two_ranks.world_size = 2;
  config = ResolveJobConfig(cp, two_ranks);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->model.reset_at_bos);
}

// training.deterministic reaches the settings the session hands to the CUDA backend; off unless
// set.
TEST(JobConfigTest, DeterministicIsOffUnlessAsked) {
  auto config = ResolveJobConfig(TinySpec(), NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->training.deterministic);
  mesa::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_deterministic(true);
  config = ResolveJobConfig(spec, NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->training.deterministic);
}

// proto3 `optional` where 0 is a real choice. Unset takes the default; 0 means 0.
TEST(JobConfigTest, ExplicitZeroOptimizerValuesMeanZero) {
  mesa::v1::JobSpec spec = TinySpec();
  spec.mutable_optimizer()->set_weight_decay(0);
  spec.mutable_optimizer()->set_grad_clip(0);
  spec.mutable_optimizer()->set_min_lr_ratio(0);
  ASSERT_TRUE(spec.optimizer().has_weight_decay());
  auto config = ResolveJobConfig(spec, NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->optimizer.weight_decay, 0.0f);
  EXPECT_EQ(config->optimizer.grad_clip, 0.0f);  // no clipping
  EXPECT_EQ(config->optimizer.min_lr_ratio, 0.0f);
  // Non-zero values pass through; cleared fields take the defaults again.
  spec.mutable_optimizer()->set_weight_decay(0.05f);
  spec.mutable_optimizer()->clear_grad_clip();
  spec.mutable_optimizer()->clear_min_lr_ratio();
  config = ResolveJobConfig(spec, NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FLOAT_EQ(config->optimizer.weight_decay, 0.05f);
  EXPECT_FLOAT_EQ(config->optimizer.grad_clip, 1.0f);
  EXPECT_FLOAT_EQ(config->optimizer.min_lr_ratio, 0.1f);
}

TEST(JobConfigTest, GlaHasZeroCgSteps) {
  auto spec = TinySpec();
  spec.mutable_model()->set_mixer("gla");
  auto config = ResolveJobConfig(spec, NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model.cg_steps, 0);
  spec.mutable_model()->set_cg_steps(5);
  EXPECT_FALSE(ResolveJobConfig(spec, NoFiles()).ok());
}

void ExpectError(const mesa::v1::JobSpec& spec, const std::string& field,
                 const ResolveOptions& options = NoFiles()) {
  auto config = ResolveJobConfig(spec, options);
  ASSERT_FALSE(config.ok()) << "expected an error naming " << field;
  EXPECT_NE(config.status().message().find(field), std::string::npos) << config.status();
}

TEST(JobConfigTest, RejectsBadConfigsNamingTheField) {
  auto spec = TinySpec();
  spec.mutable_model()->set_d_model(0);
  ExpectError(spec, "model.d_model");
  spec = TinySpec();
  spec.mutable_model()->set_head_dim(24);
  ExpectError(spec, "model.head_dim");
  spec = TinySpec();
  spec.mutable_model()->set_vocab_size(100);
  ExpectError(spec, "model.vocab_size");
  spec = TinySpec();
  spec.mutable_model()->set_mixer("transformer");
  ExpectError(spec, "model.mixer");
  spec = TinySpec();
  spec.mutable_model()->set_gamma_cap(1.5f);
  ExpectError(spec, "model.gamma_cap");
  spec = TinySpec();
  spec.mutable_model()->set_lambda_floor(-1.0f);
  ExpectError(spec, "model.lambda_floor");
  spec = TinySpec();
  spec.mutable_data()->set_batch_size(5);
  spec.mutable_data()->set_grad_accum_steps(2);
  ExpectError(spec, "data.batch_size");
  spec = TinySpec();
  spec.mutable_data()->set_tokenizer("sentencepiece");
  ExpectError(spec, "data.tokenizer");
  spec = TinySpec();
  spec.mutable_optimizer()->set_lr(0);
  ExpectError(spec, "optimizer.lr");
  spec = TinySpec();
  spec.mutable_optimizer()->set_beta2(1.0f);
  ExpectError(spec, "optimizer.beta2");
  spec = TinySpec();
  spec.mutable_training()->set_steps(0);
  ExpectError(spec, "training.steps");
  spec = TinySpec();
  spec.mutable_training()->set_device("tpu");
  ExpectError(spec, "training.device");
  spec = TinySpec();
  spec.mutable_training()->set_eval_interval(5);
  ExpectError(spec, "data.val_path");
  spec = TinySpec();
  spec.mutable_data()->set_tokenizer("gpt2");
  ExpectError(spec, "model.vocab_size");
}

TEST(JobConfigTest, Precision) {
  auto spec = TinySpec();
  auto config = ResolveJobConfig(spec, NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->training.precision, Precision::kAuto);  // empty = auto
  for (auto [name, want] :
       {std::pair{"auto", Precision::kAuto}, std::pair{"bf16", Precision::kBf16},
        std::pair{"fp32", Precision::kFp32}}) {
    spec.mutable_training()->set_precision(name);
    config = ResolveJobConfig(spec, NoFiles());
    ASSERT_TRUE(config.ok()) << name << ": " << config.status();
    EXPECT_EQ(config->training.precision, want) << name;
    EXPECT_STREQ(PrecisionName(want), name);
  }
  spec.mutable_training()->set_precision("fp16");
  ExpectError(spec, "training.precision");
  spec.mutable_training()->set_precision("BF16");
  ExpectError(spec, "training.precision");
  // bf16 needs CUDA: an error with device cpu, from the spec or from --device / $MESA_DEVICE.
  spec.mutable_training()->set_precision("bf16");
  spec.mutable_training()->set_device("cpu");
  ExpectError(spec, "training.precision");
  ResolveOptions on_cuda = NoFiles();
  on_cuda.device = "cuda";
  EXPECT_TRUE(ResolveJobConfig(spec, on_cuda).ok());
  spec.mutable_training()->set_device("cuda");
  ResolveOptions on_cpu = NoFiles();
  on_cpu.device = "cpu";
  ExpectError(spec, "training.precision", on_cpu);
  EXPECT_TRUE(ResolveJobConfig(spec, NoFiles()).ok());
  // fp32 and auto are fine on the CPU.
  spec.mutable_training()->set_precision("fp32");
  EXPECT_TRUE(ResolveJobConfig(spec, on_cpu).ok());
  spec.mutable_training()->set_precision("auto");
  EXPECT_TRUE(ResolveJobConfig(spec, on_cpu).ok());
}

TEST(JobConfigTest, MissingShardsAreNotFound) {
  auto spec = TinySpec();
  spec.mutable_data()->set_train_path("/nonexistent/dir/train_*.bin");
  auto config = ResolveJobConfig(spec, ResolveOptions{});
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(config.status().message().find("data.train_path"), std::string::npos);
}

// The promise of one validator: a spec the coordinator accepts is one mesa-train accepts too
// (here without the file system; the shard files are the trainer's only later check). Every
// numeric limit, at both of its bounds.
TEST(JobConfigTest, EverySpecTheValidatorAcceptsResolves) {
  int accepted = 0;
  for (const spec::NumericLimit& limit : spec::NumericLimits()) {
    for (double value : {limit.lo, limit.hi}) {
      mesa::v1::JobSpec s = spec::ValidSpecFor(limit.applies_to);
      spec::SetNumeric(s, limit.path, value);
      if (std::string(limit.path) == "optimizer.warmup_steps") {
        spec::SetNumeric(s, "training.steps", value > 0 ? value : 1);
      }
      if (!spec::ValidateJobSpec(s).ok()) continue;  // a cross-field rule refused it: fine
      ++accepted;
      ResolveOptions options = NoFiles();
      options.world_size =
          s.resources().gpus() > 0 ? s.resources().gpus() : std::max(1, s.resources().cpu_ranks());
      auto config = ResolveJobConfig(s, options);
      EXPECT_TRUE(config.ok()) << limit.path << " = " << value << ": " << config.status();
    }
  }
  EXPECT_GE(accepted, 60);
}

TEST(JobConfigTest, LayerMixersRepeatAndUniformPatternsAreTheShorthand) {
  auto spec = TinySpec();
  spec.mutable_model()->set_n_layers(4);
  spec.mutable_model()->add_layer_mixers("gla");
  spec.mutable_model()->add_layer_mixers("mesa");
  auto config = ResolveJobConfig(spec, NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model.layer_mixers,
            (std::vector<MixerKind>{MixerKind::kGla, MixerKind::kMesa, MixerKind::kGla,
                                    MixerKind::kMesa}));
  EXPECT_EQ(config->model.MesaLayers(), 2);
  EXPECT_EQ(config->model.cg_steps, 30) << "Mesa layers get the default";
  EXPECT_EQ(LayerMixersName(config->model), "[gla, mesa, gla, mesa]");
  // [gla] everywhere is the shorthand mixer: gla, the same model and checkpoint format.
  spec.mutable_model()->clear_layer_mixers();
  spec.mutable_model()->add_layer_mixers("gla");
  config = ResolveJobConfig(spec, NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->model.layer_mixers.empty());
  EXPECT_EQ(config->model.mixer, MixerKind::kGla);
  EXPECT_EQ(config->model.cg_steps, 0);
  EXPECT_EQ(config->model.cg_max_steps, 0);
}

TEST(JobConfigTest, TheValidatorCountsParametersAsTheModelDoes) {
  auto spec = TinySpec();
  spec.mutable_model()->set_mlp_mult(2.5f);
  spec.mutable_model()->set_conv_width(3);
  auto config = ResolveJobConfig(spec, NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(spec::ModelParameters(spec.model()), config->model.NumParameters());
}

// model.tie_embeddings: unset and true are today's tied model; false adds lm_head.weight, which
// every count (validator, config, layout) includes.
TEST(JobConfigTest, TieEmbeddingsDefaultsToTiedAndUntiedCountsTheHead) {
  auto spec = TinySpec();
  auto tied = ResolveJobConfig(spec, NoFiles());
  ASSERT_TRUE(tied.ok()) << tied.status();
  EXPECT_TRUE(tied->model.tie_embeddings);
  spec.mutable_model()->set_tie_embeddings(true);
  auto explicit_tied = ResolveJobConfig(spec, NoFiles());
  ASSERT_TRUE(explicit_tied.ok()) << explicit_tied.status();
  EXPECT_TRUE(explicit_tied->model.tie_embeddings);
  EXPECT_EQ(spec::ModelParameters(spec.model()), tied->model.NumParameters());
  spec.mutable_model()->set_tie_embeddings(false);
  auto untied = ResolveJobConfig(spec, NoFiles());
  ASSERT_TRUE(untied.ok()) << untied.status();
  EXPECT_FALSE(untied->model.tie_embeddings);
  EXPECT_EQ(spec::ModelParameters(spec.model()), untied->model.NumParameters());
  EXPECT_EQ(ParamLayout(untied->model).num_values(), untied->model.NumParameters());
  EXPECT_EQ(untied->model.NumParameters() - tied->model.NumParameters(),
            int64_t{spec.model().vocab_size()} * spec.model().d_model());
}

// The validator's count, the config's and the parameter layout's agree for every mixer: each
// layer has the forget gate and λ only where spec/mixers.h says its mixer has them.
TEST(JobConfigTest, ParameterCountsAgreeForEveryMixer) {
  for (const std::vector<std::string>& pattern :
       std::vector<std::vector<std::string>>{{"mesa"},
                                             {"gla"},
                                             {"deltanet"},
                                             {"gated_deltanet"},
                                             {"deltanet", "mesa"},
                                             {"gated_deltanet", "gla"},
                                             {"attention"},
                                             {"mesa", "attention"},
                                             {"deltanet", "swa"},
                                             {"swa", "attention"}}) {
    auto spec = TinySpec();
    spec.mutable_model()->clear_mixer();
    for (const std::string& m : pattern) spec.mutable_model()->add_layer_mixers(m);
    if (std::find(pattern.begin(), pattern.end(), "swa") != pattern.end()) {
      spec.mutable_model()->set_attention_window(64);
    }
    if (pattern[0] != "mesa" && pattern.size() == 1) {
      spec.mutable_model()->clear_cg_steps();
      spec.mutable_model()->clear_cg_tol();
      spec.mutable_model()->clear_cg_max_steps();
    }
    SCOPED_TRACE(pattern[0] + (pattern.size() > 1 ? "+" + pattern[1] : ""));
    auto config = ResolveJobConfig(spec, NoFiles());
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(spec::ModelParameters(spec.model()), config->model.NumParameters());
    EXPECT_EQ(ParamLayout(config->model).num_values(), config->model.NumParameters());
  }
}

// "attention" uses model.attention_window (0 = global) unless the pattern also has "swa"
// layers, which take the window while "attention" stays global.
TEST(JobConfigTest, AttentionWindowPerLayer) {
  auto spec = TinySpec();
  spec.mutable_model()->set_mixer("attention");
  auto config = ResolveJobConfig(spec, NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model.attention_window, 0);
  EXPECT_EQ(config->model.cg_steps, 0);
  EXPECT_EQ(config->model.AttentionWindow(MixerKind::kAttention), 0);
  spec.mutable_model()->set_attention_window(1024);
  config = ResolveJobConfig(spec, NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model.AttentionWindow(MixerKind::kAttention), 1024);
  spec.mutable_model()->clear_mixer();
  spec.mutable_model()->add_layer_mixers("swa");
  spec.mutable_model()->add_layer_mixers("attention");
  config = ResolveJobConfig(spec, NoFiles());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model.AttentionWindow(MixerKind::kSwa), 1024);
  EXPECT_EQ(config->model.AttentionWindow(MixerKind::kAttention), 0);
  EXPECT_EQ(config->model.AttentionWindow(MixerKind::kMesa), 0);
  // A resolved config is checked again (checkpoints): the same rules.
  ModelConfig model = config->model;
  model.attention_window = 0;
  EXPECT_TRUE(absl::StrContains(ValidateModelConfig(model).message(), "model.attention_window"));
  model.layer_mixers = {MixerKind::kMesa, MixerKind::kGla};
  model.attention_window = 8;
  EXPECT_TRUE(absl::StrContains(ValidateModelConfig(model).message(), "model.attention_window"));
}

// The example of docs/formats.md: MesaNet-small's size with one attention layer in seven.
TEST(JobConfigTest, ParameterCountOfAMesaNetSmallAttentionHybrid) {
  ModelConfig config;
  config.vocab_size = 50257;
  config.d_model = 768;
  config.n_layers = 14;
  config.n_heads = 6;
  config.head_dim = 128;
  config.mlp_hidden = 2304;
  EXPECT_EQ(config.NumParameters(), 146195368);  // all Mesa
  for (int l = 0; l < 14; ++l) {
    config.layer_mixers.push_back(l % 7 == 6 ? MixerKind::kAttention : MixerKind::kMesa);
  }
  EXPECT_EQ(config.NumParameters(), 146175376);
  EXPECT_EQ(ParamLayout(config).num_values(), 146175376);
}

TEST(JobConfigTest, ParameterCount) {
  auto config = ResolveJobConfig(TinySpec(), NoFiles());
  ASSERT_TRUE(config.ok());
  const int64_t c = 32, hd = 32, f = 96, h = 2;
  const int64_t per_layer =
      c + 3 * hd * c + 2 * hd * 4 + 2 * (h * c + h) + hd + 16 + c * hd + c + 3 * c * f;
  EXPECT_EQ(config->model.NumParameters(), 257 * c + 2 * per_layer + c);
}

}  // namespace
}  // namespace mesa::model
