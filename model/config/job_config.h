// Resolved, validated trainer configuration.
//
// A mesa.v1.JobSpec uses proto3 semantics (0 = "use the default"). ResolveJobConfig applies every
// default, checks every field, and returns plain structs the rest of the trainer uses. All checks
// happen here, before anything is allocated, and errors name the offending field path
// (e.g. "model.head_dim: must be in [1, 1024], got 0").
#ifndef MESANET_MODEL_CONFIG_JOB_CONFIG_H_
#define MESANET_MODEL_CONFIG_JOB_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/common/limits.h"
#include "mesa/v1/job.pb.h"
#include "model/config/shard_pattern.h"  // ExpandShardPattern
#include "spec/mixers.h"
#include "spec/precision.h"
#include "spec/synthetic.h"
#include "spec/tokenizer_record.h"

namespace mesa::model {

// Sequence mixers (model/mixers/): the table in spec/mixers.h says what each one needs.
using MixerKind = spec::MixerKind;

// training.precision: the activation storage type (spec/precision.h).
using Precision = spec::Precision;
using spec::PrecisionName;

// The RMSNorm epsilons of the architecture: the residual stream's (attn_norm, mlp_norm, the
// final norm) and the per-head output norm's (o_norm). Fixed, not configurable; mesa-export
// writes the head norm's as FLA's single norm_eps (model/export/fla_config.h).
inline constexpr float kResidualNormEps = 1e-6f;
inline constexpr float kHeadNormEps = 1e-5f;

// Architecture (docs/math.md §1.2, §4).
struct ModelConfig {
  int vocab_size = 257;
  int d_model = 64;
  int n_layers = 2;
  int n_heads = 2;
  int head_dim = 32;
  int mlp_hidden = 192;  // SwiGLU hidden width = mlp_mult * d_model.
  int conv_width = 4;
  // The mixer of every layer, unless layer_mixers (one per layer) says otherwise.
  MixerKind mixer = MixerKind::kMesa;
  std::vector<MixerKind> layer_mixers;          // empty, or n_layers entries
  int cg_steps = kernels::kDefaultCgSteps;      // Fixed CG steps in training (0 for GLA).
  float cg_tol = 0.0f;                          // Evaluation: tolerance mode when > 0.
  int cg_max_steps = kernels::kDefaultCgSteps;  // Evaluation: step bound in tolerance mode.
  float lambda_floor = 0.25f;
  float gamma_cap = 0.0025f;
  float logit_softcap = 30.0f;  // 0: no soft-cap
  int bos_token = 256;          // Targets equal to this are excluded from the loss.
  // data.reset_at_bos, resolved: training and evaluation forwards treat every bos_token as the
  // start of a new sequence (MixerCall::doc_start; docs/math.md §8.6). How the data are read, not
  // the architecture: not in ModelConfigJson, recorded in checkpoints' state.json instead.
  bool reset_at_bos = false;
  // Attention layers: 0 = global causal, W = each token sees itself and the W - 1 before it.
  int attention_window = 0;
  // Tied: logits = h·E^T and the lookup is E·sqrt(d_model). Untied: a separate lm_head.weight
  // and an unscaled lookup (FLA's convention; docs/export.md).
  bool tie_embeddings = true;
  // Hawk layers: the recurrent width D_rnn (spec::RnnWidthOf; 0 without Hawk layers) and the
  // decay initialisation (false: the released code's, true: the Griffin paper's).
  int rnn_width = 0;
  bool hawk_paper_init = false;
  // Mamba-2 layers: d_in, the SSD head width P and the state width N (spec::SsmShapeOf; 0
  // without mamba2 layers). H_m = ssm_inner / ssm_head_dim heads, one group of B and C.
  int ssm_inner = 0;
  int ssm_head_dim = 0;
  int ssm_state = 0;
  int ssm_heads() const { return ssm_head_dim > 0 ? ssm_inner / ssm_head_dim : 0; }
  int ssm_conv_channels() const { return ssm_inner + 2 * ssm_state; }

