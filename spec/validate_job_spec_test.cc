#include "spec/validate_job_spec.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "gtest/gtest.h"
#include "mesa/v1/trainer.pb.h"
#include "proto/trainer_events.h"
#include "spec/generation.h"
#include "spec/synthetic.h"
#include "spec/tasks.h"
#include "spec/testing.h"

namespace mesa::spec {
namespace {

using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::Message;
using ::mesa::v1::JobSpec;

bool IsInteger(const std::string& path) {
  const Message* message = &JobSpec::default_instance();
  std::vector<std::string> parts = absl::StrSplit(path, '.');
  const FieldDescriptor* field = nullptr;
  for (size_t i = 0; i < parts.size(); ++i) {
    field = message->GetDescriptor()->FindFieldByName(parts[i]);
    if (i + 1 < parts.size()) message = &message->GetReflection()->GetMessage(*message, field);
  }
  return field->cpp_type() != FieldDescriptor::CPPTYPE_FLOAT;
}

// Problems of `spec` that are range violations of `path`.
bool RangeProblem(const JobSpec& spec, const std::string& path) {
  for (const std::string& p : JobSpecProblems(spec)) {
    if (absl::StartsWith(p, "spec." + path + ": must be between")) return true;
  }
  return false;
}

TEST(ValidateJobSpec, ValidSpecsPass) {
  EXPECT_TRUE(ValidateJobSpec(ValidTrainSpec()).ok()) << ValidateJobSpec(ValidTrainSpec());
  EXPECT_TRUE(ValidateJobSpec(ValidEvalSpec()).ok()) << ValidateJobSpec(ValidEvalSpec());
}

// Bounds and values read as people write them: 16777216, not 1.67772e+07.
TEST(ValidateJobSpec, RangeErrorsPrintWholeNumbersInFull) {
  JobSpec spec = ValidTrainSpec();
  spec.mutable_model()->set_vocab_size(20000000);
  spec.mutable_optimizer()->set_lr(12.5f);
  spec.mutable_training()->set_steps(int64_t{1} << 40);
  const std::vector<std::string> problems = JobSpecProblems(spec);
  const std::string all = absl::StrJoin(problems, "\n");
  EXPECT_TRUE(
      absl::StrContains(all, "spec.model.vocab_size: must be between 2 and 16777216, got 20000000"))
      << all;
  EXPECT_TRUE(absl::StrContains(all, "spec.optimizer.lr: must be between 0 and 10, got 12.5"))
      << all;
  EXPECT_TRUE(absl::StrContains(all, "got 1099511627776")) << all;
  EXPECT_FALSE(absl::StrContains(all, "e+")) << all;
}

TEST(ValidateJobSpec, CheckpointResumeIsAutoNeverOrMust) {
  JobSpec spec = ValidTrainSpec();
  for (const char* mode : {"", "auto", "never", "must"}) {
    spec.mutable_checkpoint()->set_resume(mode);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << mode << ": " << ValidateJobSpec(spec);
  }
  spec.mutable_checkpoint()->set_resume("always");
  const absl::Status s = ValidateJobSpec(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(
      s.message(), "spec.checkpoint.resume: must be auto, never or must, got \"always\""))
      << s;
}

TEST(ValidateJobSpec, WalksEveryNumericLimit) {
  // Each bound is accepted, and the value just past it is refused naming the field; NaN too.
  int walked = 0;
  for (const NumericLimit& limit : NumericLimits()) {
    SCOPED_TRACE(limit.path);
    const JobSpec base = ValidSpecFor(limit.applies_to);
    const bool integer = IsInteger(limit.path);
    const double step = integer ? 1 : std::max(1e-3, 1e-3 * std::abs(limit.hi));
    for (double ok : {limit.lo, limit.hi}) {
      JobSpec s = base;
      SetNumeric(s, limit.path, ok);
      if (std::string(limit.path) == "optimizer.warmup_steps") {
        SetNumeric(s, "training.steps", ok > 0 ? ok : 1);
      }
      EXPECT_FALSE(RangeProblem(s, limit.path)) << "at the bound " << ok;
    }
    for (double bad : {limit.lo - step, limit.hi + step}) {
      JobSpec s = base;
      SetNumeric(s, limit.path, bad);
      EXPECT_TRUE(RangeProblem(s, limit.path)) << "past the bound: " << bad;
      EXPECT_EQ(ValidateJobSpec(s).code(), absl::StatusCode::kInvalidArgument);
    }
    if (!integer) {
      JobSpec s = base;
      SetNumeric(s, limit.path, NAN);
      EXPECT_TRUE(RangeProblem(s, limit.path)) << "NaN";
    }
    ++walked;
  }
  EXPECT_GE(walked, 38);
}

TEST(ValidateJobSpec, KernelLimitsComeFromTheKernels) {
  JobSpec s = ValidTrainSpec();
  s.mutable_model()->set_head_dim(40);  // in range, not a multiple of 16
  EXPECT_TRUE(absl::StrContains(ValidateJobSpec(s).message(),
                                "spec.model.head_dim: must be a multiple of 16"))
      << ValidateJobSpec(s);
  s.mutable_model()->set_head_dim(256);
  EXPECT_TRUE(RangeProblem(s, "model.head_dim"));
  s = ValidTrainSpec();
  s.mutable_model()->set_conv_width(9);
  EXPECT_TRUE(RangeProblem(s, "model.conv_width"));
}

TEST(ValidateJobSpec, CrossFieldRules) {
  auto message = [](const JobSpec& s, const ValidateOptions& o = {}) {
    return std::string(ValidateJobSpec(s, o).message());
  };
  JobSpec s = ValidTrainSpec();
  s.mutable_model()->set_mixer("gla");
  s.mutable_model()->set_cg_steps(5);
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.cg_steps: applies only to \"mesa\""));
  s = ValidTrainSpec();
  s.mutable_model()->set_vocab_size(100);
  EXPECT_TRUE(absl::StrContains(message(s), ">= 257 for the byte tokenizer"));
  s.mutable_data()->set_tokenizer("gpt2");
  s.mutable_model()->set_vocab_size(50000);
  EXPECT_TRUE(absl::StrContains(message(s), ">= 50257 for the gpt2 tokenizer"));
  s = ValidTrainSpec();
  s.mutable_resources()->set_gpus(3);  // 8 sequences over 3 ranks
  EXPECT_TRUE(absl::StrContains(message(s), "spec.data.batch_size: must be divisible"));
  EXPECT_TRUE(ValidateJobSpec(s, {.world_size = 4}).ok()) << "mpirun's world size wins";
  s = ValidTrainSpec();
  s.mutable_model()->set_d_model(16384);
  s.mutable_model()->set_n_layers(512);
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model: too many parameters"));
  s = ValidTrainSpec();
  s.mutable_optimizer()->set_warmup_steps(101);
  EXPECT_TRUE(absl::StrContains(message(s), "spec.optimizer.warmup_steps: must be at most"));
  s = ValidTrainSpec();
  s.mutable_training()->set_eval_interval(10);
  EXPECT_TRUE(absl::StrContains(message(s), "spec.data.val_path: required when"));
  s = ValidTrainSpec();
  s.mutable_optimizer()->clear_lr();
  EXPECT_TRUE(absl::StrContains(message(s), "spec.optimizer.lr: required for training"));
  s = ValidTrainSpec();
  s.mutable_resources()->set_gpus(0);
  s.mutable_training()->set_device("cuda");
  EXPECT_TRUE(absl::StrContains(message(s), "spec.training.device:"));
  s.mutable_training()->set_device("");
  s.mutable_training()->set_precision("bf16");
  EXPECT_TRUE(absl::StrContains(message(s), "spec.training.precision:"));
  s.mutable_resources()->set_gpus(1);
  EXPECT_TRUE(ValidateJobSpec(s).ok());
  EXPECT_TRUE(absl::StrContains(message(s, {.device = "cpu"}), "needs a CUDA device"));
  JobSpec e = ValidEvalSpec();
  e.mutable_eval()->clear_checkpoint();
  e.mutable_data()->clear_val_path();
  EXPECT_TRUE(absl::StrContains(message(e), "spec.eval.checkpoint: required"));
  EXPECT_TRUE(absl::StrContains(message(e), "spec.data.val_path: required for evaluation"));
  e.clear_model();
  EXPECT_TRUE(absl::StrContains(message(e), "spec.model.d_model:")) << "an eval needs the model";
}

