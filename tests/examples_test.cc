// The example job files parse into the specs their comments describe.
#include <algorithm>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "model/tasks/adapters.h"
#include "model/tasks/task_file.h"
#include "proto/spec_yaml.h"
#include "spec/array_jobs.h"
#include "spec/tasks.h"
#include "spec/validate_job_spec.h"
#include "tests/process_harness.h"

namespace mesa::testing {
namespace {

mesa::v1::JobSpec Load(const std::string& name) {
  absl::StatusOr<mesa::v1::JobSpec> spec = LoadJobSpecFile(RunfilePath("examples/" + name));
  EXPECT_TRUE(spec.ok()) << name << ": " << spec.status();
  return spec.ok() ? *spec : mesa::v1::JobSpec();
}

TEST(Examples, TrainTinyCpu) {
  mesa::v1::JobSpec spec = Load("train_tiny_cpu.yaml");
  EXPECT_EQ(spec.type(), mesa::v1::JOB_TYPE_TRAIN);
  EXPECT_EQ(spec.resources().gpus(), 0);
  EXPECT_EQ(spec.model().vocab_size(), 257);
  EXPECT_EQ(spec.model().d_model(), 64);
  EXPECT_EQ(spec.model().n_layers(), 2);
  EXPECT_EQ(spec.model().n_heads(), 2);
  EXPECT_EQ(spec.model().head_dim(), 32);
  EXPECT_EQ(spec.data().tokenizer(), "byte");
  EXPECT_EQ(spec.data().seq_len(), 128);
  EXPECT_EQ(spec.data().batch_size(), 8);
  EXPECT_EQ(spec.training().steps(), 200);
  EXPECT_EQ(spec.training().device(), "cpu");
}

TEST(Examples, TrainSmallGpuIsMesaNetSmall) {
  mesa::v1::JobSpec spec = Load("train_small_gpu.yaml");
  EXPECT_EQ(spec.type(), mesa::v1::JOB_TYPE_TRAIN);
  EXPECT_GE(spec.resources().gpus(), 1);
  EXPECT_EQ(spec.model().n_layers(), 14);
  EXPECT_EQ(spec.model().d_model(), 768);
  EXPECT_EQ(spec.model().n_heads(), 6);
  EXPECT_EQ(spec.model().head_dim(), 128);
  EXPECT_FLOAT_EQ(spec.model().mlp_mult(), 3.0f);
  EXPECT_EQ(spec.model().vocab_size(), 50257);
  EXPECT_EQ(spec.model().cg_steps(), 30);
  EXPECT_EQ(spec.data().tokenizer(), "gpt2");
  EXPECT_EQ(spec.data().seq_len(), 2048);
  EXPECT_EQ(spec.data().batch_size(), 8);
  EXPECT_FLOAT_EQ(spec.optimizer().lr(), 3e-3f);
  EXPECT_EQ(spec.optimizer().warmup_steps(), 2000);
}

TEST(Examples, EvalTinyCpu) {
  mesa::v1::JobSpec spec = Load("eval_tiny_cpu.yaml");
  EXPECT_EQ(spec.type(), mesa::v1::JOB_TYPE_EVAL);
  EXPECT_FALSE(spec.eval().checkpoint().empty());
  EXPECT_FALSE(spec.data().val_path().empty());
  // Architecture matches the training example, so its checkpoint loads.
  mesa::v1::JobSpec train = Load("train_tiny_cpu.yaml");
  EXPECT_EQ(spec.model().d_model(), train.model().d_model());
  EXPECT_EQ(spec.model().n_layers(), train.model().n_layers());
  EXPECT_EQ(spec.model().vocab_size(), train.model().vocab_size());
}

TEST(Examples, EvalDatasetsCpuScoresTwoLengths) {
  mesa::v1::JobSpec spec = Load("eval_datasets_cpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  ASSERT_EQ(spec.eval().datasets_size(), 2);
  EXPECT_EQ(spec.eval().datasets(0).seq_len(), 0);  // the training length
  EXPECT_EQ(spec.eval().datasets(1).seq_len(), 4 * spec.data().seq_len());
  EXPECT_EQ(spec.model().d_model(), Load("train_tiny_cpu.yaml").model().d_model());
}

TEST(Examples, EvalSweepCpuSweepsCgWithCurvesAndInternals) {
  mesa::v1::JobSpec spec = Load("eval_sweep_cpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  EXPECT_EQ(spec.eval().cg_sweep().fixed_steps_size(), 6);
  EXPECT_EQ(spec.eval().cg_sweep().tolerances_size(), 3);
  EXPECT_TRUE(spec.eval().per_position());
  EXPECT_TRUE(spec.eval().internals());
  EXPECT_EQ(spec.model().d_model(), Load("train_tiny_cpu.yaml").model().d_model());
}

TEST(Examples, EvalTasksCpuScoresTheShippedTaskFile) {
  mesa::v1::JobSpec spec = Load("eval_tasks_cpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  ASSERT_EQ(spec.eval().tasks_size(), 3);
  EXPECT_EQ(spec.eval().tasks(1).num_fewshot(), 2);
  EXPECT_EQ(spec.model().d_model(), Load("train_tiny_cpu.yaml").model().d_model());
  auto examples = model::LoadTaskFile(RunfilePath(spec.eval().tasks(0).path()));
  ASSERT_TRUE(examples.ok()) << examples.status();
  EXPECT_EQ(examples->size(), 8u);
  // The PIQA-format sample reads through its adapter.
  auto piqa = model::LoadTaskItems(RunfilePath(spec.eval().tasks(2).path()),
                                   spec.eval().tasks(2).adapter());
  ASSERT_TRUE(piqa.ok()) << piqa.status();
  EXPECT_EQ(piqa->size(), 6u);
  EXPECT_EQ((*piqa)[2].gold, std::vector<int>{1});
  ASSERT_EQ(spec.eval().task_groups_size(), 1);
}

// Document windows at and beyond the training length, and their averaged curve.
TEST(Examples, EvalLongContextCpuReadsDocumentsPastTheTrainingLength) {
  mesa::v1::JobSpec spec = Load("eval_long_context_cpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  const mesa::v1::JobSpec train = Load("train_tiny_cpu.yaml");
  EXPECT_EQ(spec.model().d_model(), train.model().d_model());
  ASSERT_EQ(spec.eval().datasets_size(), 3);
  EXPECT_EQ(spec.eval().datasets(2).windows(), "documents");
  EXPECT_EQ(spec.eval().datasets(2).seq_len(), 2 * train.data().seq_len());
  EXPECT_EQ(spec.eval().average_curves_size(), 2);
}

// A sweep over the checkpoints train_tiny_cpu.yaml keeps: every child a valid EVAL job.
TEST(Examples, EvalArrayCpuSweepsTheTinyRunsCheckpoints) {
  mesa::v1::JobSpec spec = Load("eval_array_cpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  absl::StatusOr<std::vector<spec::ArrayChildSpec>> children = spec::ExpandArray(spec);
  ASSERT_TRUE(children.ok()) << children.status();
  EXPECT_EQ(children->size(), 8u);  // 2 checkpoints x 2 CG settings x 2 shards
  const mesa::v1::JobSpec train = Load("train_tiny_cpu.yaml");
  EXPECT_EQ(spec.model().d_model(), train.model().d_model());
  // The steps the training run keeps (every interval_steps, the last keep_last).
  for (int i = 0; i < 2; ++i) {
    const int64_t step = train.training().steps() - i * train.checkpoint().interval_steps();
    EXPECT_EQ(spec.array().checkpoints(1 - i),
              absl::StrFormat("%s/step_%08d", train.checkpoint().dir(), step));
  }
}

// The recall suite (six adapters, averaged) and generated needle-in-a-haystack items.
TEST(Examples, EvalRecallGpuIsThePapersRecallSuiteAndNiah) {
  mesa::v1::JobSpec spec = Load("eval_recall_gpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  EXPECT_EQ(spec.model().SerializeAsString(),
            Load("train_small_gpu.yaml").model().SerializeAsString());
  ASSERT_EQ(spec.eval().tasks_size(), 7);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(spec.eval().tasks(i).adapter().rfind("based_", 0) == 0);
  EXPECT_EQ(spec.eval().tasks(6).niah().lengths_size(), 6);
  EXPECT_EQ(spec.eval().tasks(6).niah().lengths(5), 32768);
  ASSERT_EQ(spec.eval().task_groups_size(), 1);
  EXPECT_EQ(spec.eval().task_groups(0).tasks_size(), 6);
}

// The paper's zero-shot table: its twelve benchmarks, each through its adapter, in its global and
// local averages (App. J.2.1), for the MesaNet-small checkpoint.
TEST(Examples, EvalZeroShotGpuIsThePapersTable) {
  mesa::v1::JobSpec spec = Load("eval_zero_shot_gpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  EXPECT_EQ(spec.model().SerializeAsString(),
            Load("train_small_gpu.yaml").model().SerializeAsString());
  ASSERT_EQ(spec.eval().tasks_size(), 12);
  for (const mesa::v1::EvalTask& t : spec.eval().tasks()) EXPECT_FALSE(t.adapter().empty());
  ASSERT_EQ(spec.eval().task_groups_size(), 2);
  EXPECT_EQ(std::vector<std::string>(spec.eval().task_groups(0).tasks().begin(),
                                     spec.eval().task_groups(0).tasks().end()),
            (std::vector<std::string>{"lambada", "hellaswag", "race-m", "race-h"}));
  EXPECT_EQ(spec.eval().task_groups(1).tasks_size(), 8);
}

// The paper's few-shot tables: unscrambling over draws, translation with demonstrations from
// the validation splits, for the MesaNet-small checkpoint.
TEST(Examples, EvalFewshotGpuIsThePapersFewshotTables) {
  mesa::v1::JobSpec spec = Load("eval_fewshot_gpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  EXPECT_EQ(spec.model().SerializeAsString(),
            Load("train_small_gpu.yaml").model().SerializeAsString());
  ASSERT_EQ(spec.eval().tasks_size(), 23);
  int unscramble = 0, translation = 0;
  for (const mesa::v1::EvalTask& t : spec.eval().tasks()) {
    if (t.adapter() == "unscramble") {
      ++unscramble;
      EXPECT_EQ(t.fewshot_draws(), t.num_fewshot() > 0 ? 10 : 0) << t.name();
    } else {
      ++translation;
      EXPECT_TRUE(absl::StartsWith(t.adapter(), "wmt_")) << t.name();
      EXPECT_EQ(t.fewshot_path().empty(), t.num_fewshot() == 0) << t.name();
      EXPECT_TRUE(spec::TaskScoresBleu(t)) << t.name();
    }
  }
  EXPECT_EQ(unscramble, 8);
  EXPECT_EQ(translation, 15);
}

// Parity: trained on up to 40 bits, evaluated per length bucket up to 256 by the same model.
TEST(Examples, ParityTrainsShortAndEvaluatesByLengthBucket) {
  const mesa::v1::JobSpec train = Load("train_parity_cpu.yaml");
  const mesa::v1::JobSpec eval = Load("eval_parity_cpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(train).ok()) << spec::ValidateJobSpec(train);
  EXPECT_TRUE(spec::ValidateJobSpec(eval).ok()) << spec::ValidateJobSpec(eval);
  EXPECT_EQ(eval.model().SerializeAsString(), train.model().SerializeAsString());
  EXPECT_EQ(eval.eval().checkpoint(), train.checkpoint().dir());
  ASSERT_EQ(eval.data().synthetic().tasks_size(), 4);
  int first = 1;
  for (const mesa::v1::SyntheticTask& t : eval.data().synthetic().tasks()) {
    EXPECT_EQ(t.task(), "parity");
    EXPECT_EQ(t.name(), absl::StrCat("len_", first, "_", t.seq_len()));
    EXPECT_EQ(std::max(1, t.score_from()), first);  // the buckets tile 1..256
    first = t.seq_len() + 1;
  }
  EXPECT_EQ(first, 257);
}

TEST(Examples, SyntheticTaskExamplesAreValid) {
  for (const char* name :
       {"train_mqar_cpu.yaml", "train_mad_cpu.yaml", "train_regbench_cpu.yaml"}) {
    mesa::v1::JobSpec spec = Load(name);
    EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << name << ": " << spec::ValidateJobSpec(spec);
    EXPECT_TRUE(spec.data().has_synthetic()) << name;
  }
  EXPECT_EQ(Load("train_mad_cpu.yaml").data().synthetic().tasks_size(), 6);
  EXPECT_EQ(Load("train_regbench_cpu.yaml").data().synthetic().tasks(0).num_states(), 4);
}

TEST(Examples, GenerateTinyCpuReadsTheTrainingExamplesCheckpoint) {
  mesa::v1::JobSpec spec = Load("generate_tiny_cpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  EXPECT_EQ(spec.type(), mesa::v1::JOB_TYPE_GENERATE);
  EXPECT_EQ(spec.generate().prompts_size(), 2);
  EXPECT_TRUE(spec.generate().has_temperature());
  EXPECT_EQ(spec.generate().stop(0), "\n\n");
  mesa::v1::JobSpec train = Load("train_tiny_cpu.yaml");
  EXPECT_TRUE(spec.generate().checkpoint().ends_with(train.checkpoint().dir()))
      << spec.generate().checkpoint() << " vs " << train.checkpoint().dir();
}

TEST(Examples, TrainHybridTinyCpuAlternatesGlaAndMesa) {
  mesa::v1::JobSpec spec = Load("train_hybrid_tiny_cpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  EXPECT_EQ(spec::LayerMixers(spec.model()),
            (std::vector<std::string>{"gla", "mesa", "gla", "mesa"}));
}

TEST(Examples, TrainHybridDeltaNetCpuAlternatesDeltaNetAndMesa) {
  mesa::v1::JobSpec spec = Load("train_hybrid_deltanet_cpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  EXPECT_EQ(spec::LayerMixers(spec.model()),
            (std::vector<std::string>{"deltanet", "mesa", "deltanet", "mesa"}));
  EXPECT_EQ(spec.resources().gpus(), 0) << "the CPU example";
}

TEST(Examples, TrainHybridDeltaNetGpuIsAMesaNetSmallSizedHybrid) {
  mesa::v1::JobSpec spec = Load("train_hybrid_deltanet_gpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  EXPECT_TRUE(spec::ValidateJobSpec(spec, {.device = "cuda"}).ok());
  EXPECT_GE(spec.resources().gpus(), 1);
  EXPECT_EQ(spec.model().d_model(), 768);
  EXPECT_EQ(spec::LayerMixers(spec.model()).size(), 14u);
  EXPECT_EQ(spec::LayerMixers(spec.model())[0], "deltanet");
  EXPECT_EQ(spec::LayerMixers(spec.model())[1], "mesa");
}

TEST(Examples, TrainHybridAttentionCpuEndsEachGroupWithAttention) {
  mesa::v1::JobSpec spec = Load("train_hybrid_attention_cpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  EXPECT_EQ(spec::LayerMixers(spec.model()),
            (std::vector<std::string>{"mesa", "mesa", "mesa", "attention"}));
  EXPECT_EQ(spec.model().attention_window(), 0) << "global attention";
  EXPECT_EQ(spec.resources().gpus(), 0) << "the CPU example";
}

TEST(Examples, TrainHybridAttentionGpuIsAMesaNetSmallSizedHybrid) {
  mesa::v1::JobSpec spec = Load("train_hybrid_attention_gpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  EXPECT_TRUE(spec::ValidateJobSpec(spec, {.device = "cuda"}).ok());
  EXPECT_EQ(spec.model().d_model(), 768);
  const std::vector<std::string> layers = spec::LayerMixers(spec.model());
  ASSERT_EQ(layers.size(), 14u);
  EXPECT_EQ(std::count(layers.begin(), layers.end(), "attention"), 2);
  EXPECT_EQ(layers[6], "attention");
  EXPECT_EQ(layers[13], "attention");
}

TEST(Examples, TrainHawkCpuIsEveryLayerHawk) {
  mesa::v1::JobSpec spec = Load("train_hawk_cpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  EXPECT_EQ(spec::LayerMixers(spec.model()),
            (std::vector<std::string>{"hawk", "hawk", "hawk", "hawk"}));
  EXPECT_EQ(spec.resources().gpus(), 0) << "the CPU example";
}

// The MesaNet paper's sizes (146.2M, 433.9M, 937.5M with a 50257 vocabulary, tied): Hawk-MesaNet
// at each within 1 %. Hawk-small at the paper's multiplier 1.25 is 1.5 % over (each Hawk layer
// has 6.5 % more than a Mesa layer; docs/math.md §8.8), within 2 %.
TEST(Examples, HawkExamplesMatchThePapersParameterCounts) {
  struct Want {
    const char* file;
    int layers;
    double parameters;
    const char* first;
    double tolerance = 0.01;
  };
  for (const Want& want : {Want{"train_hawk_gpu.yaml", 14, 146.2e6, "hawk", 0.02},
                           Want{"train_hawk_mesa_gpu.yaml", 14, 146.2e6, "hawk"},
                           Want{"train_hawk_mesa_400m_gpu.yaml", 28, 433.9e6, "hawk"},
                           Want{"train_hawk_mesa_1b_gpu.yaml", 28, 937.5e6, "hawk"}}) {
    SCOPED_TRACE(want.file);
    mesa::v1::JobSpec spec = Load(want.file);
    EXPECT_TRUE(spec::ValidateJobSpec(spec, {.device = "cuda"}).ok())
        << spec::ValidateJobSpec(spec, {.device = "cuda"});
    const std::vector<std::string> layers = spec::LayerMixers(spec.model());
    ASSERT_EQ(static_cast<int>(layers.size()), want.layers);
    EXPECT_EQ(layers[0], want.first);
    const double parameters = static_cast<double>(spec::ModelParameters(spec.model()));
    EXPECT_NEAR(parameters / want.parameters, 1.0, want.tolerance) << parameters;
  }
}

// The paper's other baselines: "Mamba2" (mamba2_mesa) and xLSTM (mlstm, whose layer matches the
// others' parameters by construction) at the paper's three sizes within 1 % of its parameter
// counts, and the mLSTM and Mamba-2 examples on the CPU and the SSD block's on a GPU.
TEST(Examples, Mamba2MesaMlstmAndMamba2) {
  for (const auto& [file, layers, parameters] :
       {std::tuple{"train_mamba2_mesa_gpu.yaml", 14, 146.2e6},
        std::tuple{"train_mamba2_mesa_400m_gpu.yaml", 28, 433.9e6},
        std::tuple{"train_mamba2_mesa_1b_gpu.yaml", 28, 937.5e6},
        std::tuple{"train_mlstm_gpu.yaml", 14, 146.2e6},
        std::tuple{"train_mlstm_400m_gpu.yaml", 28, 433.9e6},
        std::tuple{"train_mlstm_1b_gpu.yaml", 28, 937.5e6}}) {
    SCOPED_TRACE(file);
    mesa::v1::JobSpec m2 = Load(file);
    EXPECT_TRUE(spec::ValidateJobSpec(m2, {.device = "cuda"}).ok())
        << spec::ValidateJobSpec(m2, {.device = "cuda"});
    EXPECT_EQ(m2.model().mixer(),
              std::string(file).find("mlstm") != std::string::npos ? "mlstm" : "mamba2_mesa");
    EXPECT_EQ(m2.model().n_layers(), layers);
    EXPECT_NEAR(static_cast<double>(spec::ModelParameters(m2.model())) / parameters, 1.0, 0.01)
        << spec::ModelParameters(m2.model());
  }
  mesa::v1::JobSpec ml = Load("train_mlstm_cpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(ml).ok()) << spec::ValidateJobSpec(ml);
  EXPECT_EQ(ml.model().mixer(), "mlstm");
  EXPECT_EQ(ml.resources().gpus(), 0);
  mesa::v1::JobSpec ml_gpu = Load("train_mlstm_gpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(ml_gpu, {.device = "cuda"}).ok())
      << spec::ValidateJobSpec(ml_gpu, {.device = "cuda"});
  EXPECT_EQ(ml_gpu.model().mixer(), "mlstm");
  EXPECT_EQ(ml_gpu.resources().gpus(), 1);
  mesa::v1::JobSpec sd_gpu = Load("train_mamba2_gpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(sd_gpu, {.device = "cuda"}).ok())
      << spec::ValidateJobSpec(sd_gpu, {.device = "cuda"});
  EXPECT_EQ(sd_gpu.model().mixer(), "mamba2");
  mesa::v1::JobSpec sd = Load("train_mamba2_cpu.yaml");
  EXPECT_TRUE(spec::ValidateJobSpec(sd).ok()) << spec::ValidateJobSpec(sd);
  EXPECT_EQ(sd.model().mixer(), "mamba2");
  // Per layer: in-projection (2*128 + 2*32 + 4) x 64, conv 192 x 4 + 192, dt_bias, A_log, D (4
  // each), norm 128, out 64 x 128; plus the block's norms and SwiGLU.
  const int64_t mixer = (2 * 128 + 2 * 32 + 4) * 64 + 192 * 4 + 192 + 3 * 4 + 128 + 64 * 128;
  // Against the same model with mLSTM layers: q, k, v, two convolutions, two gates, and the
  // block's head norm and o_proj (which Mamba-2's block replaces by its own).
  mesa::v1::JobSpec mlstm = sd;
  mlstm.mutable_model()->set_mixer("mlstm");
  mlstm.mutable_model()->clear_ssm_head_dim();
  mlstm.mutable_model()->clear_ssm_state_dim();
  const int64_t mlstm_mixer = 3 * 64 * 64 + 2 * 64 * 4 + 2 * (2 * 64 + 2) + 32 + 64 * 64;
  EXPECT_EQ(spec::ModelParameters(sd.model()) - spec::ModelParameters(mlstm.model()),
            4 * (mixer - mlstm_mixer));
}

}  // namespace
}  // namespace mesa::testing
