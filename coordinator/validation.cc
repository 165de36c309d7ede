#include "coordinator/validation.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mesa::coordinator {
namespace {

using ::mesa::v1::JobSpec;
using ::mesa::v1::JobType;

constexpr int kMaxPathLength = 4096;
constexpr int kMaxLabels = 64;
constexpr int kMaxLabelValue = 256;

class Checker {
 public:
  void Add(absl::string_view path, absl::string_view message) {
    problems_.push_back(absl::StrCat(path, ": ", message));
  }
  void IntRange(absl::string_view path, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) Add(path, absl::StrCat("must be between ", lo, " and ", hi, ", got ", v));
  }
  void Positive(absl::string_view path, int64_t v, int64_t hi) {
    if (v == 0) {
      Add(path, "required (must be > 0)");
    } else {
      IntRange(path, v, 1, hi);
    }
  }
  void FloatRange(absl::string_view path, double v, double lo, double hi) {
    if (!std::isfinite(v) || v < lo || v > hi) {
      Add(path, absl::StrCat("must be between ", lo, " and ", hi, ", got ", v));
    }
  }
  void MaxLen(absl::string_view path, absl::string_view s, size_t n) {
    if (s.size() > n) Add(path, absl::StrCat("must be at most ", n, " characters, got ", s.size()));
  }
  void OneOf(absl::string_view path, absl::string_view v, std::initializer_list<absl::string_view> ok) {
    for (absl::string_view o : ok) {
      if (v == o) return;
    }
    std::vector<std::string> quoted;
    for (absl::string_view o : ok) {
      if (!o.empty()) quoted.push_back(absl::StrCat("\"", o, "\""));
    }
    Add(path, absl::StrCat("must be one of ", absl::StrJoin(quoted, ", "), " (or empty), got \"", v, "\""));
  }
  std::vector<std::string> Take() { return std::move(problems_); }

 private:
  std::vector<std::string> problems_;
};

bool IsLabelKey(absl::string_view k) {
  if (k.empty() || k.size() > 63 || !absl::ascii_isalnum(k[0])) return false;
  for (char c : k) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.' && c != '/') return false;
  }
  return true;
}

}  // namespace