// training.context_parallel: divides the ranks; the slices are whole 64-token chunks; the batch
// is split over the data-parallel replicas only (ranks / context_parallel).
TEST(ValidateJobSpec, ContextParallel) {
  JobSpec s = ValidTrainSpec("cp", /*gpus=*/4);  // seq_len 128, batch 8
  s.mutable_training()->set_context_parallel(2);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  s.mutable_training()->set_context_parallel(3);
  EXPECT_TRUE(absl::StrContains(ValidateJobSpec(s).message(),
                                "spec.training.context_parallel: must divide the rank count (4)"));
  s.mutable_training()->set_context_parallel(4);  // slices of 32 tokens
  EXPECT_TRUE(absl::StrContains(
      ValidateJobSpec(s).message(),
      "spec.data.seq_len: must split into 4 context-parallel slices of a whole number of "
      "64-token chunks (a multiple of 256), got 128"));
  s.mutable_data()->set_seq_len(256);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  // 4 ranks, 2 per sequence: 2 replicas; 3 sequences cannot be split over them.
  s.mutable_training()->set_context_parallel(2);
  s.mutable_data()->set_batch_size(3);
  EXPECT_TRUE(absl::StrContains(ValidateJobSpec(s).message(),
                                "spec.data.batch_size: must be divisible by grad_accum_steps (1) x "
                                "data-parallel ranks (2: 4 ranks / context_parallel 2), got 3"));
  s.mutable_data()->set_batch_size(2);  // one sequence per replica: fine with context parallelism
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  // An evaluation slices every dataset like the training sequences.
  JobSpec e = s;
  e.set_type(mesa::v1::JOB_TYPE_EVAL);
  e.mutable_eval()->set_checkpoint("/ckpt/x");
  e.mutable_optimizer()->clear_lr();
  e.mutable_training()->clear_steps();
  e.mutable_training()->clear_eval_interval();
  e.mutable_data()->clear_train_path();
  e.mutable_data()->clear_val_path();
  mesa::v1::EvalDataset* d = e.mutable_eval()->add_datasets();
  d->set_name("long");
  d->set_val_path("/data/long/val_*.bin");
  d->set_seq_len(384);  // 3 chunks of 64 per slice
  EXPECT_TRUE(ValidateJobSpec(e).ok()) << ValidateJobSpec(e);
  d->set_seq_len(320);
  EXPECT_TRUE(absl::StrContains(
      ValidateJobSpec(e).message(),
      "spec.eval.datasets[0].seq_len: must split into 2 context-parallel slices of a whole number "
      "of 64-token chunks (a multiple of 128), got 320"))
      << ValidateJobSpec(e);
  d->set_seq_len(384);
  mesa::v1::EvalTask* task = e.mutable_eval()->add_tasks();
  task->set_name("tiny");
  task->set_path("/data/tasks/tiny.jsonl");
  EXPECT_TRUE(absl::StrContains(ValidateJobSpec(e).message(),
                                "spec.eval.tasks: task scoring runs on whole sequences: not with "
                                "training.context_parallel > 1"))
      << ValidateJobSpec(e);
  // Synthetic tasks are whole sequences of data.seq_len like shards: sliced the same way.
  JobSpec syn = s;
  syn.mutable_data()->clear_train_path();
  syn.mutable_data()->clear_val_path();
  syn.mutable_data()->mutable_synthetic()->add_tasks()->set_task("mqar");
  EXPECT_TRUE(ValidateJobSpec(syn).ok()) << ValidateJobSpec(syn);
  // Attention layers have no fixed-size state to hand on.
  s.mutable_model()->clear_mixer();
  s.mutable_model()->add_layer_mixers("mesa");
  s.mutable_model()->add_layer_mixers("attention");
  EXPECT_TRUE(absl::StrContains(ValidateJobSpec(s).message(),
                                "spec.training.context_parallel: applies only to models without "
                                "attention layers"))
      << ValidateJobSpec(s);
}

// data.reset_at_bos: packed documents of token shards, per whole row.
TEST(ValidateJobSpec, ResetAtBosNeedsShardsAndWholeRows) {
  JobSpec s = ValidTrainSpec("resets", /*gpus=*/2);
  s.mutable_data()->set_reset_at_bos(true);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  s.mutable_data()->set_reset_at_bos(false);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  s.mutable_training()->set_context_parallel(2);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);  // off: fine
  s.mutable_data()->set_reset_at_bos(true);
  EXPECT_TRUE(absl::StrContains(ValidateJobSpec(s).message(),
                                "spec.data.reset_at_bos: not with training.context_parallel > 1"))
      << ValidateJobSpec(s);
  JobSpec syn = ValidTrainSpec();
  syn.mutable_data()->clear_train_path();
  syn.mutable_data()->set_seq_len(256);
  syn.mutable_data()->mutable_synthetic()->add_tasks()->set_task("mqar");
  EXPECT_TRUE(ValidateJobSpec(syn).ok()) << ValidateJobSpec(syn);
  syn.mutable_data()->set_reset_at_bos(true);
  EXPECT_TRUE(absl::StrContains(ValidateJobSpec(syn).message(),
                                "spec.data.reset_at_bos: not with data.synthetic"))
      << ValidateJobSpec(syn);
}

TEST(ValidateJobSpec, LayerMixers) {
  auto message = [](const JobSpec& s) { return std::string(ValidateJobSpec(s).message()); };
  JobSpec s = ValidTrainSpec();  // 2 layers
  s.mutable_model()->add_layer_mixers("gla");
  s.mutable_model()->add_layer_mixers("mesa");
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  EXPECT_EQ(LayerMixers(s.model()), (std::vector<std::string>{"gla", "mesa"}));
  s.mutable_model()->set_n_layers(4);  // the pattern repeats
  EXPECT_EQ(LayerMixers(s.model()), (std::vector<std::string>{"gla", "mesa", "gla", "mesa"}));
  s.mutable_model()->set_n_layers(3);
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.layer_mixers: a pattern of 2 must divide"))
      << message(s);
  s = ValidTrainSpec();
  s.mutable_model()->add_layer_mixers("transformer");
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.layer_mixers[0]: must be one of"));
  s = ValidTrainSpec();
  s.mutable_model()->set_mixer("mesa");
  s.mutable_model()->add_layer_mixers("gla");
  EXPECT_TRUE(absl::StrContains(message(s), "not both"));
  // Options of the solve where no layer solves.
  s = ValidTrainSpec();
  s.mutable_model()->add_layer_mixers("gla");
  s.mutable_model()->set_cg_tol(1e-4f);
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.cg_tol: applies only to \"mesa\""));
  s.mutable_model()->add_layer_mixers("mesa");
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << "a Mesa layer makes cg_tol meaningful";
}

TEST(ValidateJobSpec, DeltaRuleMixersRunOnEveryBackend) {
  JobSpec s = ValidTrainSpec("delta", 0);
  s.mutable_model()->add_layer_mixers("deltanet");
  s.mutable_model()->add_layer_mixers("mesa");
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  s.mutable_resources()->set_gpus(1);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << "CUDA kernels exist: " << ValidateJobSpec(s);
  EXPECT_TRUE(ValidateJobSpec(s, {.device = "cuda"}).ok());
  s.mutable_resources()->set_gpus(0);
  EXPECT_TRUE(ValidateJobSpec(s, {.device = "cpu"}).ok());
  s.mutable_model()->clear_layer_mixers();
  s.mutable_model()->set_mixer("gated_deltanet");
  s.mutable_model()->clear_cg_steps();
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
}

