#include "model/config/job_config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/common/limits.h"
#include "model/tokenizer/hf_tokenizer.h"
#include "spec/confined_paths.h"
#include "spec/mixers.h"
#include "spec/tasks.h"
#include "spec/validate_job_spec.h"

namespace mesa::model {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

template <typename T>
absl::Status CheckRange(absl::string_view field, T value, T lo, T hi) {
  if (value < lo || value > hi) {
    return Invalid(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
  }
  return absl::OkStatus();
}

// A whole-number field against the job spec's bounds for it (spec::NumericLimits, one table for
// specs and for models built in code or read from a checkpoint), with the lower bound raised to
// `min_lo` where the spec's 0 means "the default" and a model holds the resolved value.
absl::Status CheckSpecRange(absl::string_view path, int64_t value, int64_t min_lo = 0) {
  for (const spec::NumericLimit& limit : spec::NumericLimits()) {
    if (path != limit.path) continue;
    const int64_t lo = std::max(min_lo, static_cast<int64_t>(limit.lo));
    return CheckRange<int64_t>(path, value, lo, static_cast<int64_t>(limit.hi));
  }
  return absl::InternalError(absl::StrCat(path, ": no bound in spec::NumericLimits"));
}

#define MESA_RETURN_IF_ERROR(expr)     \
  do {                                 \
    absl::Status status_ = (expr);     \
    if (!status_.ok()) return status_; \
  } while (0)

}  // namespace

const char* MixerName(MixerKind mixer) { return spec::TraitsOf(mixer).name; }

MixerKind MixerFromName(absl::string_view name) {
  const spec::MixerTraits* mixer = spec::FindMixer(name);
  return mixer != nullptr ? mixer->kind : MixerKind::kMesa;
}

std::string LayerMixersName(const ModelConfig& config) {
  if (config.layer_mixers.empty()) return MixerName(config.mixer);
  std::vector<std::string> names;
  for (MixerKind mixer : config.layer_mixers) names.push_back(MixerName(mixer));
  return absl::StrCat("[", absl::StrJoin(names, ", "), "]");
}

int ModelConfig::MesaLayers() const {
  int n = 0;
  for (int l = 0; l < n_layers; ++l) n += spec::TraitsOf(LayerMixer(l)).solves_with_cg;
  return n;
}

int ModelConfig::LayersOf(MixerKind kind) const {
  int n = 0;
  for (int l = 0; l < n_layers; ++l) n += LayerMixer(l) == kind;
  return n;
}

int ModelConfig::AttentionWindow(MixerKind kind) const {
  bool has_swa = false;
  for (int l = 0; l < n_layers; ++l) has_swa |= LayerMixer(l) == MixerKind::kSwa;
  return spec::AttentionWindowOf(kind, has_swa, attention_window);
}

int64_t ModelConfig::NumParameters() const {
  spec::ModelShape shape;
  shape.vocab_size = vocab_size;
  shape.d_model = d_model;
  shape.n_heads = n_heads;
  shape.head_dim = head_dim;
  shape.mlp_hidden = mlp_hidden;
  shape.conv_width = conv_width;
  shape.rnn_width = rnn_width;
  shape.ssm_inner = ssm_inner;
  shape.ssm_head_dim = ssm_head_dim;
  shape.ssm_state = ssm_state;
  shape.tie_embeddings = tie_embeddings;
  std::vector<const spec::MixerTraits*> mixers;
  for (int l = 0; l < n_layers; ++l) mixers.push_back(&spec::TraitsOf(LayerMixer(l)));
  return spec::ModelParameterCount(shape, mixers);
}

float ModelConfig::EmbeddingScale() const {
  return tie_embeddings ? std::sqrt(static_cast<float>(d_model)) : 1.0f;
}

absl::Status ValidateModelConfig(const ModelConfig& m) {
  // A model built in code (tests, benchmarks) or read back from a checkpoint; job specs are
  // checked by spec/validate_job_spec.h, with the same kernel limits.
  for (const auto& [path, value] : {std::pair<const char*, int>{"model.vocab_size", m.vocab_size},
                                    {"model.d_model", m.d_model},
                                    {"model.n_layers", m.n_layers},
                                    {"model.n_heads", m.n_heads},
                                    {"model.head_dim", m.head_dim}}) {
    MESA_RETURN_IF_ERROR(CheckSpecRange(path, value));
  }
  if (m.head_dim % kernels::kHeadDimMultiple != 0) {
    return Invalid("model.head_dim", absl::StrCat("must be a multiple of ",
                                                  kernels::kHeadDimMultiple, ", got ", m.head_dim));
  }
  MESA_RETURN_IF_ERROR(CheckRange("model.mlp_mult * model.d_model", m.mlp_hidden, 1, 1 << 20));
  MESA_RETURN_IF_ERROR(CheckSpecRange("model.conv_width", m.conv_width, /*min_lo=*/1));
  MESA_RETURN_IF_ERROR(CheckSpecRange("model.cg_steps", m.cg_steps));
  MESA_RETURN_IF_ERROR(CheckSpecRange("model.cg_max_steps", m.cg_max_steps));
  if (!m.layer_mixers.empty() && static_cast<int>(m.layer_mixers.size()) != m.n_layers) {
    return Invalid("model.layer_mixers", absl::StrCat("must have one entry per layer (", m.n_layers,
                                                      "), got ", m.layer_mixers.size()));
  }
  if (m.MesaLayers() == 0 && m.cg_steps != 0) {
    return Invalid("model.cg_steps", "applies only to \"mesa\" layers, and no layer is one");
  }
  if (!(m.cg_tol >= 0.0f) || !std::isfinite(m.cg_tol)) {
    return Invalid("model.cg_tol", "must be a finite number >= 0");
  }
  if (!(m.lambda_floor > 0.0f) || !std::isfinite(m.lambda_floor)) {
    return Invalid("model.lambda_floor",
                   "must be a finite number > 0 (the CG system must stay SPD)");
  }
  if (!(m.gamma_cap >= 0.0f && m.gamma_cap < 1.0f)) {
    return Invalid("model.gamma_cap", absl::StrCat("must be in [0, 1), got ", m.gamma_cap));
  }
  if (!(m.logit_softcap >= 0.0f) || !std::isfinite(m.logit_softcap)) {
    return Invalid("model.logit_softcap", "must be a finite number >= 0 (0: no soft-cap)");
  }
  MESA_RETURN_IF_ERROR(CheckSpecRange("model.attention_window", m.attention_window));
  bool any_attention = false, any_swa = false;
  for (int l = 0; l < m.n_layers; ++l) {
    any_attention |= spec::TraitsOf(m.LayerMixer(l)).is_attention;
    any_swa |= m.LayerMixer(l) == MixerKind::kSwa;
  }
  if (any_swa && m.attention_window == 0) {
    return Invalid("model.attention_window", "\"swa\" layers need a window > 0");
  }
  if (!any_attention && m.attention_window != 0) {
    return Invalid("model.attention_window",
                   "applies only to \"attention\" and \"swa\" layers, and no layer is one");
  }
  if (m.LayersOf(MixerKind::kHawk) > 0) {
    MESA_RETURN_IF_ERROR(
        CheckRange("model.rnn_width_mult * model.d_model", m.rnn_width, 1, 1 << 16));
    if (m.rnn_width % m.n_heads != 0) {
      return Invalid("model.rnn_width_mult",
                     absl::StrCat("the recurrent width ", m.rnn_width,
                                  " must split into n_heads = ", m.n_heads, " gate blocks"));
    }
  } else if (m.rnn_width != 0 || m.hawk_paper_init) {
    return Invalid("model.rnn_width_mult", "applies only to \"hawk\" layers, and no layer is one");
  }
  if (m.LayersOf(MixerKind::kMamba2) > 0) {
    MESA_RETURN_IF_ERROR(CheckRange("model.ssm_expand * model.d_model", m.ssm_inner, 1, 1 << 16));
    MESA_RETURN_IF_ERROR(CheckRange("model.ssm_head_dim", m.ssm_head_dim, 1, 1024));
    MESA_RETURN_IF_ERROR(CheckRange("model.ssm_state_dim", m.ssm_state, 1, 1024));
    if (m.ssm_inner % m.ssm_head_dim != 0) {
      return Invalid("model.ssm_head_dim",
                     absl::StrCat("the inner width ", m.ssm_inner,
                                  " must be a multiple of the SSD head width ", m.ssm_head_dim));
    }
  } else if (m.ssm_inner != 0 || m.ssm_head_dim != 0 || m.ssm_state != 0) {
    return Invalid("model.ssm_expand", "applies only to \"mamba2\" layers, and no layer is one");
  }
  if (m.bos_token < 0 || m.bos_token >= m.vocab_size) {
    return Invalid("model.vocab_size",
                   absl::StrCat("must be larger than the tokenizer's BOS id ", m.bos_token));
  }
  if (m.NumParameters() > spec::kMaxParameters) {
    return Invalid("model", absl::StrCat("too many parameters (", m.NumParameters(), ")"));
  }
  return absl::OkStatus();
}

namespace {

// The functions below apply defaults (0 = "the default") to a spec the validator has accepted.

DataSettings ResolveData(const mesa::v1::DataConfig& d) {
  DataSettings data;
  // byte and gpt2 are complete here; hf is completed from the files (ResolveTokenizer).
  data.tokenizer =
      spec::BuiltinTokenizer(d.tokenizer()).value_or(spec::TokenizerRecord{.kind = d.tokenizer()});
  data.seq_len = d.seq_len();
  data.batch_size = d.batch_size();
  data.grad_accum_steps = d.grad_accum_steps() == 0 ? 1 : d.grad_accum_steps();
  data.train_pattern = d.train_path();
  data.val_pattern = d.val_path();
  return data;
}

ModelConfig ResolveModel(const mesa::v1::ModelConfig& m, const spec::TokenizerRecord& tokenizer) {
  ModelConfig model;
  model.bos_token = static_cast<int>(tokenizer.bos_id);
  model.vocab_size = m.vocab_size();
  model.d_model = m.d_model();
  model.n_layers = m.n_layers();
  model.n_heads = m.n_heads();
  model.head_dim = m.head_dim();
  const float mlp_mult = m.mlp_mult() == 0 ? spec::kDefaultMlpMult : m.mlp_mult();
  model.mlp_hidden = static_cast<int>(std::lround(static_cast<double>(mlp_mult) * m.d_model()));
  model.conv_width = m.conv_width() == 0 ? spec::kDefaultConvWidth : m.conv_width();
  // One mixer for every layer is `mixer`; a per-layer list only when the layers differ, so a
  // uniform pattern is the same model (and checkpoint) as the shorthand.
  std::vector<MixerKind> kinds;
  for (const std::string& name : spec::LayerMixers(m)) {
    kinds.push_back(MixerFromName(name));
  }
  model.mixer = kinds.empty() ? MixerKind::kMesa : kinds[0];
  if (std::any_of(kinds.begin(), kinds.end(), [&](MixerKind k) { return k != kinds[0]; })) {
    model.layer_mixers = kinds;
  }
  const bool any_mesa = model.MesaLayers() > 0;
  model.cg_steps = TrainingCgSteps(m, any_mesa);
  model.cg_tol = m.cg_tol();
  model.cg_max_steps = !any_mesa               ? 0
                       : m.cg_max_steps() == 0 ? std::max(model.cg_steps, kernels::kDefaultCgSteps)
                                               : m.cg_max_steps();
  model.lambda_floor = m.lambda_floor() == 0 ? 0.25f : m.lambda_floor();
  model.gamma_cap = m.has_gamma_cap() ? m.gamma_cap() : 0.0025f;
  model.logit_softcap = m.has_logit_softcap() ? m.logit_softcap() : 30.0f;
  model.attention_window = m.attention_window();
  model.tie_embeddings = !m.has_tie_embeddings() || m.tie_embeddings();
  if (model.LayersOf(MixerKind::kHawk) > 0) {
    model.rnn_width = static_cast<int>(spec::RnnWidthOf(m.d_model(), m.rnn_width_mult()));
    model.hawk_paper_init = m.hawk_init() == "paper";
  }
  if (model.LayersOf(MixerKind::kMamba2) > 0) {
    const spec::SsmShape ssm =
        spec::SsmShapeOf(m.d_model(), m.ssm_expand(), m.ssm_head_dim(), m.ssm_state_dim());
    model.ssm_inner = static_cast<int>(ssm.inner);
    model.ssm_head_dim = static_cast<int>(ssm.head_dim);
    model.ssm_state = static_cast<int>(ssm.state);
  }
  return model;
}

OptimizerSettings ResolveOptimizer(const mesa::v1::OptimizerConfig& o) {
  OptimizerSettings opt;
  opt.lr = o.lr();
  // Explicit presence: unset takes the default, an explicit 0 is honoured.
  opt.min_lr_ratio = o.has_min_lr_ratio() ? o.min_lr_ratio() : 0.1f;
  opt.weight_decay = o.has_weight_decay() ? o.weight_decay() : 0.1f;
  opt.beta1 = o.beta1() == 0 ? 0.9f : o.beta1();
  opt.beta2 = o.beta2() == 0 ? 0.98f : o.beta2();
  opt.eps = o.eps() == 0 ? 1e-8f : o.eps();
  opt.grad_clip = o.has_grad_clip() ? o.grad_clip() : 1.0f;  // 0: no clipping
  opt.warmup_steps = o.warmup_steps();
  opt.zero_stage = o.zero_stage();
  return opt;
}

TrainingSettings ResolveTraining(const mesa::v1::TrainingConfig& t) {
  TrainingSettings training;
  training.steps = t.steps();
  training.seed = t.seed();
  training.device = t.device().empty() ? "auto" : t.device();
  // Validated before (spec/validate_job_spec.cc); empty is "auto".
  training.precision = spec::ParsePrecision(t.precision()).value_or(Precision::kAuto);
  training.log_interval = t.log_interval() == 0 ? 1 : t.log_interval();
  training.eval_interval = t.eval_interval();
  training.eval_batches = t.eval_batches();
  training.profile_start_step = t.profile().start_step();
  training.profile_steps = t.profile().start_step() > 0 ? std::max(1, t.profile().steps()) : 0;
  training.context_parallel = std::max(1, t.context_parallel());
  training.deterministic = t.deterministic();
  return training;
}

// The tokenizer as the files say (spec::CheckJobTokenizer), and for a tokenizer.json the data does
// not describe, its own BOS and vocabulary.
absl::StatusOr<spec::TokenizerRecord> ResolveTokenizer(const mesa::v1::JobSpec& spec) {
  absl::StatusOr<spec::TokenizerRecord> record = spec::CheckJobTokenizer(spec);
  if (!record.ok()) return record.status();
  if (record->bos_id >= 0 && record->vocab_size > 0) return record;
  const std::string& file = spec.data().tokenizer_file();
  if (record->kind == "spm") {
    // SentencePiece is not loaded outside mesa-data: the shards' record must say BOS and size.
    return Invalid("data.tokenizer",
                   "spm needs shards written by mesa-data --tokenizer spm (their mesa_data.json "
                   "gives the BOS id and the vocabulary)");
  }
  absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> hf = LoadHfTokenizer(file);
  if (!hf.ok()) return Invalid("data.tokenizer_file", hf.status().message());
  absl::StatusOr<std::string> sha = spec::FileSha256(file);
  if (!sha.ok()) return Invalid("data.tokenizer_file", sha.status().message());
  record->bos_id = (*hf)->bos_id();
  record->vocab_size = (*hf)->vocab_size();
  record->files = {{file, *sha}};
  if (spec.model().vocab_size() < record->vocab_size) {
    return Invalid("model.vocab_size",
                   absl::StrCat(spec.model().vocab_size(), " is smaller than the vocabulary of ",
                                file, " (", record->vocab_size, " ids)"));
  }
  return record;
}

// The only checks that touch the file system.
absl::Status ExpandShards(bool is_eval, DataSettings& data, EvalSettings& eval) {
  if (!is_eval && !data.synthetic.has_value()) {
    auto files = ExpandShardPattern(data.train_pattern, "data.train_path");
    if (!files.ok()) return files.status();
    data.train_paths = *std::move(files);
  }
  if (!data.val_pattern.empty()) {
    auto files = ExpandShardPattern(data.val_pattern, "data.val_path");
    if (!files.ok()) return files.status();
    data.val_paths = *std::move(files);
  }
  for (size_t i = 0; i < eval.datasets.size(); ++i) {
    EvalSettings::Dataset& d = eval.datasets[i];
    if (d.synthetic_task >= 0) continue;
    if (d.pattern == data.val_pattern) {
      d.paths = data.val_paths;
      continue;
    }
    auto files = ExpandShardPattern(d.pattern, absl::StrCat("eval.datasets[", i, "].val_path"));
    if (!files.ok()) return files.status();
    d.paths = *std::move(files);
  }
  return absl::OkStatus();
}

}  // namespace

int TrainingCgSteps(const mesa::v1::ModelConfig& m, bool any_mesa) {
  return !any_mesa ? 0 : m.cg_steps() == 0 ? spec::kDefaultCgSteps : m.cg_steps();
}

absl::StatusOr<JobConfig> ResolveJobConfig(const mesa::v1::JobSpec& spec_in,
                                           const ResolveOptions& options) {
  JobConfig config;
  config.spec = spec_in;
  // A job file run by hand may leave the type out: it is what mesa-train was asked to do.
  if (config.spec.type() == mesa::v1::JOB_TYPE_UNSPECIFIED) {
    config.spec.set_type(options.eval_mode ? mesa::v1::JOB_TYPE_EVAL : mesa::v1::JOB_TYPE_TRAIN);
  }
  config.is_eval = options.eval_mode || config.spec.type() == mesa::v1::JOB_TYPE_EVAL;
  if (options.world_size < 1) return Invalid("world_size", "must be >= 1");
  // The rules every binary shares, judged for this run: its real rank count and device.
  spec::ValidateOptions validate;
  validate.world_size = options.world_size;
  validate.device = !options.device.empty()                   ? options.device
                    : config.spec.training().device().empty() ? "auto"
                                                              : config.spec.training().device();
  validate.as_eval = options.eval_mode;
  MESA_RETURN_IF_ERROR(spec::ValidateJobSpec(config.spec, validate));

  const mesa::v1::JobSpec& spec = config.spec;
  config.training = ResolveTraining(spec.training());
  // Generation reads its model and tokenizer from the checkpoint (model/generate); the
  // spec's generate section is used as it is.
  config.is_generate = spec.type() == mesa::v1::JOB_TYPE_GENERATE;
  if (config.is_generate) return config;
  config.data = ResolveData(spec.data());
  if (options.expand_globs) {
    absl::StatusOr<spec::TokenizerRecord> tokenizer = ResolveTokenizer(spec);
    if (!tokenizer.ok()) return tokenizer.status();
    config.data.tokenizer = *std::move(tokenizer);
  }
  config.model = ResolveModel(spec.model(), config.data.tokenizer);
  MESA_RETURN_IF_ERROR(ValidateModelConfig(config.model));
  config.optimizer = ResolveOptimizer(spec.optimizer());
  const mesa::v1::CheckpointConfig& c = spec.checkpoint();
  config.checkpoint.dir = c.dir();
  config.checkpoint.interval_steps = c.interval_steps();
  config.checkpoint.keep_last = c.keep_last() == 0 ? 3 : c.keep_last();
  config.checkpoint.init_from = c.init_from();
  config.checkpoint.resume = c.resume() == "auto"   ? CheckpointSettings::Resume::kAuto
                             : c.resume() == "must" ? CheckpointSettings::Resume::kMust
                                                    : CheckpointSettings::Resume::kNever;
  config.eval.checkpoint = spec.eval().checkpoint();
  config.eval.max_batches = spec.eval().max_batches();
  config.eval.per_position = spec.eval().per_position();
  config.eval.internals = spec.eval().internals();
  const mesa::v1::CgSweep& sweep = spec.eval().cg_sweep();
  for (int32_t steps : sweep.fixed_steps()) config.eval.cg_sweep.push_back({steps, 0.0f});
  const int bound = sweep.max_steps() > 0 ? sweep.max_steps() : spec::kDefaultCgSteps;
  for (float tolerance : sweep.tolerances()) config.eval.cg_sweep.push_back({bound, tolerance});
  for (const mesa::v1::EvalDataset& d : spec.eval().datasets()) {
    config.eval.datasets.push_back(
        {d.name(), d.val_path(), {}, d.seq_len() > 0 ? d.seq_len() : config.data.seq_len});
    config.eval.datasets.back().document_windows = d.windows() == "documents";
  }
  if (spec.data().has_synthetic()) {
    const mesa::v1::SyntheticData& syn = spec.data().synthetic();
    SyntheticSettings settings;
    settings.seed = syn.seed();
    settings.train_examples =
        syn.train_examples() > 0 ? syn.train_examples() : spec::kDefaultSyntheticTrainExamples;
    settings.eval_examples =
        syn.eval_examples() > 0 ? syn.eval_examples() : spec::kDefaultSyntheticEvalExamples;
    for (int i = 0; i < syn.tasks_size(); ++i) {
      settings.tasks.push_back(spec::ResolveSyntheticTask(syn.tasks(i)));
      int same = 0;
      for (const mesa::v1::SyntheticTask& t : syn.tasks()) same += t.task() == syn.tasks(i).task();
      settings.names.push_back(!syn.tasks(i).name().empty() ? syn.tasks(i).name()
                               : same > 1 ? absl::StrCat(syn.tasks(i).task(), ".", i)
                                          : syn.tasks(i).task());
      config.eval.datasets.push_back({settings.names.back(), "", {}, config.data.seq_len, i});
    }
    config.data.synthetic = std::move(settings);
  }
  // Absent: on where rows are packed documents (token shards, whole rows per rank).
  config.data.reset_at_bos_set = spec.data().has_reset_at_bos();
  config.data.reset_at_bos = config.data.reset_at_bos_set
                                 ? spec.data().reset_at_bos()
                                 : !config.data.synthetic && config.training.context_parallel == 1;
  config.model.reset_at_bos = config.data.reset_at_bos;
  for (const mesa::v1::EvalTask& t : spec.eval().tasks()) {
    EvalSettings::Task task{t.name(), t.path(), t.num_fewshot(), t.adapter()};
    task.metrics.assign(t.metrics().begin(), t.metrics().end());
    task.primary_metric = t.primary_metric();
    const spec::TaskAdapter* adapter = spec::FindTaskAdapter(t.adapter());
    task.max_new_tokens = t.max_new_tokens() > 0 ? t.max_new_tokens()
                          : adapter != nullptr && adapter->max_new_tokens > 0
                              ? adapter->max_new_tokens
                          : t.has_niah() ? spec::kDefaultNiahNewTokens
                                         : spec::kDefaultTaskNewTokens;
    if (t.has_niah()) task.niah = t.niah();
    task.stop.assign(t.stop().begin(), t.stop().end());
    if (task.stop.empty() && adapter != nullptr && adapter->stop != nullptr) {
      task.stop.push_back(adapter->stop);
    }
    task.max_length = t.max_length();
    if (!t.truncation().empty()) task.truncation = t.truncation();
    task.add_bos = !t.has_add_bos() || t.add_bos();
    task.fewshot_draws = std::max(1, t.fewshot_draws());
    task.fewshot_seed = t.has_fewshot_seed() ? t.fewshot_seed() : config.training.seed;
    task.fewshot_path = t.fewshot_path();
    task.bleu = spec::TaskScoresBleu(t);
    config.eval.tasks.push_back(std::move(task));
  }
  for (const mesa::v1::EvalTaskGroup& g : spec.eval().task_groups()) {
    config.eval.task_groups.push_back({g.name(), {g.tasks().begin(), g.tasks().end()}});
  }
  if (config.is_eval && config.eval.datasets.empty() &&
      (config.eval.tasks.empty() || !config.data.val_pattern.empty())) {
    config.eval.datasets.push_back({"val", config.data.val_pattern, {}, config.data.seq_len});
  }
  if (options.expand_globs) {
    MESA_RETURN_IF_ERROR(ExpandShards(config.is_eval, config.data, config.eval));
  }
  return config;
}

}  // namespace mesa::model