  int qk_dim() const { return n_heads * head_dim; }
  MixerKind LayerMixer(int layer) const {
    return layer_mixers.empty() ? mixer : layer_mixers[layer];
  }
  // Layers whose mixer solves with CG (Mesa); the others read out directly (GLA).
  int MesaLayers() const;
  // Layers of the given mixer.
  int LayersOf(MixerKind kind) const;
  // The attention window of a layer of `kind` in this model (spec::AttentionWindowOf): 0 =
  // global, and 0 for mixers that do not attend.
  int AttentionWindow(MixerKind kind) const;
  // The factor of the embedding lookup: sqrt(d_model) when tied, 1 (FLA's) when untied.
  float EmbeddingScale() const;
  // Number of float parameters (tied embedding counted once).
  int64_t NumParameters() const;
};

// data.synthetic, resolved: every task with its defaults, and its name in results (the task's
// name, with ".INDEX" appended when the job lists that task more than once).
struct SyntheticSettings {
  std::vector<spec::SyntheticTaskParams> tasks;
  std::vector<std::string> names;
  uint64_t seed = 0;
  int64_t train_examples = 0;
  int64_t eval_examples = 0;
};

struct DataSettings {
  std::vector<std::string> train_paths;  // Expanded from DataConfig.train_path (glob or list).
  std::vector<std::string> val_paths;
  std::string train_pattern;
  std::string val_pattern;
  // What the spec names (data.tokenizer), completed from the shards' mesa_data.json or the
  // tokenizer file: recorded in every checkpoint.
  spec::TokenizerRecord tokenizer = *spec::BuiltinTokenizer("byte");
  int seq_len = 64;
  int batch_size = 8;  // Sequences per optimizer step over all ranks.
  int grad_accum_steps = 1;
  // Set: the data are these tasks, not shards.
  std::optional<SyntheticSettings> synthetic;
  // data.reset_at_bos resolved (proto/mesa/v1/job.proto) and whether the spec set it: a resumed
  // run takes its checkpoint's record unless the spec says, which must then agree
  // (ApplyCheckpointResets). ModelConfig::reset_at_bos is what the model runs with.
  bool reset_at_bos = false;
  bool reset_at_bos_set = false;
  // Sequences per micro-batch on one rank, of `data_ranks` data-parallel replicas (the ranks
  // over training.context_parallel).
  int MicroBatch(int data_ranks) const { return batch_size / (grad_accum_steps * data_ranks); }
};

struct OptimizerSettings {
  float lr = 1e-3f;
  float min_lr_ratio = 0.1f;
  float weight_decay = 0.1f;
  float beta1 = 0.9f;
  float beta2 = 0.98f;
  float eps = 1e-8f;
  float grad_clip = 1.0f;
  int64_t warmup_steps = 0;
  int zero_stage = 0;
};

struct TrainingSettings {
  int64_t steps = 0;
  uint64_t seed = 0;
  std::string device = "auto";
  Precision precision = Precision::kAuto;
  int64_t log_interval = 1;
  int64_t eval_interval = 0;
  int64_t eval_batches = 0;
  int context_parallel = 1;    // ranks per sequence (1: none)
  bool deterministic = false;  // attention's dQ in a fixed order (CudaBackendOptions)
  // training.profile: steps [profile_start_step, + profile_steps) traced (0: none).
  int64_t profile_start_step = 0;
  int profile_steps = 0;
};

struct CheckpointSettings {
  std::string dir;
  int64_t interval_steps = 0;
  int keep_last = 3;
  std::string init_from;
  // checkpoint.resume: kNever (also ""), kAuto, kMust (proto/mesa/v1/job.proto).
  enum class Resume { kNever, kAuto, kMust } resume = Resume::kNever;
};

struct EvalSettings {
  std::string checkpoint;
  int64_t max_batches = 0;
  bool per_position = false;
  bool internals = false;  // eval.internals
  // eval.cg_sweep: the extra settings, fixed steps first (tolerance 0), then each tolerance with
  // its step bound.
  struct CgSetting {
    int max_steps = 0;
    float tolerance = 0.0f;
  };
  std::vector<CgSetting> cg_sweep;
  // What an evaluation job scores: eval.datasets, or one set "val" (data.val_path at
  // data.seq_len) when the spec lists none and has no eval.tasks, or each task of data.synthetic
  // (also what a training job with synthetic data scores at its end). seq_len is resolved (never
  // 0).
  struct Dataset {
    std::string name;
    std::string pattern;             // as written in the spec
    std::vector<std::string> paths;  // expanded from `pattern`
    int seq_len = 0;
    int synthetic_task = -1;  // >= 0: that task of data.synthetic (no paths), scored by accuracy
    bool document_windows = false;  // windows "documents": one row per document (DocumentWindows)
  };
  std::vector<Dataset> datasets;
  // eval.tasks: task files scored by log-likelihood at data.seq_len (model/tasks).
  struct Task {
    std::string name;
    std::string path;
    int num_fewshot = 0;
    std::string adapter;               // empty: our item forms
    std::vector<std::string> metrics;  // empty: every one the items give
    std::string primary_metric;        // as given; empty = the adapter's, else acc (or contains)
    int max_length = 0;                // 0 = data.seq_len
    std::string truncation = "left";
    bool add_bos = true;
    // Generation items without their own (resolved: the spec's, else the adapter's, else 48 and
    // no stop string).
    int max_new_tokens = 0;
    std::vector<std::string> stop;
    // eval.tasks[].niah: generated needle-in-a-haystack items instead of a file.
    std::optional<mesa::v1::NiahGenerator> niah;
    // Few-shot: draws (at least 1), the seed of draw 0 (draw d uses seed + d; unset: the
    // training seed) and the file demonstrations come from (empty: the task's own items).
    int fewshot_draws = 1;
    uint64_t fewshot_seed = 0;
    std::string fewshot_path;
    bool bleu = false;  // generation items scored by BLEU too (spec::TaskScoresBleu)
  };
  std::vector<Task> tasks;
  // eval.task_groups: averages of the members' primary metrics.
  struct TaskGroup {
    std::string name;
    std::vector<std::string> tasks;
  };
  std::vector<TaskGroup> task_groups;
};

struct JobConfig {
  bool is_eval = false;
  bool is_generate = false;  // JOB_TYPE_GENERATE: only spec.generate and training apply
  ModelConfig model;
  DataSettings data;
  OptimizerSettings optimizer;
  TrainingSettings training;
  CheckpointSettings checkpoint;
  EvalSettings eval;
  mesa::v1::JobSpec spec;  // The job spec as given (recorded in checkpoints).
};

// Options that do not come from the YAML (command line / environment).
struct ResolveOptions {
  int world_size = 1;
  bool eval_mode = false;    // --eval: validation only (needs data.val_path).
  bool expand_globs = true;  // Tests may turn off file-system access.
  // --device / $MESA_DEVICE when set: wins over training.device, so checks that depend on the
  // device (bf16 needs CUDA) judge the device the run will really use.
  std::string device;
};

// Applies defaults and validates. InvalidArgument names the field path; NotFound for shard
// patterns that match no file. With expand_globs, also checks the tokenizer against the shards'
// mesa_data.json and the checkpoints the spec reads (spec::CheckJobTokenizer) and takes BOS and
// vocabulary from them (or from data.tokenizer_file).
absl::StatusOr<JobConfig> ResolveJobConfig(const mesa::v1::JobSpec& spec,
                                           const ResolveOptions& options);

// The fixed CG steps a model of the spec section `m` trains with: model.cg_steps, where 0 is
// spec::kDefaultCgSteps; 0 for a model without Mesa layers.
int TrainingCgSteps(const mesa::v1::ModelConfig& m, bool any_mesa);

// Validates an already-resolved model config (also used when loading checkpoints).
absl::Status ValidateModelConfig(const ModelConfig& config);

const char* MixerName(MixerKind mixer);
// The kind of a name the validator accepts ("mesa", "gla", "deltanet", "gated_deltanet").
MixerKind MixerFromName(absl::string_view name);
// "mesa", or the per-layer list "[gla, mesa, gla, mesa]".
std::string LayerMixersName(const ModelConfig& config);

}  // namespace mesa::model

#endif  // MESANET_MODEL_CONFIG_JOB_CONFIG_H_