// Hawk's options apply only with a hawk layer; its width must split into one gate block per head.
TEST(ValidateJobSpec, HawkWidthAndInit) {
  auto message = [](const JobSpec& s) { return std::string(ValidateJobSpec(s).message()); };
  JobSpec s = ValidTrainSpec("hawk", 0);
  s.mutable_model()->add_layer_mixers("hawk");
  s.mutable_model()->add_layer_mixers("mesa");
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  s.mutable_model()->set_hawk_init("paper");
  s.mutable_model()->set_rnn_width_mult(1.5f);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  s.mutable_model()->set_hawk_init("griffin");
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.hawk_init: must be \"released\" or"))
      << message(s);
  s.mutable_model()->clear_hawk_init();
  s.mutable_model()->set_rnn_width_mult(17);
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.rnn_width_mult:")) << message(s);
  // A width that does not split into n_heads blocks.
  s.mutable_model()->set_rnn_width_mult(1.0f + 1.0f / s.model().d_model());
  EXPECT_TRUE(absl::StrContains(message(s), "must be a positive multiple of n_heads"))
      << message(s);
  // Without a hawk layer the options are refused.
  s.mutable_model()->set_rnn_width_mult(1.25f);
  s.mutable_model()->set_layer_mixers(0, "mesa");
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.rnn_width_mult: applies only to \"hawk\""))
      << message(s);
}

// Every mixer trains on a GPU: the newest ones (mlstm, mamba2) and the paper's "Mamba2".
TEST(ValidateJobSpec, EveryMixerRunsOnAGpu) {
  for (const char* mixer : {"mlstm", "mamba2", "mamba2_mesa", "hawk"}) {
    JobSpec s = ValidTrainSpec("mixer-on-gpu", 0);
    s.mutable_model()->set_mixer(mixer);
    s.mutable_model()->clear_cg_steps();
    s.mutable_resources()->set_gpus(1);
    EXPECT_TRUE(ValidateJobSpec(s).ok()) << mixer << ": " << ValidateJobSpec(s);
  }
}

// Mamba-2's widths: only with a mamba2 layer, and the inner width must split into SSD heads.
TEST(ValidateJobSpec, Mamba2Widths) {
  auto message = [](const JobSpec& s) { return std::string(ValidateJobSpec(s).message()); };
  JobSpec s = ValidTrainSpec("mamba2", 0);
  s.mutable_model()->clear_cg_steps();
  s.mutable_model()->set_ssm_state_dim(64);
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.ssm_state_dim: applies only to \"mamba2\""))
      << message(s);
  s.mutable_model()->set_mixer("mamba2");
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << message(s);
  s.mutable_model()->set_ssm_head_dim(48);  // 2 x d_model is not a multiple of 48
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.ssm_head_dim: the inner width"))
      << message(s);
  s.mutable_model()->set_ssm_head_dim(2000);
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.ssm_head_dim:")) << message(s);
  s.mutable_model()->clear_ssm_head_dim();
  s.mutable_resources()->set_gpus(1);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << message(s);
  // The CUDA kernels' widths: a state of 256 trains on the CPU only.
  s.mutable_model()->set_ssm_state_dim(256);
  EXPECT_TRUE(
      absl::StrContains(message(s), "spec.model.ssm_state_dim: must be at most 128 on a GPU"))
      << message(s);
  s.mutable_resources()->set_gpus(0);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << message(s);
}

TEST(ValidateJobSpec, AttentionWindow) {
  auto message = [](const JobSpec& s) { return std::string(ValidateJobSpec(s).message()); };
  JobSpec s = ValidTrainSpec("attn", 0);
  s.mutable_model()->add_layer_mixers("mesa");
  s.mutable_model()->add_layer_mixers("attention");
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << "global attention: no window";
  s.mutable_model()->set_attention_window(1024);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << "a windowed attention layer";
  s.mutable_model()->set_attention_window(-1);
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.attention_window:")) << message(s);
  s.mutable_model()->set_attention_window((1 << 20) + 1);
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.attention_window:")) << message(s);
  // "swa" layers need the window.
  s.mutable_model()->set_layer_mixers(1, "swa");
  s.mutable_model()->clear_attention_window();
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.attention_window: \"swa\" layers need"))
      << message(s);
  s.mutable_model()->set_attention_window(64);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  // A window where no layer attends.
  s.mutable_model()->set_layer_mixers(1, "gla");
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.attention_window: applies only to"))
      << message(s);
  // Attention layers have no solve: the CG options are refused for them alone.
  s.mutable_model()->clear_layer_mixers();
  s.mutable_model()->set_mixer("attention");
  s.mutable_model()->set_cg_steps(30);
  EXPECT_TRUE(absl::StrContains(message(s), "spec.model.cg_steps: applies only to \"mesa\""))
      << message(s);
  s.mutable_model()->clear_cg_steps();
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  EXPECT_TRUE(ValidateJobSpec(s, {.device = "cpu"}).ok());
}

TEST(ValidateJobSpec, TheServiceTakesAbsolutePathsOnly) {
  JobSpec s = ValidTrainSpec();
  s.mutable_data()->set_train_path("/data/a.bin, data/b.bin");
  s.mutable_checkpoint()->set_dir("ckpt/mine");
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << "mesa-train by hand resolves relative paths";
  const std::string message(ValidateJobSpec(s, {.require_absolute_paths = true}).message());
  EXPECT_TRUE(absl::StrContains(message, "spec.data.train_path: must be an absolute path"))
      << message;
  EXPECT_TRUE(absl::StrContains(message, "spec.checkpoint.dir: must be an absolute path"))
      << message;
  s.mutable_data()->set_train_path("/data/a.bin,/data/b.bin");
  s.mutable_checkpoint()->set_dir("/ckpt/mine");
  EXPECT_TRUE(ValidateJobSpec(s, {.require_absolute_paths = true}).ok());
}

TEST(ValidateJobSpec, NamesLabelsAndStrings) {
  JobSpec s = ValidTrainSpec();
  s.set_name("Bad_Name");
  s.set_queue("Q");
  s.mutable_data()->set_tokenizer("sentencepiece");
  s.mutable_model()->set_mixer("transformer");
  (*s.mutable_labels())["-bad"] = "x";
  (*s.mutable_labels())["nul"] = std::string("a\0b", 3);
  (*s.mutable_labels())["tab"] = "a\tb";
  (*s.mutable_labels())["fine"] = "caf\xc3\xa9 au lait";
  s.mutable_checkpoint()->set_dir(std::string(kMaxPathLength + 1, 'a'));
  const std::vector<std::string> problems = JobSpecProblems(s);
  for (const char* path : {"spec.name:", "spec.queue:", "spec.data.tokenizer:", "spec.model.mixer:",
                           "spec.labels[\"-bad\"]:", "spec.checkpoint.dir:",
                           "spec.labels[\"nul\"]: value must not contain control characters (byte "
                           "2 is 0x00)",
                           "spec.labels[\"tab\"]: value must not contain control"}) {
    bool found = false;
    for (const std::string& p : problems) found |= absl::StartsWith(p, path);
    EXPECT_TRUE(found) << path;
  }
  for (const std::string& p : problems) EXPECT_FALSE(absl::StrContains(p, "\"fine\"")) << p;
  EXPECT_TRUE(IsValidName("mesa-small-2"));
  EXPECT_FALSE(IsValidName("1abc"));
  EXPECT_FALSE(IsValidName(std::string(64, 'a')));
}

std::string Problem(const mesa::v1::JobSpec& s, const ValidateOptions& options = {}) {
  return std::string(ValidateJobSpec(s, options).message());
}

TEST(ValidateJobSpec, CgSweepIsForEvaluatingMesaLayers) {
  mesa::v1::JobSpec s = ValidEvalSpec();
  s.mutable_eval()->mutable_cg_sweep()->add_fixed_steps(1);
  s.mutable_eval()->mutable_cg_sweep()->add_tolerances(1e-4f);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << Problem(s);
  mesa::v1::JobSpec t = ValidTrainSpec();
  *t.mutable_eval()->mutable_cg_sweep() = s.eval().cg_sweep();
  EXPECT_TRUE(absl::StrContains(Problem(t), "spec.eval.cg_sweep: applies only to evaluation"));
  mesa::v1::JobSpec bad = s;
  bad.mutable_eval()->mutable_cg_sweep()->add_fixed_steps(-1);
  bad.mutable_eval()->mutable_cg_sweep()->add_tolerances(0);
  EXPECT_TRUE(absl::StrContains(Problem(bad), "spec.eval.cg_sweep.fixed_steps[1]: must be"));
  EXPECT_TRUE(
      absl::StrContains(Problem(bad), "spec.eval.cg_sweep.tolerances[1]: must be in (0, 1]"));
  bad = s;
  for (int i = 0; i < kMaxCgSweepSettings; ++i)
    bad.mutable_eval()->mutable_cg_sweep()->add_fixed_steps(2);
  EXPECT_TRUE(absl::StrContains(Problem(bad), "spec.eval.cg_sweep: 1 to "));
  bad = s;
  bad.mutable_model()->set_mixer("gla");
  EXPECT_TRUE(absl::StrContains(Problem(bad), "applies only to models with \"mesa\" layers"));
}