bool IsValidName(absl::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (name[0] < 'a' || name[0] > 'z') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

bool IsValidIdentifier(absl::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

std::vector<std::string> JobSpecProblems(const JobSpec& spec) {
  Checker c;
  const bool train = spec.type() == JobType::JOB_TYPE_TRAIN;
  const bool eval = spec.type() == JobType::JOB_TYPE_EVAL;

  if (spec.name().empty()) {
    c.Add("spec.name", "required");
  } else if (!IsValidName(spec.name())) {
    c.Add("spec.name", absl::StrCat("must match ^[a-z][a-z0-9-]{0,62}$, got \"", spec.name(), "\""));
  }
  if (!train && !eval) {
    c.Add("spec.type", absl::StrCat("must be JOB_TYPE_TRAIN or JOB_TYPE_EVAL, got ",
                                    mesa::v1::JobType_Name(spec.type())));
  }
  if (!spec.queue().empty() && !IsValidName(spec.queue())) {
    c.Add("spec.queue", absl::StrCat("must match ^[a-z][a-z0-9-]{0,62}$, got \"", spec.queue(), "\""));
  }
  c.IntRange("spec.priority", spec.priority(), -1000, 1000);
  c.IntRange("spec.max_retries", spec.max_retries(), 0, 100);

  const auto& r = spec.resources();
  c.IntRange("spec.resources.gpus", r.gpus(), 0, 4096);
  c.IntRange("spec.resources.cpu_threads", r.cpu_threads(), 0, 1024);
  c.IntRange("spec.resources.max_gpus_per_node", r.max_gpus_per_node(), 0, 1024);
  c.IntRange("spec.resources.cpu_ranks", r.cpu_ranks(), 0, 4096);
  if (r.gpus() > 0 && r.cpu_ranks() > 1) {
    c.Add("spec.resources.cpu_ranks", "only applies to CPU jobs (resources.gpus = 0)");
  }

  if (spec.labels_size() > kMaxLabels) {
    c.Add("spec.labels", absl::StrCat("at most ", kMaxLabels, " labels, got ", spec.labels_size()));
  }
  for (const auto& [k, v] : spec.labels()) {
    if (!IsLabelKey(k)) {
      c.Add(absl::StrCat("spec.labels[\"", k, "\"]"),
            "key must be 1 to 63 of [A-Za-z0-9._/-], starting with a letter or digit");
    }
    c.MaxLen(absl::StrCat("spec.labels[\"", k, "\"]"), v, kMaxLabelValue);
  }

  // Model: required for training; for evaluation the checkpoint carries it, so only check if set.
  const auto& m = spec.model();
  if (train || spec.has_model()) {
    c.Positive("spec.model.vocab_size", m.vocab_size(), 1 << 22);
    c.Positive("spec.model.d_model", m.d_model(), 65536);
    c.Positive("spec.model.n_layers", m.n_layers(), 1024);
    c.Positive("spec.model.n_heads", m.n_heads(), 4096);
    c.Positive("spec.model.head_dim", m.head_dim(), 4096);
    c.FloatRange("spec.model.mlp_mult", m.mlp_mult(), 0, 64);
    c.IntRange("spec.model.conv_width", m.conv_width(), 0, 64);
    c.OneOf("spec.model.mixer", m.mixer(), {"", "mesa", "gla"});
    c.IntRange("spec.model.cg_steps", m.cg_steps(), 0, 1000);
    c.FloatRange("spec.model.cg_tol", m.cg_tol(), 0, 1);
    c.IntRange("spec.model.cg_max_steps", m.cg_max_steps(), 0, 10000);
    c.FloatRange("spec.model.lambda_floor", m.lambda_floor(), 0, 1e6);
    c.FloatRange("spec.model.gamma_cap", m.gamma_cap(), 0, 1);
    c.FloatRange("spec.model.logit_softcap", m.logit_softcap(), 0, 1e4);
  }

  const auto& d = spec.data();
  if (train && d.train_path().empty()) c.Add("spec.data.train_path", "required for JOB_TYPE_TRAIN");
  c.MaxLen("spec.data.train_path", d.train_path(), kMaxPathLength);
  c.MaxLen("spec.data.val_path", d.val_path(), kMaxPathLength);
  c.OneOf("spec.data.tokenizer", d.tokenizer(), {"", "byte", "gpt2"});
  if (train) {
    c.Positive("spec.data.seq_len", d.seq_len(), 1 << 20);
    c.Positive("spec.data.batch_size", d.batch_size(), 1 << 20);
  } else {
    c.IntRange("spec.data.seq_len", d.seq_len(), 0, 1 << 20);
    c.IntRange("spec.data.batch_size", d.batch_size(), 0, 1 << 20);
  }
  c.IntRange("spec.data.grad_accum_steps", d.grad_accum_steps(), 0, 4096);

  const auto& o = spec.optimizer();
  if (train && o.lr() == 0) {
    c.Add("spec.optimizer.lr", "required (must be > 0)");
  } else {
    c.FloatRange("spec.optimizer.lr", o.lr(), 0, 10);
  }
  c.FloatRange("spec.optimizer.min_lr_ratio", o.min_lr_ratio(), 0, 1);
  c.FloatRange("spec.optimizer.weight_decay", o.weight_decay(), 0, 10);
  c.FloatRange("spec.optimizer.beta1", o.beta1(), 0, 0.999999);
  c.FloatRange("spec.optimizer.beta2", o.beta2(), 0, 0.999999);
  c.FloatRange("spec.optimizer.eps", o.eps(), 0, 1);
  c.FloatRange("spec.optimizer.grad_clip", o.grad_clip(), 0, 1e6);
  c.IntRange("spec.optimizer.zero_stage", o.zero_stage(), 0, 1);

  const auto& t = spec.training();
  constexpr int64_t kMaxSteps = 1'000'000'000'000;
  if (train) {
    c.Positive("spec.training.steps", t.steps(), kMaxSteps);
  } else {
    c.IntRange("spec.training.steps", t.steps(), 0, kMaxSteps);
  }
  c.IntRange("spec.optimizer.warmup_steps", o.warmup_steps(), 0,
             t.steps() > 0 ? t.steps() : kMaxSteps);
  c.OneOf("spec.training.device", t.device(), {"", "auto", "cpu", "cuda"});
  if (t.device() == "cuda" && r.gpus() == 0) {
    c.Add("spec.training.device", "\"cuda\" needs spec.resources.gpus > 0");
  }
  c.OneOf("spec.training.precision", t.precision(), {"", "auto", "bf16", "fp32"});
  if (t.precision() == "bf16" && (t.device() == "cpu" || r.gpus() == 0)) {
    c.Add("spec.training.precision", "\"bf16\" needs a GPU (spec.resources.gpus > 0)");
  }
  c.IntRange("spec.training.log_interval", t.log_interval(), 0, kMaxSteps);
  c.IntRange("spec.training.eval_interval", t.eval_interval(), 0, kMaxSteps);
  c.IntRange("spec.training.eval_batches", t.eval_batches(), 0, kMaxSteps);

  const auto& k = spec.checkpoint();
  c.MaxLen("spec.checkpoint.dir", k.dir(), kMaxPathLength);
  c.IntRange("spec.checkpoint.interval_steps", k.interval_steps(), 0, kMaxSteps);
  c.IntRange("spec.checkpoint.keep_last", k.keep_last(), 0, 1000);
  c.MaxLen("spec.checkpoint.init_from", k.init_from(), kMaxPathLength);

  const auto& e = spec.eval();
  if (eval && e.checkpoint().empty()) c.Add("spec.eval.checkpoint", "required for JOB_TYPE_EVAL");
  c.MaxLen("spec.eval.checkpoint", e.checkpoint(), kMaxPathLength);
  c.IntRange("spec.eval.max_batches", e.max_batches(), 0, kMaxSteps);
  return c.Take();
}

absl::Status ValidateJobSpec(const JobSpec& spec) {
  std::vector<std::string> problems = JobSpecProblems(spec);
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
}

}  // namespace mesa::coordinator
