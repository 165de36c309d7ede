#include "model/config/job_config.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

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

absl::Status CheckFinite(absl::string_view field, float value) {
  if (!std::isfinite(value)) return Invalid(field, "must be a finite number");
  return absl::OkStatus();
}

#define MESA_RETURN_IF_ERROR(expr)            \
  do {                                        \
    absl::Status status_ = (expr);            \
    if (!status_.ok()) return status_;        \
  } while (0)

}  // namespace

const char* MixerName(MixerKind mixer) { return mixer == MixerKind::kMesa ? "mesa" : "gla"; }

const char* TokenizerName(TokenizerKind tokenizer) {
  return tokenizer == TokenizerKind::kByte ? "byte" : "gpt2";
}

const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp32:
      return "fp32";
    case Precision::kAuto:
      break;
  }
  return "auto";
}

int64_t ModelConfig::NumParameters() const {
  const int64_t c = d_model, hd = qk_dim(), h = n_heads, f = mlp_hidden;
  const int64_t per_layer = c                        // attn_norm
                            + 3 * hd * c             // q, k, v
                            + 2 * hd * conv_width    // q/k conv
                            + 2 * (h * c + h)        // a_proj, b_proj
                            + hd                     // lambda
                            + head_dim               // o_norm
                            + c * hd                 // o_proj
                            + c                      // mlp_norm
                            + 3 * c * f;             // gate, up, down
  return int64_t{vocab_size} * c + n_layers * per_layer + c;
}