// Array jobs: the axes, then every child as a plain EVAL job; eval.shard; document windows and
// averaged curves.
TEST(ValidateJobSpec, ArraysShardsDocumentWindowsAndAveragedCurves) {
  mesa::v1::JobSpec s = ValidEvalSpec();
  s.mutable_eval()->add_tasks()->set_name("t");
  s.mutable_eval()->mutable_tasks(0)->set_path("/data/t.jsonl");
  s.mutable_array()->add_checkpoints("/ckpt/a");
  s.mutable_array()->add_checkpoints("/ckpt/b");
  s.mutable_array()->add_cg_settings()->set_mode("fixed");
  s.mutable_array()->set_shards(2);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << Problem(s);

  mesa::v1::JobSpec bad = s;
  bad.mutable_array()->mutable_cg_settings(0)->set_mode("adaptive");
  EXPECT_TRUE(absl::StrContains(Problem(bad),
                                "spec.array.cg_settings[0].mode: must be fixed or "
                                "tolerance, got \"adaptive\""))
      << Problem(bad);
  bad = s;
  bad.mutable_array()->add_checkpoints("relative/ckpt");  // each child is validated
  EXPECT_TRUE(absl::StrContains(
      Problem(bad, {.require_absolute_paths = true}),
      "array child tiny-eval-c2-s0-k0: spec.eval.checkpoint: must be an absolute path"))
      << Problem(bad, {.require_absolute_paths = true});
  bad = s;
  bad.mutable_model()->set_mixer("deltanet");
  bad.mutable_model()->clear_cg_steps();
  EXPECT_TRUE(absl::StrContains(Problem(bad),
                                "spec.array.cg_settings: applies only to models "
                                "with \"mesa\" layers"))
      << Problem(bad);
  bad = s;
  bad.mutable_eval()->mutable_shard()->set_count(2);
  EXPECT_TRUE(absl::StrContains(Problem(bad), "spec.eval.shard: is set per child")) << Problem(bad);
  bad = s;
  bad.set_type(mesa::v1::JOB_TYPE_TRAIN);
  EXPECT_TRUE(absl::StrContains(Problem(bad), "spec.array: applies only to JOB_TYPE_EVAL"))
      << Problem(bad);

  mesa::v1::JobSpec shard = s;
  shard.clear_array();
  shard.mutable_eval()->mutable_shard()->set_count(3);
  shard.mutable_eval()->mutable_shard()->set_index(2);
  EXPECT_TRUE(ValidateJobSpec(shard).ok()) << Problem(shard);
  shard.mutable_eval()->mutable_shard()->set_index(3);
  EXPECT_TRUE(absl::StrContains(Problem(shard), "spec.eval.shard.index: must be between 0 and 2"))
      << Problem(shard);

  mesa::v1::JobSpec curves = ValidEvalSpec();
  curves.mutable_data()->clear_val_path();
  for (const char* name : {"a", "b"}) {
    mesa::v1::EvalDataset& d = *curves.mutable_eval()->add_datasets();
    d.set_name(name);
    d.set_val_path("/data/val_*.bin");
    d.set_windows("documents");
  }
  curves.mutable_eval()->set_per_position(true);
  curves.mutable_eval()->add_average_curves("a");
  curves.mutable_eval()->add_average_curves("b");
  EXPECT_TRUE(ValidateJobSpec(curves).ok()) << Problem(curves);
  curves.mutable_eval()->mutable_datasets(1)->set_windows("sentences");
  curves.mutable_eval()->add_average_curves("c");
  curves.mutable_eval()->add_average_curves("a");
  curves.mutable_eval()->set_per_position(false);
  const std::string problems = Problem(curves);
  for (const char* expected : {
           "spec.eval.datasets[1].windows: must be one of \"packed\", \"documents\"",
           "spec.eval.average_curves: needs eval.per_position",
           "spec.eval.average_curves[2]: \"c\" names no eval.datasets entry",
           "spec.eval.average_curves[3]: \"a\" is listed twice",
       }) {
    EXPECT_TRUE(absl::StrContains(problems, expected)) << expected << "\n" << problems;
  }
}

TEST(ValidateJobSpec, EvalTaskScoringOptionsAndGroups) {
  mesa::v1::JobSpec s = ValidEvalSpec();
  s.mutable_data()->clear_val_path();
  s.mutable_eval()->set_checkpoint("/data/ckpt/tiny");
  for (const char* name : {"hellaswag", "lambada", "mine"}) {
    mesa::v1::EvalTask* t = s.mutable_eval()->add_tasks();
    t->set_name(name);
    t->set_path(absl::StrCat("/data/tasks/", name, ".jsonl"));
    if (std::string(name) != "mine") t->set_adapter(name);
  }
  s.mutable_eval()->mutable_tasks(0)->add_metrics("acc_tok");
  s.mutable_eval()->mutable_tasks(0)->add_metrics("acc_norm");
  s.mutable_eval()->mutable_tasks(1)->set_truncation("fail");
  s.mutable_eval()->mutable_tasks(2)->set_max_length(s.data().seq_len());
  mesa::v1::EvalTaskGroup* g = s.mutable_eval()->add_task_groups();
  g->set_name("global");
  g->add_tasks("hellaswag");
  g->add_tasks("lambada");
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << Problem(s);

  mesa::v1::JobSpec bad = s;
  mesa::v1::EvalTask& hs = *bad.mutable_eval()->mutable_tasks(0);
  hs.set_adapter("mmlu");
  hs.add_metrics("f1");
  hs.add_metrics("acc_tok");
  hs.set_primary_metric("acc");
  hs.set_truncation("right");
  hs.set_max_length(s.data().seq_len() + 1);
  bad.mutable_eval()->mutable_tasks(1)->add_metrics("acc_norm");  // LAMBADA has no choices
  bad.mutable_eval()->mutable_tasks(1)->set_primary_metric("acc_norm");
  g = bad.mutable_eval()->mutable_task_groups(0);
  g->set_name("mine");
  g->add_tasks("piqa");
  g->add_tasks("lambada");
  bad.mutable_eval()->add_task_groups()->set_name("local");
  const std::string problems = Problem(bad);
  for (const char* expected : {
           "spec.eval.tasks[0].adapter: must be one of \"lambada\", \"hellaswag\"",
           "spec.eval.tasks[0].metrics[2]: must be one of \"acc\"",
           "spec.eval.tasks[0].metrics[3]: \"acc_tok\" is listed twice",
           "spec.eval.tasks[0].primary_metric: \"acc\" is not among metrics",
           "spec.eval.tasks[0].truncation: must be one of \"left\", \"fail\"",
           "spec.eval.tasks[0].max_length: must be between 0 and data.seq_len",
           "spec.eval.tasks[1].metrics[0]: lambada items do not give acc_norm",
           "spec.eval.task_groups[0].name: \"mine\" is used twice",
           "spec.eval.task_groups[0].tasks[2]: \"piqa\" names no eval.tasks entry",
           "spec.eval.task_groups[0].tasks[3]: \"lambada\" is listed twice",
           "spec.eval.task_groups[1].tasks: required",
       }) {
    EXPECT_TRUE(absl::StrContains(problems, expected)) << expected << "\n" << problems;
  }
  // Metrics that leave out the default primary metric need one named.
  bad = s;
  bad.mutable_eval()->mutable_tasks(2)->add_metrics("acc_norm");
  EXPECT_TRUE(absl::StrContains(Problem(bad),
                                "spec.eval.tasks[2].primary_metric: required when metrics leave "
                                "out the default (acc)"))
      << Problem(bad);
  bad = s;
  bad.mutable_eval()->clear_tasks();
  EXPECT_TRUE(absl::StrContains(Problem(bad), "spec.eval.task_groups: needs eval.tasks"));
  // Generated needle-in-a-haystack items: no path, known variants, text for the text haystacks.
  mesa::v1::JobSpec niah = s;
  mesa::v1::EvalTask& needles = *niah.mutable_eval()->mutable_tasks(2);
  needles.clear_path();
  needles.mutable_niah()->add_variants("single_1");
  needles.mutable_niah()->add_lengths(32768);
  EXPECT_TRUE(ValidateJobSpec(niah).ok()) << Problem(niah);
  // The greedy check: one asked value per item.
  needles.mutable_niah()->set_score("greedy");
  EXPECT_TRUE(ValidateJobSpec(niah).ok()) << Problem(niah);
  mesa::v1::JobSpec several = niah;
  several.mutable_eval()->mutable_tasks(2)->mutable_niah()->add_variants("multiquery");
  several.mutable_eval()->mutable_tasks(2)->mutable_niah()->set_haystack_path("/data/h.txt");
  EXPECT_TRUE(absl::StrContains(Problem(several),
                                "spec.eval.tasks[2].niah.score: greedy checks one asked value; "
                                "multiquery asks several"))
      << Problem(several);
  needles.mutable_niah()->set_score("sample");
  EXPECT_TRUE(absl::StrContains(Problem(niah), "spec.eval.tasks[2].niah.score: must be one of"))
      << Problem(niah);
  needles.mutable_niah()->clear_score();
  needles.set_path("/data/x.jsonl");
  needles.mutable_niah()->add_variants("single_2");
  needles.mutable_niah()->add_variants("single_1");
  needles.mutable_niah()->add_variants("needle_9");
  needles.mutable_niah()->add_lengths(0);
  needles.mutable_niah()->set_items(20000);
  needles.add_metrics("acc");
  const std::string niah_problems = Problem(niah);
  for (const char* expected : {
           "spec.eval.tasks[2].niah: generates its items; leave path out",
           "spec.eval.tasks[2].niah.variants[2]: \"single_1\" is listed twice",
           "spec.eval.tasks[2].niah.variants[3]: must be one of",
           "spec.eval.tasks[2].niah.haystack_path: required by the text-haystack variants",
           "spec.eval.tasks[2].niah.lengths[1]: must be between 1 and",
           "spec.eval.tasks[2].niah.items: must be between 0 and 10000",
           "spec.eval.tasks[2].metrics[0]: niah items do not give acc",
       }) {
    EXPECT_TRUE(absl::StrContains(niah_problems, expected)) << expected << "\n" << niah_problems;
  }
  // Generation options: the recall suite's adapters take them, likelihood adapters do not.
  bad = s;
  bad.mutable_eval()->mutable_tasks(0)->add_stop("\n");
  EXPECT_TRUE(
      absl::StrContains(Problem(bad), "spec.eval.tasks[0].stop: applies to generation items"))
      << Problem(bad);
  mesa::v1::JobSpec recall = s;
  mesa::v1::EvalTask& swde = *recall.mutable_eval()->mutable_tasks(2);
  swde.set_adapter("based_swde");
  swde.set_max_new_tokens(48);
  swde.add_stop("\n");
  EXPECT_TRUE(ValidateJobSpec(recall).ok()) << Problem(recall);
  swde.set_max_new_tokens(recall.data().seq_len());
  swde.add_stop("");
  const std::string recall_problems = Problem(recall);
  EXPECT_TRUE(absl::StrContains(recall_problems,
                                "spec.eval.tasks[2].max_new_tokens: must be between 0 and"))
      << recall_problems;
  EXPECT_TRUE(absl::StrContains(recall_problems, "spec.eval.tasks[2].stop[1]: must be 1 to"))
      << recall_problems;
}

// Few-shot settings: draws and a demonstrations file need demonstrations; niah items take none;
// the demonstrations file is confined like the task file; BLEU only on generation items.
TEST(ValidateJobSpec, FewshotDrawsAndBleu) {
  mesa::v1::JobSpec s = ValidEvalSpec();
  s.mutable_data()->clear_val_path();
  s.mutable_eval()->set_checkpoint("/data/ckpt/tiny");
  mesa::v1::EvalTask* wmt = s.mutable_eval()->add_tasks();
  wmt->set_name("wmt");
  wmt->set_path("/data/tasks/wmt14_test.jsonl");
  wmt->set_adapter("wmt_fr_en");
  wmt->set_num_fewshot(5);
  wmt->set_fewshot_draws(kMaxFewshotDraws);
  wmt->set_fewshot_seed(7);
  wmt->set_fewshot_path("/data/tasks/wmt14_validation.jsonl");
  const ValidateOptions confined = {.require_absolute_paths = true, .data_roots = {"/data"}};
  EXPECT_TRUE(ValidateJobSpec(s, confined).ok()) << Problem(s, confined);
  EXPECT_TRUE(TaskScoresBleu(*wmt));

  mesa::v1::JobSpec bad = s;
  mesa::v1::EvalTask* t = bad.mutable_eval()->mutable_tasks(0);
  t->set_fewshot_draws(kMaxFewshotDraws + 1);
  t->set_fewshot_path("/elsewhere/validation.jsonl");
  std::string problems = Problem(bad, confined);
  EXPECT_TRUE(absl::StrContains(problems, "spec.eval.tasks[0].fewshot_draws: must be between 0"))
      << problems;
  EXPECT_TRUE(absl::StrContains(problems, "spec.eval.tasks[0].fewshot_path: \"/elsewhere/"))
      << problems;
  t->set_num_fewshot(0);
  t->set_fewshot_draws(2);
  problems = Problem(bad, confined);
  for (const char* field : {"fewshot_draws: needs num_fewshot", "fewshot_path: needs num_fewshot",
                            "fewshot_seed: needs num_fewshot"}) {
    EXPECT_TRUE(absl::StrContains(problems, absl::StrCat("spec.eval.tasks[0].", field)))
        << problems;
  }
  bad = s;
  bad.mutable_eval()->mutable_tasks(0)->set_adapter("piqa");
  bad.mutable_eval()->mutable_tasks(0)->add_metrics("bleu");
  problems = Problem(bad);
  EXPECT_TRUE(absl::StrContains(problems, "piqa items do not give bleu")) << problems;
  bad = s;
  bad.mutable_eval()->clear_tasks();
  bad.mutable_eval()->set_items_output(true);
  EXPECT_TRUE(absl::StrContains(Problem(bad), "spec.eval.items_output: needs eval.tasks"))
      << Problem(bad);
  // A translation task that lists its metrics without bleu is not scored by it.
  mesa::v1::EvalTask listed = s.eval().tasks(0);
  listed.add_metrics("exact_match");
  EXPECT_FALSE(TaskScoresBleu(listed));
}