absl::Status ValidateModelConfig(const ModelConfig& m) {
  MESA_RETURN_IF_ERROR(CheckRange("model.vocab_size", m.vocab_size, 2, 1 << 24));
  MESA_RETURN_IF_ERROR(CheckRange("model.d_model", m.d_model, 1, 16384));
  MESA_RETURN_IF_ERROR(CheckRange("model.n_layers", m.n_layers, 1, 512));
  MESA_RETURN_IF_ERROR(CheckRange("model.n_heads", m.n_heads, 1, 256));
  MESA_RETURN_IF_ERROR(CheckRange("model.head_dim", m.head_dim, 1, 1024));
  if (m.head_dim % 16 != 0 || m.head_dim > 128) {
    return Invalid("model.head_dim", absl::StrCat("the Mesa operator needs a multiple of 16 in [16, 128], got ",
                                                  m.head_dim));
  }
  MESA_RETURN_IF_ERROR(CheckRange("model.mlp_mult * model.d_model", m.mlp_hidden, 1, 1 << 20));
  MESA_RETURN_IF_ERROR(CheckRange("model.conv_width", m.conv_width, 1, 16));
  MESA_RETURN_IF_ERROR(CheckRange("model.cg_steps", m.cg_steps, 0, 1000));
  MESA_RETURN_IF_ERROR(CheckRange("model.cg_max_steps", m.cg_max_steps, 0, 1000));
  if (m.mixer == MixerKind::kGla && m.cg_steps != 0) {
    return Invalid("model.cg_steps", "mixer \"gla\" is Mesa with 0 CG steps; leave cg_steps unset");
  }
  if (!(m.cg_tol >= 0.0f) || !std::isfinite(m.cg_tol)) {
    return Invalid("model.cg_tol", "must be a finite number >= 0");
  }
  if (!(m.lambda_floor > 0.0f) || !std::isfinite(m.lambda_floor)) {
    return Invalid("model.lambda_floor", "must be a finite number > 0 (the CG system must stay SPD)");
  }
  if (!(m.gamma_cap >= 0.0f && m.gamma_cap < 1.0f)) {
    return Invalid("model.gamma_cap", absl::StrCat("must be in [0, 1), got ", m.gamma_cap));
  }
  if (!(m.logit_softcap > 0.0f) || !std::isfinite(m.logit_softcap)) {
    return Invalid("model.logit_softcap", "must be a finite number > 0");
  }
  if (m.bos_token < 0 || m.bos_token >= m.vocab_size) {
    return Invalid("model.vocab_size",
                   absl::StrCat("must be larger than the tokenizer's BOS id ", m.bos_token));
  }
  if (m.NumParameters() > (int64_t{1} << 34)) {
    return Invalid("model", absl::StrCat("too many parameters (", m.NumParameters(), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ExpandShardPattern(const std::string& pattern,
                                                            const std::string& field) {
  std::vector<std::string> files;
  for (absl::string_view piece : absl::StrSplit(pattern, ',', absl::SkipWhitespace())) {
    std::string item(absl::StripAsciiWhitespace(piece));
    if (item.find_first_of("*?[") != std::string::npos) {
      glob_t matches;
      const int rc = glob(item.c_str(), 0, nullptr, &matches);
      if (rc == 0) {
        for (size_t i = 0; i < matches.gl_pathc; ++i) files.push_back(matches.gl_pathv[i]);
      }
      globfree(&matches);
      if (rc != 0) {
        return absl::NotFoundError(absl::StrCat(field, ": pattern \"", item, "\" matches no file"));
      }
    } else {
      struct stat info;
      if (stat(item.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
        return absl::NotFoundError(absl::StrCat(field, ": shard \"", item, "\" does not exist"));
      }
      files.push_back(item);
    }
  }
  if (files.empty()) return Invalid(field, "names no shard file");
  std::sort(files.begin(), files.end());
  return files;
}

absl::StatusOr<JobConfig> ResolveJobConfig(const mesa::v1::JobSpec& spec,
                                           const ResolveOptions& options) {
  JobConfig config;
  config.spec = spec;
  config.is_eval = options.eval_mode || spec.type() == mesa::v1::JOB_TYPE_EVAL;

  // Data first: the tokenizer decides the BOS id the model validation needs.
  const mesa::v1::DataConfig& d = spec.data();
  DataSettings& data = config.data;
  if (d.tokenizer().empty() || d.tokenizer() == "byte") {
    data.tokenizer = TokenizerKind::kByte;
  } else if (d.tokenizer() == "gpt2") {
    data.tokenizer = TokenizerKind::kGpt2;
  } else {
    return Invalid("data.tokenizer", absl::StrCat("must be \"byte\" or \"gpt2\", got \"",
                                                  d.tokenizer(), "\""));
  }
  MESA_RETURN_IF_ERROR(CheckRange("data.seq_len", d.seq_len(), 1, 1 << 20));
  MESA_RETURN_IF_ERROR(CheckRange("data.batch_size", d.batch_size(), 1, 1 << 20));
  MESA_RETURN_IF_ERROR(CheckRange("data.grad_accum_steps", d.grad_accum_steps(), 0, 1 << 16));
  data.seq_len = d.seq_len();
  data.batch_size = d.batch_size();
  data.grad_accum_steps = d.grad_accum_steps() == 0 ? 1 : d.grad_accum_steps();
  if (options.world_size < 1) return Invalid("world_size", "must be >= 1");
  if (data.batch_size % (data.grad_accum_steps * options.world_size) != 0) {
    return Invalid("data.batch_size",
                   absl::StrCat("must be divisible by grad_accum_steps (", data.grad_accum_steps,
                                ") x world size (", options.world_size, "), got ",
                                data.batch_size));
  }
  data.train_pattern = d.train_path();
  data.val_pattern = d.val_path();

  // Model.
  const mesa::v1::ModelConfig& m = spec.model();
  ModelConfig& model = config.model;
  model.bos_token = data.tokenizer == TokenizerKind::kByte ? 256 : 50256;
  model.vocab_size = m.vocab_size();
  model.d_model = m.d_model();
  model.n_layers = m.n_layers();
  model.n_heads = m.n_heads();
  model.head_dim = m.head_dim();
  MESA_RETURN_IF_ERROR(CheckFinite("model.mlp_mult", m.mlp_mult()));
  if (m.mlp_mult() < 0) return Invalid("model.mlp_mult", "must be >= 0");
  const float mlp_mult = m.mlp_mult() == 0 ? 3.0f : m.mlp_mult();
  model.mlp_hidden = static_cast<int>(std::lround(static_cast<double>(mlp_mult) * m.d_model()));
  if (m.conv_width() < 0) return Invalid("model.conv_width", "must be >= 0 (0 = 4)");
  model.conv_width = m.conv_width() == 0 ? 4 : m.conv_width();
  if (m.mixer().empty() || m.mixer() == "mesa") {
    model.mixer = MixerKind::kMesa;
    model.cg_steps = m.cg_steps() == 0 ? 30 : m.cg_steps();
  } else if (m.mixer() == "gla") {
    model.mixer = MixerKind::kGla;
    model.cg_steps = m.cg_steps();
  } else {
    return Invalid("model.mixer", absl::StrCat("must be \"mesa\" or \"gla\", got \"", m.mixer(),
                                               "\""));
  }
  if (m.cg_steps() < 0) return Invalid("model.cg_steps", "must be >= 0");
  model.cg_tol = m.cg_tol();
  if (m.cg_max_steps() < 0) return Invalid("model.cg_max_steps", "must be >= 0");
  model.cg_max_steps = m.cg_max_steps() == 0 ? std::max(model.cg_steps, 30) : m.cg_max_steps();
  if (model.mixer == MixerKind::kGla) model.cg_max_steps = 0;
  if (m.lambda_floor() < 0) return Invalid("model.lambda_floor", "must be > 0 (0 = 0.25)");
  model.lambda_floor = m.lambda_floor() == 0 ? 0.25f : m.lambda_floor();
  if (m.gamma_cap() < 0) return Invalid("model.gamma_cap", "must be >= 0 (0 = 0.0025)");
  model.gamma_cap = m.gamma_cap() == 0 ? 0.0025f : m.gamma_cap();
  if (m.logit_softcap() < 0) return Invalid("model.logit_softcap", "must be > 0 (0 = 30)");
  model.logit_softcap = m.logit_softcap() == 0 ? 30.0f : m.logit_softcap();
  MESA_RETURN_IF_ERROR(ValidateModelConfig(model));
  if (data.tokenizer == TokenizerKind::kByte && model.vocab_size < 257) {
    return Invalid("model.vocab_size", "must be >= 257 for the byte tokenizer (256 bytes + BOS)");
  }
  if (data.tokenizer == TokenizerKind::kGpt2 && model.vocab_size < 50257) {
    return Invalid("model.vocab_size", "must be >= 50257 for the gpt2 tokenizer");
  }

  // Optimizer.
  const mesa::v1::OptimizerConfig& o = spec.optimizer();
  OptimizerSettings& opt = config.optimizer;
  for (auto [name, value] : {std::pair<const char*, float>{"optimizer.lr", o.lr()},
                             {"optimizer.min_lr_ratio", o.min_lr_ratio()},
                             {"optimizer.weight_decay", o.weight_decay()},
                             {"optimizer.beta1", o.beta1()},
                             {"optimizer.beta2", o.beta2()},
                             {"optimizer.eps", o.eps()},
                             {"optimizer.grad_clip", o.grad_clip()}}) {
    MESA_RETURN_IF_ERROR(CheckFinite(name, value));
    if (value < 0) return Invalid(name, absl::StrCat("must be >= 0, got ", value));
  }
  if (!config.is_eval && !(o.lr() > 0)) return Invalid("optimizer.lr", "must be > 0");
  opt.lr = o.lr();
  opt.min_lr_ratio = o.min_lr_ratio() == 0 ? 0.1f : o.min_lr_ratio();
  if (opt.min_lr_ratio > 1) return Invalid("optimizer.min_lr_ratio", "must be in [0, 1]");
  opt.weight_decay = o.weight_decay() == 0 ? 0.1f : o.weight_decay();
  opt.beta1 = o.beta1() == 0 ? 0.9f : o.beta1();
  opt.beta2 = o.beta2() == 0 ? 0.98f : o.beta2();
  if (opt.beta1 >= 1) return Invalid("optimizer.beta1", "must be < 1");
  if (opt.beta2 >= 1) return Invalid("optimizer.beta2", "must be < 1");
  opt.eps = o.eps() == 0 ? 1e-8f : o.eps();
  opt.grad_clip = o.grad_clip() == 0 ? 1.0f : o.grad_clip();
  if (o.warmup_steps() < 0) return Invalid("optimizer.warmup_steps", "must be >= 0");
  opt.warmup_steps = o.warmup_steps();
  MESA_RETURN_IF_ERROR(CheckRange("optimizer.zero_stage", o.zero_stage(), 0, 1));
  opt.zero_stage = o.zero_stage();

  // Training.
  const mesa::v1::TrainingConfig& t = spec.training();
  TrainingSettings& training = config.training;
  if (!config.is_eval) {
    MESA_RETURN_IF_ERROR(CheckRange<int64_t>("training.steps", t.steps(), 1, int64_t{1} << 40));
  }
  training.steps = t.steps();
  training.seed = t.seed();
  if (t.device().empty() || t.device() == "auto" || t.device() == "cpu" || t.device() == "cuda") {
    training.device = t.device().empty() ? "auto" : t.device();
  } else {
    return Invalid("training.device",
                   absl::StrCat("must be \"auto\", \"cpu\" or \"cuda\", got \"", t.device(), "\""));
  }
  if (t.precision().empty() || t.precision() == "auto") {
    training.precision = Precision::kAuto;
  } else if (t.precision() == "bf16") {
    training.precision = Precision::kBf16;
  } else if (t.precision() == "fp32") {
    training.precision = Precision::kFp32;
  } else {
    return Invalid("training.precision",
                   absl::StrCat("must be \"auto\", \"bf16\" or \"fp32\", got \"",
                                t.precision(), "\""));
  }
  const std::string device = options.device.empty() ? training.device : options.device;
  if (training.precision == Precision::kBf16 && device == "cpu") {
    return Invalid("training.precision",
                   "\"bf16\" needs a CUDA device, but the device is \"cpu\" (the CPU backend "
                   "stores activations in fp32; use \"auto\" or \"fp32\")");
  }
  if (t.log_interval() < 0) return Invalid("training.log_interval", "must be >= 0");
  if (t.eval_interval() < 0) return Invalid("training.eval_interval", "must be >= 0");
  if (t.eval_batches() < 0) return Invalid("training.eval_batches", "must be >= 0");
  training.log_interval = t.log_interval() == 0 ? 1 : t.log_interval();
  training.eval_interval = t.eval_interval();
  training.eval_batches = t.eval_batches();

  // Checkpoints and eval.
  const mesa::v1::CheckpointConfig& c = spec.checkpoint();
  if (c.interval_steps() < 0) return Invalid("checkpoint.interval_steps", "must be >= 0");
  if (c.keep_last() < 0) return Invalid("checkpoint.keep_last", "must be >= 0 (0 = 3)");
  config.checkpoint.dir = c.dir();
  config.checkpoint.interval_steps = c.interval_steps();
  config.checkpoint.keep_last = c.keep_last() == 0 ? 3 : c.keep_last();
  config.checkpoint.init_from = c.init_from();
  if (spec.eval().max_batches() < 0) return Invalid("eval.max_batches", "must be >= 0");
  config.eval.checkpoint = spec.eval().checkpoint();
  config.eval.max_batches = spec.eval().max_batches();
  config.eval.per_position = spec.eval().per_position();

  // Shards last: the only checks that touch the file system.
  const bool needs_val = config.is_eval || training.eval_interval > 0;
  if (!config.is_eval && data.train_pattern.empty()) {
    return Invalid("data.train_path", "is required for training");
  }
  if (needs_val && data.val_pattern.empty()) {
    return Invalid("data.val_path", config.is_eval
                                        ? "is required for evaluation"
                                        : "is required when training.eval_interval > 0");
  }
  if (options.expand_globs) {
    if (!config.is_eval) {
      auto files = ExpandShardPattern(data.train_pattern, "data.train_path");
      if (!files.ok()) return files.status();
      data.train_paths = *std::move(files);
    }
    if (!data.val_pattern.empty()) {
      auto files = ExpandShardPattern(data.val_pattern, "data.val_path");
      if (!files.ok()) return files.status();
      data.val_paths = *std::move(files);
    }
  }
  return config;
}

}  // namespace mesa::model