TEST(ValidateJobSpec, EvalTasksAreNamedBoundedAndConfined) {
  mesa::v1::JobSpec s = ValidEvalSpec();
  s.mutable_data()->clear_val_path();  // the tasks alone are an evaluation
  s.mutable_eval()->set_checkpoint("/data/ckpt/tiny");
  for (const char* name : {"hellaswag", "arc-easy"}) {
    mesa::v1::EvalTask* t = s.mutable_eval()->add_tasks();
    t->set_name(name);
    t->set_path(absl::StrCat("/data/tasks/", name, ".jsonl"));
  }
  s.mutable_eval()->mutable_tasks(1)->set_num_fewshot(kMaxTaskFewshot);
  const ValidateOptions confined = {.require_absolute_paths = true, .data_roots = {"/data"}};
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << Problem(s);
  EXPECT_TRUE(ValidateJobSpec(s, confined).ok()) << Problem(s, confined);

  mesa::v1::JobSpec bad = s;
  bad.mutable_eval()->mutable_tasks(1)->set_name("hellaswag");
  bad.mutable_eval()->mutable_tasks(0)->clear_path();
  bad.mutable_eval()->mutable_tasks(1)->set_num_fewshot(kMaxTaskFewshot + 1);
  std::string problems = Problem(bad);
  EXPECT_TRUE(absl::StrContains(problems, "spec.eval.tasks[1].name: \"hellaswag\" is used twice"))
      << problems;
  EXPECT_TRUE(absl::StrContains(problems, "spec.eval.tasks[0].path: required")) << problems;
  EXPECT_TRUE(absl::StrContains(problems, "spec.eval.tasks[1].num_fewshot: must be between 0 and"))
      << problems;
  bad = s;
  bad.mutable_eval()->mutable_tasks(1)->set_path("/elsewhere/arc.jsonl");
  EXPECT_TRUE(absl::StrContains(Problem(bad, confined),
                                "spec.eval.tasks[1].path: \"/elsewhere/arc.jsonl\" is outside"))
      << Problem(bad, confined);
  bad.mutable_eval()->mutable_tasks(1)->set_path("tasks/arc.jsonl");
  EXPECT_TRUE(absl::StrContains(Problem(bad, confined),
                                "spec.eval.tasks[1].path: must be an absolute path"))
      << Problem(bad, confined);
  bad = s;
  for (int i = 0; i < kMaxEvalTasks; ++i) {
    mesa::v1::EvalTask* t = bad.mutable_eval()->add_tasks();
    t->set_name(absl::StrCat("extra", i));
    t->set_path("/data/x.jsonl");
  }
  EXPECT_TRUE(absl::StrContains(Problem(bad), "spec.eval.tasks: at most")) << Problem(bad);
  // Without a validation set there is nothing to sweep CG on.
  bad = s;
  bad.mutable_eval()->mutable_cg_sweep()->add_fixed_steps(2);
  EXPECT_TRUE(absl::StrContains(Problem(bad), "spec.eval.cg_sweep: needs a validation set"))
      << Problem(bad);
  bad.mutable_data()->set_val_path("/data/val.bin");
  EXPECT_TRUE(ValidateJobSpec(bad).ok()) << Problem(bad);
  mesa::v1::JobSpec t = ValidTrainSpec();
  *t.mutable_eval()->mutable_tasks() = s.eval().tasks();
  EXPECT_TRUE(absl::StrContains(Problem(t), "spec.eval.tasks: applies only to evaluation"));
}

TEST(ValidateJobSpec, EvalDatasetsAreNamedBoundedAndConfined) {
  mesa::v1::JobSpec s = ValidEvalSpec();
  s.mutable_data()->clear_val_path();  // eval.datasets stands in for it
  s.mutable_eval()->set_checkpoint("/data/ckpt/tiny");
  for (const char* name : {"slimpajama", "wiki-2", "pg19.long"}) {
    mesa::v1::EvalDataset* d = s.mutable_eval()->add_datasets();
    d->set_name(name);
    d->set_val_path(absl::StrCat("/data/", name, "/val_*.bin"));
  }
  s.mutable_eval()->mutable_datasets(2)->set_seq_len(8192);
  s.mutable_eval()->set_per_position(true);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << Problem(s);
  EXPECT_TRUE(ValidateJobSpec(s, {.require_absolute_paths = true, .data_roots = {"/data"}}).ok())
      << Problem(s, {.require_absolute_paths = true, .data_roots = {"/data"}});

  mesa::v1::JobSpec bad = s;
  bad.mutable_eval()->mutable_datasets(1)->set_name("slimpajama");
  bad.mutable_eval()->mutable_datasets(2)->set_name("Wiki");
  bad.mutable_eval()->mutable_datasets(0)->clear_val_path();
  bad.mutable_eval()->mutable_datasets(1)->set_seq_len(-1);
  const std::string problems = Problem(bad);
  EXPECT_TRUE(
      absl::StrContains(problems, "spec.eval.datasets[1].name: \"slimpajama\" is used twice"))
      << problems;
  EXPECT_TRUE(absl::StrContains(problems, "spec.eval.datasets[2].name: must be 1 to 63 of"))
      << problems;
  EXPECT_TRUE(absl::StrContains(problems, "spec.eval.datasets[0].val_path: required")) << problems;
  EXPECT_TRUE(absl::StrContains(problems, "spec.eval.datasets[1].seq_len: must be between 0"))
      << problems;

  bad = s;
  bad.mutable_eval()->mutable_datasets(0)->set_val_path("/elsewhere/val.bin");
  EXPECT_TRUE(
      absl::StrContains(Problem(bad, {.data_roots = {"/data"}}),
                        "spec.eval.datasets[0].val_path: \"/elsewhere/val.bin\" is outside"))
      << Problem(bad, {.data_roots = {"/data"}});
  bad.mutable_eval()->mutable_datasets(0)->set_val_path("rel/val.bin");
  EXPECT_TRUE(absl::StrContains(Problem(bad, {.require_absolute_paths = true}),
                                "spec.eval.datasets[0].val_path: must be an absolute path"));

  // The curves of all datasets together are bounded (the result must travel as one event).
  bad = s;
  bad.mutable_eval()->mutable_datasets(2)->set_seq_len(kMaxEvalCurvePositions);
  EXPECT_TRUE(absl::StrContains(Problem(bad), "spec.eval.per_position: the curves of all"));
  bad.mutable_eval()->set_per_position(false);
  EXPECT_TRUE(ValidateJobSpec(bad).ok()) << Problem(bad);
  // Each tolerance of a CG sweep adds a curve as long as the first dataset's windows.
  bad = s;
  bad.mutable_eval()->mutable_datasets(0)->set_seq_len(4096);
  for (int i = 0; i < 12; ++i) bad.mutable_eval()->mutable_cg_sweep()->add_tolerances(1e-3f);
  // 4096 + 128 + 8192 for the datasets, 12 * 4096 for the sweep: 61,568 positions fit.
  EXPECT_TRUE(ValidateJobSpec(bad).ok()) << Problem(bad);
  bad.mutable_eval()->mutable_cg_sweep()->add_tolerances(1e-4f);
  EXPECT_TRUE(absl::StrContains(Problem(bad), "and of the CG sweep's tolerances")) << Problem(bad);

  bad = s;
  for (int i = 0; i < kMaxEvalDatasets; ++i) {
    mesa::v1::EvalDataset* d = bad.mutable_eval()->add_datasets();
    d->set_name(absl::StrCat("extra", i));
    d->set_val_path("/data/x.bin");
  }
  EXPECT_TRUE(absl::StrContains(Problem(bad), "spec.eval.datasets: at most"));

  mesa::v1::JobSpec t = ValidTrainSpec();
  *t.mutable_eval()->mutable_datasets() = s.eval().datasets();
  EXPECT_TRUE(absl::StrContains(Problem(t), "spec.eval.datasets: applies only to evaluation"));
  t.mutable_eval()->set_internals(true);
  EXPECT_TRUE(absl::StrContains(Problem(t), "spec.eval.internals: applies only to evaluation"));
  mesa::v1::JobSpec both = s;
  both.mutable_data()->set_val_path("/data/val.bin");
  EXPECT_TRUE(absl::StrContains(Problem(both), "spec.eval.datasets: set eval.datasets or"));
  mesa::v1::JobSpec none = ValidEvalSpec();
  none.mutable_data()->clear_val_path();
  EXPECT_TRUE(absl::StrContains(Problem(none), "spec.data.val_path: required for evaluation"));
}

// eval.internals reports one entry per layer x head: n_layers x n_heads is bounded with it (and
// only with it), so the result fits one event line.
TEST(ValidateJobSpec, InternalsBoundTheLayersTimesHeads) {
  static_assert(kMaxInternalsEntries % 64 == 0 && kMaxInternalsEntries / 64 < kMaxLayers);
  JobSpec s = ValidEvalSpec();
  s.mutable_eval()->set_internals(true);
  s.mutable_model()->set_n_heads(64);
  s.mutable_model()->set_n_layers(kMaxInternalsEntries / 64);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << Problem(s);
  s.mutable_model()->set_n_layers(kMaxInternalsEntries / 64 + 1);
  EXPECT_TRUE(absl::StrContains(
      Problem(s),
      absl::StrCat("spec.eval.internals: reports one entry per layer x head, at most ",
                   kMaxInternalsEntries,
                   " (to fit one event line); model.n_layers x "
                   "model.n_heads = ",
                   kMaxInternalsEntries / 64 + 1, " x 64 = ", kMaxInternalsEntries + 64)))
      << Problem(s);
  s.mutable_eval()->set_internals(false);  // without internals the model may be that large
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << Problem(s);
  s.mutable_model()->set_n_layers(kMaxLayers);
  s.mutable_model()->set_n_heads(kMaxHeads);
  s.mutable_model()->set_head_dim(16);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << Problem(s);
}

// The largest evaluation result the spec allows, every figure printed at its longest, fits one
// event line with room to spare: the curves of kMaxEvalCurvePositions positions of one dataset
// (the event repeats the first dataset's curves at its top level) and kMaxInternalsEntries heads.
TEST(ValidateJobSpec, TheLargestEvaluationResultFitsOneEventLine) {
  constexpr double kLong = -1.2345678901234567e-300;  // 24 characters in JSON
  constexpr int64_t kLongCount = std::numeric_limits<int64_t>::min();
  mesa::v1::TrainerEvent event;
  mesa::v1::EvalMetrics& eval = *event.mutable_result()->mutable_eval();
  mesa::v1::DatasetResult& d = *eval.add_datasets();
  d.mutable_nll_at_position()->Resize(kMaxEvalCurvePositions, kLong);
  d.mutable_mean_nll_so_far()->Resize(kMaxEvalCurvePositions, kLong);
  d.mutable_count_at_position()->Resize(kMaxEvalCurvePositions, kLongCount);
  *eval.mutable_nll_at_position() = d.nll_at_position();
  *eval.mutable_mean_nll_so_far() = d.mean_nll_so_far();
  *eval.mutable_count_at_position() = d.count_at_position();
  const size_t curves = FormatEventLine(event).size();
  for (int l = 0; l < kMaxLayers; ++l) {
    mesa::v1::LayerInternals& layer = *eval.add_internals();
    layer.set_layer(l);
    layer.set_mixer("mesa");
    layer.set_cg_steps_mean(kLong);
  }
  mesa::v1::HeadInternals head;
  head.set_head(kMaxHeads - 1);
  const google::protobuf::Descriptor* descriptor = head.GetDescriptor();
  for (int f = 0; f < descriptor->field_count(); ++f) {  // every figure, new ones too
    const FieldDescriptor* field = descriptor->field(f);
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
      head.GetReflection()->SetDouble(&head, field, kLong);
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
      head.GetReflection()->SetInt64(&head, field, kLongCount);
    }
  }
  for (int i = 0; i < kMaxInternalsEntries; ++i) {
    *eval.mutable_internals(i % kMaxLayers)->add_heads() = head;
  }
  const size_t line = FormatEventLine(event).size();
  const double per_head = static_cast<double>(line - curves) / kMaxInternalsEntries;
  RecordProperty("curves_bytes", static_cast<int>(curves));
  RecordProperty("line_bytes", static_cast<int>(line));
  RecordProperty("bytes_per_internals_entry", absl::StrCat(per_head));
  EXPECT_LE(per_head, 640) << "JSON bytes per layer x head entry (kMaxInternalsEntries' note)";
  // A safety margin of 1 MiB for what the result also carries (tasks, the CG sweep, names).
  EXPECT_LT(line + (size_t{1} << 20), kMaxEventLineBytes)
      << "curves " << curves << " bytes, internals " << per_head << " per entry";
}

TEST(ValidateJobSpec, SyntheticTasksReplaceTheShardsAndCheckTheirParameters) {
  mesa::v1::JobSpec s = ValidTrainSpec();
  s.mutable_data()->clear_train_path();
  s.mutable_data()->clear_val_path();
  s.mutable_data()->set_seq_len(256);
  s.mutable_training()->set_eval_interval(10);  // validation on the tasks' evaluation examples
  auto* syn = s.mutable_data()->mutable_synthetic();
  syn->add_tasks()->set_task("mqar");
  syn->add_tasks()->set_task("selective_copying");
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << Problem(s);
  mesa::v1::JobSpec with_regbench = s;
  mesa::v1::SyntheticTask* good = with_regbench.mutable_data()->mutable_synthetic()->add_tasks();
  good->set_task("regbench");
  good->set_num_states(12);
  good->set_strings_per_sequence(4);
  good->set_vocab_size(64);
  EXPECT_TRUE(ValidateJobSpec(with_regbench).ok()) << Problem(with_regbench);
  mesa::v1::JobSpec e = s;
  e.set_type(mesa::v1::JOB_TYPE_EVAL);
  e.mutable_eval()->set_checkpoint("/ckpt/x");
  e.mutable_training()->clear_eval_interval();
  e.mutable_optimizer()->clear_lr();
  e.mutable_training()->clear_steps();
  EXPECT_TRUE(ValidateJobSpec(e).ok()) << Problem(e);

  mesa::v1::JobSpec bad = s;
  bad.mutable_data()->set_train_path("/data/train.bin");
  bad.mutable_data()->set_tokenizer("gpt2");
  auto* tasks = bad.mutable_data()->mutable_synthetic()->mutable_tasks();
  tasks->Mutable(0)->set_num_kv_pairs(100);  // more than seq_len / 4
  tasks->Mutable(1)->set_k_motif_size(2);    // another task's parameter
  bad.mutable_data()->mutable_synthetic()->add_tasks()->set_task("regbench_v2");
  mesa::v1::SyntheticTask* noisy = bad.mutable_data()->mutable_synthetic()->add_tasks();
  noisy->set_task("noisy_recall");
  noisy->set_vocab_size(kMaxSyntheticTokens - 10);  // + 16 noise tokens > the most ids
  mesa::v1::SyntheticTask* big = bad.mutable_data()->mutable_synthetic()->add_tasks();
  big->set_task("compression");
  big->set_seq_len(512);  // longer than data.seq_len
  mesa::v1::SyntheticTask* regbench = bad.mutable_data()->mutable_synthetic()->add_tasks();
  regbench->set_task("regbench");
  regbench->set_vocab_size(65);            // the valid sets are 64-bit masks
  regbench->set_num_states(65);            // more than 64
  regbench->set_strings_per_sequence(65);  // 2 x 65 > its 128 tokens
  mesa::v1::SyntheticTask* not_regbench = bad.mutable_data()->mutable_synthetic()->add_tasks();
  not_regbench->set_task("mqar");
  not_regbench->set_num_states(4);
  tasks->Mutable(0)->set_name("Bad Name");
  tasks->Mutable(1)->set_name("twice");
  tasks->Mutable(3)->set_name("twice");
  const std::string problems = Problem(bad);
  for (const char* expected :
       {"spec.data.synthetic.tasks[0].name: must be 1 to 63 of [a-z0-9_.-]",
        "spec.data.synthetic.tasks[3].name: \"twice\" is used twice",
        "spec.data.train_path: not used with data.synthetic",
        "spec.data.tokenizer: data.synthetic uses the byte vocabulary",
        "spec.data.synthetic.tasks[0].num_kv_pairs: must be at least 1, at most seq_len / 4",
        "spec.data.synthetic.tasks[1].k_motif_size: applies only to another task",
        "spec.data.synthetic.tasks[2].task: must be one of mqar, in_context_recall",
        "spec.data.synthetic.tasks[3].noise_vocab_size: must be at least 1 with vocab_size",
        "spec.data.synthetic.tasks[4].seq_len: must be between 4 and data.seq_len (256)",
        "spec.data.synthetic.tasks[5].vocab_size: regbench allows at most 64",
        "spec.data.synthetic.tasks[5].num_states: must be between 1 and 64, got 65",
        "spec.data.synthetic.tasks[5].strings_per_sequence: must be between 1 and seq_len / 2 "
        "(64), got 65",
        "spec.data.synthetic.tasks[6].num_states: applies only to another task"}) {
    EXPECT_TRUE(absl::StrContains(problems, expected)) << expected << "\nin: " << problems;
  }
  bad = s;
  bad.mutable_data()->set_seq_len(64);  // selective copying's default is 256 tokens
  EXPECT_TRUE(
      absl::StrContains(Problem(bad),
                        "tasks[1].seq_len: must be between 4 and data.seq_len (64), got 256 "
                        "(the task's default)"))
      << Problem(bad);
}

// Task ids above 256 (MAD's memorization goes to 8,192): up to kMaxSyntheticTokens, with a model
// vocabulary that holds them as fed (those from 256 up one higher, past BOS) — one error naming
// model.vocab_size, the task and the size needed otherwise.
TEST(ValidateJobSpec, SyntheticVocabulariesAbove256NeedTheModelVocabularyToHoldThem) {
  mesa::v1::JobSpec s = ValidTrainSpec();
  s.mutable_data()->clear_train_path();
  s.mutable_data()->clear_val_path();
  s.mutable_data()->set_seq_len(64);
  auto* syn = s.mutable_data()->mutable_synthetic();
  syn->add_tasks()->set_task("compression");  // 16 ids
  mesa::v1::SyntheticTask* memorize = syn->add_tasks();
  memorize->set_task("memorization");
  memorize->set_vocab_size(4096);
  s.mutable_model()->set_vocab_size(4097);  // ids 0..255, 257..4096, and BOS 256
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << Problem(s);

  mesa::v1::JobSpec small = s;
  small.mutable_model()->set_vocab_size(4096);
  EXPECT_EQ(Problem(small),
            "spec.model.vocab_size: must be >= 4097 for data.synthetic.tasks[1] (memorization: "
            "4096 token ids, those from 256 up fed one higher past BOS 256), got 4096");
  // Noise tokens count: 300 + 16 ids need 317.
  mesa::v1::JobSpec noisy = s;
  mesa::v1::SyntheticTask* recall = noisy.mutable_data()->mutable_synthetic()->mutable_tasks(0);
  recall->set_task("noisy_recall");
  recall->set_seq_len(64);
  recall->set_vocab_size(300);
  noisy.mutable_data()->mutable_synthetic()->mutable_tasks(1)->set_vocab_size(256);
  noisy.mutable_model()->set_vocab_size(316);
  EXPECT_TRUE(absl::StrContains(Problem(noisy),
                                "spec.model.vocab_size: must be >= 317 for "
                                "data.synthetic.tasks[0] (noisy_recall: 316 token ids"))
      << Problem(noisy);
  noisy.mutable_model()->set_vocab_size(317);
  EXPECT_TRUE(ValidateJobSpec(noisy).ok()) << Problem(noisy);
  // Up to 256 ids the byte tokenizer's rule stays the one that speaks.
  mesa::v1::JobSpec bytes = s;
  bytes.mutable_data()->mutable_synthetic()->mutable_tasks(1)->set_vocab_size(256);
  bytes.mutable_model()->set_vocab_size(256);
  EXPECT_TRUE(absl::StrContains(Problem(bytes),
                                "spec.model.vocab_size: must be >= 257 for the "
                                "byte tokenizer"))
      << Problem(bytes);
  // The most ids a task may have; one more is the task's error, not the model's.
  mesa::v1::JobSpec most = s;
  most.mutable_data()->mutable_synthetic()->mutable_tasks(1)->set_vocab_size(kMaxSyntheticTokens);
  most.mutable_model()->set_vocab_size(kMaxSyntheticTokens + 1);
  EXPECT_TRUE(ValidateJobSpec(most).ok()) << Problem(most);
  most.mutable_data()->mutable_synthetic()->mutable_tasks(1)->set_vocab_size(kMaxSyntheticTokens +
                                                                             1);
  EXPECT_EQ(Problem(most), absl::StrCat("spec.data.synthetic.tasks[1].vocab_size: must be between "
                                        "4 and ",
                                        kMaxSyntheticTokens, ", got ", kMaxSyntheticTokens + 1));
}

TEST(ValidateJobSpec, GenerationJobs) {
  EXPECT_TRUE(ValidateJobSpec(ValidGenerateSpec()).ok()) << ValidateJobSpec(ValidGenerateSpec());
  mesa::v1::JobSpec s = ValidGenerateSpec();
  s.mutable_generate()->clear_checkpoint();
  EXPECT_TRUE(absl::StrContains(Problem(s), "spec.generate.checkpoint: required")) << Problem(s);
  s = ValidGenerateSpec();
  s.mutable_generate()->clear_prompts();
  EXPECT_TRUE(absl::StrContains(Problem(s), "spec.generate.prompts: 1 to ")) << Problem(s);
  s = ValidGenerateSpec();
  s.mutable_generate()->add_prompts("");
  EXPECT_TRUE(absl::StrContains(Problem(s), "spec.generate.prompts[1]: is empty")) << Problem(s);
  s = ValidGenerateSpec();
  s.mutable_generate()->add_prompts(std::string(kMaxPromptBytes + 1, 'a'));
  EXPECT_TRUE(absl::StrContains(Problem(s), "spec.generate.prompts[1]: must be at most"));
  s = ValidGenerateSpec();
  for (int i = 0; i <= kMaxPrompts; ++i) s.mutable_generate()->add_prompts("x");
  EXPECT_TRUE(absl::StrContains(Problem(s), "spec.generate.prompts: 1 to "));
  // The model is the checkpoint's: a model section would be ignored, so it is refused.
  s = ValidGenerateSpec();
  s.mutable_model()->set_d_model(64);
  EXPECT_TRUE(absl::StrContains(Problem(s), "spec.model: not used by JOB_TYPE_GENERATE"));
  s = ValidGenerateSpec();
  s.mutable_generate()->set_top_p(0);  // set, and 0: no token could be kept
  EXPECT_TRUE(absl::StrContains(Problem(s), "spec.generate.top_p: must be in (0, 1]"));
  s = ValidGenerateSpec();
  s.mutable_generate()->set_temperature(0);  // greedy: a real choice
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << Problem(s);
  s = ValidGenerateSpec();
  s.mutable_generate()->add_stop(std::string(kMaxStopSequenceBytes + 1, 's'));
  s.mutable_generate()->add_stop("");
  EXPECT_TRUE(absl::StrContains(Problem(s), "spec.generate.stop[0]: must be at most"));
  EXPECT_TRUE(absl::StrContains(Problem(s), "spec.generate.stop[1]: is empty"));
  s = ValidGenerateSpec();
  s.mutable_generate()->set_encoder_json("/data/encoder.json");
  EXPECT_TRUE(absl::StrContains(Problem(s), "encoder_json and vocab_bpe go together"));
  // A generate section on another job type.
  s = ValidTrainSpec();
  s.mutable_generate()->add_prompts("x");
  EXPECT_TRUE(absl::StrContains(Problem(s), "spec.generate: applies only to JOB_TYPE_GENERATE"));
}

TEST(ValidateJobSpec, GenerationPathsAreAbsoluteAndConfined) {
  mesa::v1::JobSpec s = ValidGenerateSpec();
  s.mutable_generate()->set_checkpoint("ckpt/tiny");
  ValidateOptions service;
  service.require_absolute_paths = true;
  EXPECT_TRUE(
      absl::StrContains(Problem(s, service), "spec.generate.checkpoint: must be an absolute"))
      << Problem(s, service);
  ValidateOptions confined;
  confined.data_roots = {"/data"};
  confined.checkpoint_root = "/ckpt";
  s = ValidGenerateSpec();
  EXPECT_TRUE(ValidateJobSpec(s, confined).ok()) << Problem(s, confined);
  s.mutable_generate()->set_checkpoint("/elsewhere/run");
  EXPECT_TRUE(absl::StrContains(Problem(s, confined),
                                "spec.generate.checkpoint: \"/elsewhere/run\" is outside"))
      << Problem(s, confined);
  s = ValidGenerateSpec();
  s.mutable_generate()->set_encoder_json("/ckpt/encoder.json");
  s.mutable_generate()->set_vocab_bpe("/data/vocab.bpe");
  EXPECT_TRUE(absl::StrContains(
      Problem(s, confined),
      "spec.generate.encoder_json: \"/ckpt/encoder.json\" is outside the data roots"))
      << Problem(s, confined);
}

}  // namespace
}  // namespace mesa::spec
