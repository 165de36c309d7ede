#include "spec/validate_job_spec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <initializer_list>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "kernels/common/limits.h"
#include "spec/array_jobs.h"
#include "spec/confined_paths.h"
#include "spec/device.h"
#include "spec/generation.h"
#include "spec/job_refs.h"
#include "spec/mixers.h"
#include "spec/precision.h"
#include "spec/spec_problems.h"
#include "spec/synthetic.h"
#include "spec/tasks.h"
#include "spec/validate_eval.h"

namespace mesa::spec {
namespace {

using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::Message;
using ::mesa::v1::JobSpec;

constexpr NumericLimit kNumericLimits[] = {
    {"priority", -1000, 1000, kAny},
    {"max_retries", 0, 100, kAny},
    {"max_run_seconds", 0, 366 * 24 * 3600, kAny},
    {"retention_seconds", -1, 100LL * 366 * 24 * 3600, kAny},
    {"resources.gpus", 0, 4096, kAny},
    {"resources.cpu_threads", 0, 1024, kAny},
    {"resources.max_gpus_per_node", 0, 1024, kAny},
    {"resources.cpu_ranks", 0, 4096, kAny},
    {"resources.memory_bytes", 0, 1LL << 50, kAny},  // per rank; 1 PiB
    // The model is required for evaluation too: it must match the checkpoint's architecture.
    {"model.vocab_size", 2, 1 << 24},
    {"model.d_model", 1, 16384},
    {"model.n_layers", 1, kMaxLayers},
    {"model.n_heads", 1, kMaxHeads},
    {"model.head_dim", kernels::kMinHeadDim, kernels::kMaxHeadDim},
    {"model.mlp_mult", 0, 64},
    {"model.conv_width", 0, kernels::kMaxConvWidth},
    {"model.cg_steps", 0, kernels::kMaxCgSteps},
    {"model.cg_tol", 0, 1},
    {"model.cg_max_steps", 0, kernels::kMaxCgSteps},
    {"model.lambda_floor", 0, 1e6},
    {"model.gamma_cap", 0, 0.999},
    {"model.logit_softcap", 0, 1e4},
    {"model.attention_window", 0, kernels::kMaxAttentionWindow},
    {"model.rnn_width_mult", 0, 16},
    {"model.ssm_expand", 0, 16},
    {"model.ssm_head_dim", 0, 1024},
    {"model.ssm_state_dim", 0, 1024},
    {"data.seq_len", 1, kMaxSeqLen},
    {"data.batch_size", 1, 1 << 20},
    {"data.grad_accum_steps", 0, 4096},
    {"optimizer.lr", 0, 10},
    {"optimizer.min_lr_ratio", 0, 1},
    {"optimizer.weight_decay", 0, 10},
    {"optimizer.beta1", 0, 0.999999},
    {"optimizer.beta2", 0, 0.999999},
    {"optimizer.eps", 0, 1},
    {"optimizer.grad_clip", 0, 1e6},
    {"optimizer.warmup_steps", 0, kMaxSteps},
    {"optimizer.zero_stage", 0, 1},
    {"training.steps", 1, kMaxSteps, kTrain},
    {"training.steps", 0, kMaxSteps, kEval},
    {"training.log_interval", 0, kMaxSteps},
    {"training.eval_interval", 0, kMaxSteps},
    {"training.eval_batches", 0, kMaxSteps},
    {"training.context_parallel", 0, 4096},
    {"training.profile.start_step", 0, kMaxSteps, kTrain},
    {"training.profile.steps", 0, 100, kTrain},
    {"checkpoint.interval_steps", 0, kMaxSteps},
    {"checkpoint.keep_last", 0, 1000},
    {"eval.max_batches", 0, kMaxSteps},
    {"generate.max_new_tokens", 0, kMaxNewTokens, kGenerate},
    {"generate.temperature", 0, 100, kGenerate},
    {"generate.top_k", 0, 1 << 24, kGenerate},
    {"generate.top_p", 0, 1, kGenerate},
    {"generate.cg_tol", 0, 1, kGenerate},
    {"generate.cg_max_steps", 0, kernels::kMaxCgSteps, kGenerate},
};

// A number as people write it: whole numbers in full (16777216, not StrCat's 1.67772e+07), others
// as the shortest text that reads back as the same double.
std::string NumberText(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  char text[64];
  const std::to_chars_result r = std::to_chars(text, text + sizeof(text), v);
  return std::string(text, r.ptr);
}

// The value of a numeric field below `root`, by dotted path; *is_float for float fields.
double NumericField(const Message& root, absl::string_view path, bool* is_float) {
  const Message* message = &root;
  std::vector<absl::string_view> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const FieldDescriptor* field = message->GetDescriptor()->FindFieldByName(std::string(parts[i]));
    message = &message->GetReflection()->GetMessage(*message, field);
  }
  const FieldDescriptor* field =
      message->GetDescriptor()->FindFieldByName(std::string(parts.back()));
  const auto* reflection = message->GetReflection();
  *is_float = field->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return reflection->GetInt32(*message, field);
    case FieldDescriptor::CPPTYPE_INT64:
      return static_cast<double>(reflection->GetInt64(*message, field));
    case FieldDescriptor::CPPTYPE_UINT32:
      return reflection->GetUInt32(*message, field);
    case FieldDescriptor::CPPTYPE_UINT64:
      return static_cast<double>(reflection->GetUInt64(*message, field));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return reflection->GetFloat(*message, field);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return reflection->GetDouble(*message, field);
    default:
      return NAN;  // not numeric: a table error, caught by the test that walks the table
  }
}

bool IsLabelKey(absl::string_view k) {
  if (k.empty() || k.size() > 63 || !absl::ascii_isalnum(k[0])) return false;
  for (char c : k) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.' && c != '/') return false;
  }
  return true;
}

void CheckMixers(const mesa::v1::ModelConfig& m, int context_parallel, Problems& p) {
  if (!m.mixer().empty() && !IsMixerName(m.mixer())) {
    p.Add("model.mixer",
          absl::StrCat("must be one of ", MixerNameList(), " (or empty), got \"", m.mixer(), "\""));
  }
  if (m.layer_mixers_size() > 0) {
    if (!m.mixer().empty()) {
      p.Add("model.layer_mixers", "set model.mixer (every layer) or model.layer_mixers, not both");
    }
    for (int i = 0; i < m.layer_mixers_size(); ++i) {
      if (!IsMixerName(m.layer_mixers(i))) {
        p.Add(
            absl::StrCat("model.layer_mixers[", i, "]"),
            absl::StrCat("must be one of ", MixerNameList(), ", got \"", m.layer_mixers(i), "\""));
      }
    }
    if (m.n_layers() > 0 && m.n_layers() % m.layer_mixers_size() != 0) {
      p.Add("model.layer_mixers", absl::StrCat("a pattern of ", m.layer_mixers_size(),
                                               " must divide n_layers (", m.n_layers(), ")"));
    }
  }
  if (p.Has("model.mixer") || p.Has("model.layer_mixers") || p.Has("model.n_layers")) return;
  for (int i = 0; i < m.layer_mixers_size(); ++i) {
    if (p.Has(absl::StrCat("model.layer_mixers[", i, "]"))) return;
  }
  // Options of the Mesa solve apply only where a layer solves, the window only where one attends.
  bool any_mesa = false, any_attention = false, any_swa = false;
  for (const std::string& mixer : LayerMixers(m)) {
    any_mesa |= FindMixer(mixer)->solves_with_cg;
    any_attention |= FindMixer(mixer)->is_attention;
    any_swa |= FindMixer(mixer)->kind == MixerKind::kSwa;
  }
  // Context parallelism hands each layer's fixed-size recurrent state to the next slice; an
  // attention layer's state is the keys and values themselves (and its rotary positions would
  // need the slice's offset): not supported.
  if (any_attention && context_parallel > 1) {
    p.Add("training.context_parallel",
          "applies only to models without attention layers (\"attention\", \"swa\")");
  }
  if (!p.Has("model.attention_window")) {
    if (any_swa && m.attention_window() == 0) {
      p.Add("model.attention_window",
            "\"swa\" layers need a window: set model.attention_window > 0 (or use \"attention\" "
            "for global attention)");
    } else if (!any_attention && m.attention_window() != 0) {
      p.Add("model.attention_window",
            "applies only to \"attention\" and \"swa\" layers, and no layer is one; leave it "
            "unset");
    }
  }

  const std::vector<std::string> layer_mixers = LayerMixers(m);
  const bool any_hawk = std::any_of(layer_mixers.begin(), layer_mixers.end(),
                                    [](const std::string& mixer) { return mixer == "hawk"; });
  if (!any_hawk) {
    if (m.rnn_width_mult() != 0) {
      p.Add("model.rnn_width_mult",
            "applies only to \"hawk\" layers, and no layer is one; leave it unset");
    }
    if (!m.hawk_init().empty()) {
      p.Add("model.hawk_init",
            "applies only to \"hawk\" layers, and no layer is one; leave it unset");
    }
  } else {
    if (!m.hawk_init().empty() && m.hawk_init() != "released" && m.hawk_init() != "paper") {
      p.Add("model.hawk_init",
            absl::StrCat("must be \"released\" or \"paper\", got \"", m.hawk_init(), "\""));
    }
    const int64_t rnn_width = RnnWidthOf(m.d_model(), m.rnn_width_mult());
    if (!p.Has("model.rnn_width_mult") && !p.Has("model.d_model") && !p.Has("model.n_heads") &&
        m.n_heads() > 0 && (rnn_width < 1 || rnn_width % m.n_heads() != 0)) {
      p.Add("model.rnn_width_mult",
            absl::StrCat("the recurrent width rnn_width_mult x d_model = ", rnn_width,
                         " must be a positive multiple of n_heads (", m.n_heads(),
                         "): Hawk's gates have one block per head"));
    }
  }

  const bool any_mamba2 = std::any_of(layer_mixers.begin(), layer_mixers.end(),
                                      [](const std::string& mixer) { return mixer == "mamba2"; });
  if (!any_mamba2) {
    for (auto [field, set] : {std::pair{"model.ssm_expand", m.ssm_expand() != 0},
                              std::pair{"model.ssm_head_dim", m.ssm_head_dim() != 0},
                              std::pair{"model.ssm_state_dim", m.ssm_state_dim() != 0}}) {
      if (set) {
        p.Add(field, "applies only to \"mamba2\" layers, and no layer is one; leave it unset");
      }
    }
  } else if (!p.Has("model.ssm_expand") && !p.Has("model.ssm_head_dim") &&
             !p.Has("model.d_model")) {
    const SsmShape ssm =
        SsmShapeOf(m.d_model(), m.ssm_expand(), m.ssm_head_dim(), m.ssm_state_dim());
    if (ssm.inner % ssm.head_dim != 0) {
      p.Add("model.ssm_head_dim", absl::StrCat("the inner width ssm_expand x d_model = ", ssm.inner,
                                               " must be a multiple of ssm_head_dim (",
                                               ssm.head_dim, "): the SSD heads split it evenly"));
    }
  }

  if (!any_mesa) {
    for (auto [field, set] : {std::pair{"model.cg_steps", m.cg_steps() != 0},
                              std::pair{"model.cg_tol", m.cg_tol() != 0},
                              std::pair{"model.cg_max_steps", m.cg_max_steps() != 0}}) {
      if (set) {
        p.Add(field,
              "applies only to \"mesa\" layers, and no layer is one (\"gla\" is Mesa "
              "with 0 CG steps); leave it unset");
      }
    }
  }
}

void CheckModel(const JobSpec& spec, Problems& p) {
  const auto& m = spec.model();
  if (!p.Has("model.head_dim") && m.head_dim() % kernels::kHeadDimMultiple != 0) {
    p.Add("model.head_dim", absl::StrCat("must be a multiple of ", kernels::kHeadDimMultiple,
                                         " (the kernels' tile width), got ", m.head_dim()));
  }
  CheckMixers(m, spec.training().context_parallel(), p);
  // The CUDA kernels of the SSD take head and state widths up to the kernels' largest head width.
  const bool on_gpu = spec.resources().gpus() > 0 || spec.training().device() == "cuda";
  const auto mixers = LayerMixers(m);
  if (on_gpu && std::find(mixers.begin(), mixers.end(), "mamba2") != mixers.end() &&
      !p.Has("model.ssm_head_dim") && !p.Has("model.ssm_state_dim") && !p.Has("model.d_model")) {
    const SsmShape ssm =
        SsmShapeOf(m.d_model(), m.ssm_expand(), m.ssm_head_dim(), m.ssm_state_dim());
    for (auto [field, value] : {std::pair{"model.ssm_head_dim", ssm.head_dim},
                                std::pair{"model.ssm_state_dim", ssm.state}}) {
      if (value > kernels::kMaxHeadDim) {
        p.Add(field, absl::StrCat("must be at most ", kernels::kMaxHeadDim,
                                  " on a GPU (the CUDA kernels' widest tile), got ", value,
                                  "; or train on the CPU"));
      }
    }
  }
  if (p.Has("model.d_model") || p.Has("model.mlp_mult") || p.Has("model.n_layers") ||
      p.Has("model.n_heads") || p.Has("model.head_dim") || p.Has("model.vocab_size") ||
      p.Has("model.conv_width")) {
    return;  // the derived sizes below would only repeat those problems
  }
  const double mlp_mult = m.mlp_mult() == 0 ? kDefaultMlpMult : m.mlp_mult();
  const int64_t mlp_hidden = std::llround(mlp_mult * m.d_model());
  if (mlp_hidden < 1 || mlp_hidden > (1 << 20)) {
    p.Add("model.mlp_mult",
          absl::StrCat("mlp_mult x d_model must be between 1 and ", 1 << 20, ", got ", mlp_hidden));
    return;
  }
  const int64_t parameters = ModelParameters(m);
  if (parameters > kMaxParameters) {
    p.Add("model",
          absl::StrCat("too many parameters: ", parameters, " (at most ", kMaxParameters, ")"));
  }
}

// data.synthetic: tasks generated in-process replace the shards (and use the byte vocabulary's
// BOS as the unscored target; task ids from 256 up are fed one higher, spec/synthetic.h).
void CheckSynthetic(const JobSpec& spec, Problems& p) {
  const auto& d = spec.data();
  const auto& syn = d.synthetic();
  if (syn.tasks_size() < 1 || syn.tasks_size() > kMaxSyntheticTasks) {
    p.Add("data.synthetic.tasks",
          absl::StrCat("1 to ", kMaxSyntheticTasks, " tasks, got ", syn.tasks_size()));
  }
  for (auto [field, set] : {std::pair{"data.train_path", !d.train_path().empty()},
                            std::pair{"data.val_path", !d.val_path().empty()},
                            std::pair{"eval.datasets", spec.eval().datasets_size() > 0}}) {
    if (set) p.Add(field, "not used with data.synthetic (the tasks are the data); leave it out");
  }
  if (!d.tokenizer().empty() && d.tokenizer() != "byte") {
    p.Add("data.tokenizer", "data.synthetic uses the byte vocabulary: \"byte\" or empty");
  }
  for (auto [field, n] : {std::pair{"data.synthetic.train_examples", syn.train_examples()},
                          std::pair{"data.synthetic.eval_examples", syn.eval_examples()}}) {
    p.Range(field, n, 0, kMaxSyntheticExamples);
  }
  if (p.Has("data.seq_len")) return;
  // The model's embedding must hold every task's ids as fed, and BOS (257 for up to 256 ids: the
  // byte tokenizer's rule in CheckData says so).
  int vocab_needed = kSyntheticBos + 1, widest = -1;
  std::vector<std::string> named;
  for (int i = 0; i < syn.tasks_size(); ++i) {
    if (syn.tasks(i).name().empty()) continue;
    CheckResultName(absl::StrCat("data.synthetic.tasks[", i, "]"), syn.tasks(i).name(), named, p);
  }
  for (int i = 0; i < syn.tasks_size(); ++i) {
    const std::vector<std::string> problems = SyntheticTaskProblems(syn.tasks(i), d.seq_len());
    for (const std::string& problem : problems) {
      p.Add(absl::StrCat("data.synthetic.tasks[", i, "].", problem.substr(0, problem.find(':'))),
            problem.substr(problem.find(':') + 2));
    }
    if (!problems.empty()) continue;
    const int needed = SyntheticModelVocab(ResolveSyntheticTask(syn.tasks(i)));
    if (needed > vocab_needed) {
      vocab_needed = needed;
      widest = i;
    }
  }
  const int vocab = spec.model().vocab_size();
  if (widest >= 0 && !p.Has("model.vocab_size") && vocab < vocab_needed) {
    const SyntheticTaskParams t = ResolveSyntheticTask(syn.tasks(widest));
    p.Add("model.vocab_size",
          absl::StrCat("must be >= ", vocab_needed, " for data.synthetic.tasks[", widest, "] (",
                       t.name, ": ", t.vocab_size + t.noise_vocab_size, " token ids, those from ",
                       kSyntheticBos, " up fed one higher past BOS ", kSyntheticBos, "), got ",
                       vocab));
  }
}

void CheckData(const JobSpec& spec, bool train, bool eval, int world_size, Problems& p) {
  const auto& d = spec.data();
  const bool synthetic = d.has_synthetic();
  if (synthetic) CheckSynthetic(spec, p);
  if (d.has_reset_at_bos() && d.reset_at_bos()) {
    if (synthetic) {
      p.Add("data.reset_at_bos", "not with data.synthetic (each row is one generated example)");
    }
    if (spec.training().context_parallel() > 1) {
      p.Add("data.reset_at_bos",
            "not with training.context_parallel > 1 (document starts apply to whole rows)");
    }
  }
  if (train && d.train_path().empty() && !synthetic) {
    p.Add("data.train_path", "required for training (or data.synthetic)");
  }
  if (eval && d.val_path().empty() && spec.eval().datasets().empty() && !synthetic &&
      spec.eval().tasks().empty()) {
    p.Add("data.val_path",
          "required for evaluation (or eval.datasets, eval.tasks, or data.synthetic)");
  }
  if (train && spec.training().eval_interval() > 0 && d.val_path().empty() && !synthetic) {
    p.Add("data.val_path", "required when training.eval_interval > 0");
  }
  p.MaxLen("data.train_path", d.train_path(), kMaxPathLength);
  p.MaxLen("data.val_path", d.val_path(), kMaxPathLength);
  p.OneOf("data.tokenizer", d.tokenizer(), {"", "byte", "gpt2", "hf", "spm"});
  p.MaxLen("data.tokenizer_file", d.tokenizer_file(), kMaxPathLength);
  // spm: training and evaluation need only the shards, their mesa_data.json (BOS, vocabulary) and
  // the model file's hash; nothing here loads SentencePiece (docs/formats.md, Tokenizers).
  const bool tokenizer_has_file = d.tokenizer() == "hf" || d.tokenizer() == "spm";
  if (tokenizer_has_file && d.tokenizer_file().empty()) {
    p.Add("data.tokenizer_file",
          absl::StrCat("required with tokenizer ", d.tokenizer(),
                       d.tokenizer() == "hf" ? " (the tokenizer.json)" : " (the .model file)"));
  } else if (!tokenizer_has_file && !d.tokenizer_file().empty()) {
    p.Add("data.tokenizer_file", "applies only to tokenizer hf or spm");
  }
  // The tokenizer's ids, BOS included, must be rows of the embedding.
  const int vocab = spec.model().vocab_size();
  if (!p.Has("model.vocab_size")) {
    if ((d.tokenizer().empty() || d.tokenizer() == "byte") && vocab < 257) {
      p.Add("model.vocab_size", absl::StrCat("must be >= 257 for the byte tokenizer (256 bytes + "
                                             "BOS), got ",
                                             vocab));
    } else if (d.tokenizer() == "gpt2" && vocab < 50257) {
      p.Add("model.vocab_size",
            absl::StrCat("must be >= 50257 for the gpt2 tokenizer, got ", vocab));
    }
  }
  // Context parallelism: `context` consecutive ranks share each sequence, the data-parallel
  // replicas are the rest.
  const int context = std::max(1, spec.training().context_parallel());
  if (!p.Has("training.context_parallel") && context > 1) {
    if (world_size % context != 0) {
      p.Add("training.context_parallel",
            absl::StrCat("must divide the rank count (", world_size, "), got ", context));
    }
    // Task scoring runs each (example, choice) as one whole row of the model (model/tasks).
    if (spec.eval().tasks_size() > 0) {
      p.Add("eval.tasks",
            "task scoring runs on whole sequences: not with training.context_parallel "
            "> 1 (score the tasks in a job without it)");
    }
    if (!p.Has("data.seq_len")) CheckContextSlices("data.seq_len", d.seq_len(), context, p);
  }
  if (!p.Has("data.batch_size") && !p.Has("data.grad_accum_steps") &&
      !p.Has("training.context_parallel")) {
    const int64_t accum = std::max(1, d.grad_accum_steps());
    const int replicas = world_size % context == 0 ? world_size / context : world_size;
    if (d.batch_size() % (accum * replicas) != 0) {
      p.Add("data.batch_size",
            absl::StrCat("must be divisible by grad_accum_steps (", accum,
                         ") x data-parallel ranks (", replicas,
                         context > 1
                             ? absl::StrCat(": ", world_size, " ranks / context_parallel ", context)
                             : std::string(),
                         "), got ", d.batch_size()));
    }
  }
}

void CheckTraining(const JobSpec& spec, const ValidateOptions& options, bool train, Problems& p) {
  const auto& t = spec.training();
  const auto& r = spec.resources();
  if (train && !p.Has("optimizer.lr") && !(spec.optimizer().lr() > 0)) {
    p.Add("optimizer.lr", "required for training (must be > 0)");
  }
  if (t.steps() > 0 && spec.optimizer().warmup_steps() > t.steps()) {
    p.Add("optimizer.warmup_steps", absl::StrCat("must be at most training.steps (", t.steps(),
                                                 "), got ", spec.optimizer().warmup_steps()));
  }
  if (!t.device().empty()) {  // empty: "auto"
    if (auto device = ParseDevice(t.device()); !device.ok()) {
      p.Add("training.device", device.status().message());
    }
  }
  if (!options.device.empty()) {
    // mesa-train with --device: the run's device is known.
    if (t.precision() == "bf16" && options.device == "cpu") {
      p.Add("training.precision",
            "\"bf16\" needs a CUDA device, but the device is \"cpu\" (the "
            "CPU backend stores activations in fp32; use \"auto\" or "
            "\"fp32\")");
    }
  } else {
    if (t.device() == "cuda" && r.gpus() == 0) {
      p.Add("training.device", "\"cuda\" needs spec.resources.gpus > 0");
    }
    if (t.precision() == "bf16" && (t.device() == "cpu" || r.gpus() == 0)) {
      p.Add("training.precision",
            "\"bf16\" needs a GPU (spec.resources.gpus > 0, device not "
            "\"cpu\")");
    }
  }
  if (!t.precision().empty()) {  // empty: "auto"
    if (auto precision = ParsePrecision(t.precision()); !precision.ok()) {
      p.Add("training.precision", precision.status().message());
    }
  }
}

// Normalised roots; a root that does not normalise is kept as written (it then holds nothing).
std::vector<std::string> NormalRoots(const std::vector<std::string>& roots) {
  std::vector<std::string> out;
  for (const std::string& root : roots) {
    absl::StatusOr<std::string> normal = NormalizeConfinedPath(root);
    out.push_back(normal.ok() ? *normal : root);
  }
  return out;
}

std::string Quoted(absl::string_view path) { return absl::StrCat("\"", path.substr(0, 256), "\""); }

// Confined paths: every item of every path field normalised and inside the roots.
void CheckRoots(const JobSpec& spec, const ValidateOptions& options, Problems& p) {
  const std::vector<std::string> data_roots = NormalRoots(options.data_roots);
  const std::vector<std::string> checkpoint_roots =
      NormalRoots(options.checkpoint_root.empty() ? std::vector<std::string>{}
                                                  : std::vector{options.checkpoint_root});
  std::vector<std::string> readable = data_roots;
  readable.insert(readable.end(), checkpoint_roots.begin(), checkpoint_roots.end());
  struct Field {
    std::string path;
    std::string value;
    const std::vector<std::string>& roots;
    const char* what;
    bool is_checkpoint_dir = false;
  };
  const auto& k = spec.checkpoint();
  std::vector<Field> fields;
  if (!data_roots.empty()) {
    for (const auto& [field, value] : ShardPatterns(spec)) {
      fields.push_back({field, value, data_roots, "the data roots"});
    }
    for (const SpecPath& read : DataFileReads(spec)) {
      fields.push_back({read.field, read.value, data_roots, "the data roots"});
    }
    for (const SpecPath& read : CheckpointReads(spec)) {
      fields.push_back({read.field, read.value, readable, "the data roots or the checkpoint root"});
    }
  }
  if (!checkpoint_roots.empty()) {
    fields.push_back({"checkpoint.dir", k.dir(), checkpoint_roots, "the checkpoint root", true});
  }
  for (const Field& f : fields) {
    if (p.Has(f.path)) continue;  // e.g. not absolute: said once
    for (const std::string& item : PathListItems(f.value)) {
      absl::StatusOr<std::string> normal = NormalizeConfinedPath(item);
      if (!normal.ok()) {
        p.Add(f.path, absl::StrCat(normal.status().message(), ", got ", Quoted(item)));
        break;
      }
      if (RootHolding(*normal, f.roots) == nullptr) {
        p.Add(f.path, absl::StrCat(Quoted(item), " is outside ", f.what, " (",
                                   absl::StrJoin(f.roots, ", "), ")"));
        break;
      }
      if (f.is_checkpoint_dir) {
        const std::string problem = CheckpointDirProblem(*normal, checkpoint_roots[0], "");
        if (!problem.empty()) p.Add(f.path, absl::StrCat(Quoted(item), " ", problem));
      }
    }
  }
}

}  // namespace

std::span<const NumericLimit> NumericLimits() { return kNumericLimits; }

bool IsMixerName(absl::string_view name) { return FindMixer(name) != nullptr; }

std::vector<std::string> LayerMixers(const mesa::v1::ModelConfig& model) {
  std::vector<std::string> out;
  for (int l = 0; l < model.n_layers(); ++l) {
    if (model.layer_mixers_size() > 0) {
      out.push_back(model.layer_mixers(l % model.layer_mixers_size()));
    } else {
      out.push_back(model.mixer().empty() ? "mesa" : model.mixer());
    }
  }
  return out;
}

int64_t ModelParameters(const mesa::v1::ModelConfig& m) {
  ModelShape shape;
  shape.vocab_size = m.vocab_size();
  shape.d_model = m.d_model();
  shape.n_heads = m.n_heads();
  shape.head_dim = m.head_dim();
  const double mlp_mult = m.mlp_mult() == 0 ? kDefaultMlpMult : m.mlp_mult();
  shape.mlp_hidden = std::llround(mlp_mult * m.d_model());
  shape.conv_width = m.conv_width() == 0 ? kDefaultConvWidth : m.conv_width();
  shape.tie_embeddings = !m.has_tie_embeddings() || m.tie_embeddings();
  std::vector<const MixerTraits*> mixers;
  for (const std::string& name : LayerMixers(m)) {
    mixers.push_back(FindMixer(name));
    if (name == "hawk") shape.rnn_width = RnnWidthOf(m.d_model(), m.rnn_width_mult());
    if (name == "mamba2") {
      const SsmShape ssm =
          SsmShapeOf(m.d_model(), m.ssm_expand(), m.ssm_head_dim(), m.ssm_state_dim());
      shape.ssm_inner = ssm.inner;
      shape.ssm_head_dim = ssm.head_dim;
      shape.ssm_state = ssm.state;
    }
  }
  return ModelParameterCount(shape, mixers);
}

namespace {

// JOB_TYPE_GENERATE: the model, tokenizer and weights are the checkpoint's, so the sections that
// describe a model or its training would be ignored; they are refused instead.
void CheckGenerate(const JobSpec& spec, Problems& p) {
  for (auto [field, set] :
       {std::pair{"model", spec.has_model()}, std::pair{"data", spec.has_data()},
        std::pair{"optimizer", spec.has_optimizer()},
        std::pair{"checkpoint", spec.has_checkpoint()}, std::pair{"eval", spec.has_eval()}}) {
    if (set)
      p.Add(field, "not used by JOB_TYPE_GENERATE (the model is the checkpoint's); leave it out");
  }
  if (spec.training().steps() != 0) p.Add("training.steps", "not used by JOB_TYPE_GENERATE");
  const auto& g = spec.generate();
  if (g.checkpoint().empty()) p.Add("generate.checkpoint", "required for generation");
  if (g.prompts_size() == 0 || g.prompts_size() > kMaxPrompts) {
    p.Add("generate.prompts",
          absl::StrCat("1 to ", kMaxPrompts, " prompts required, got ", g.prompts_size()));
  }
  for (int i = 0; i < g.prompts_size(); ++i) {
    if (g.prompts(i).empty()) p.Add(absl::StrCat("generate.prompts[", i, "]"), "is empty");
    p.MaxLen(absl::StrCat("generate.prompts[", i, "]"), g.prompts(i), kMaxPromptBytes);
  }
  if (g.has_top_p() && !p.Has("generate.top_p") && !(g.top_p() > 0)) {
    p.Add("generate.top_p", "must be in (0, 1]");
  }
  if (g.stop_size() > kMaxStopSequences) {
    p.Add("generate.stop",
          absl::StrCat("at most ", kMaxStopSequences, " stop sequences, got ", g.stop_size()));
  }
  for (int i = 0; i < g.stop_size(); ++i) {
    if (g.stop(i).empty()) p.Add(absl::StrCat("generate.stop[", i, "]"), "is empty");
    p.MaxLen(absl::StrCat("generate.stop[", i, "]"), g.stop(i), kMaxStopSequenceBytes);
  }
  p.MaxLen("generate.encoder_json", g.encoder_json(), kMaxPathLength);
  p.MaxLen("generate.vocab_bpe", g.vocab_bpe(), kMaxPathLength);
  p.MaxLen("generate.tokenizer_file", g.tokenizer_file(), kMaxPathLength);
  if (g.encoder_json().empty() != g.vocab_bpe().empty()) {
    p.Add("generate.vocab_bpe", "encoder_json and vocab_bpe go together");
  }
}

}  // namespace

bool IsDatasetName(absl::string_view name) {
  if (name.empty() || name.size() > 63 || !absl::ascii_isalnum(name[0])) return false;
  for (char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || absl::ascii_isdigit(c) || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool IsValidName(absl::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (name[0] < 'a' || name[0] > 'z') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

namespace {

// An array job: its axes, then every child as a plain EVAL job (a problem all children share is
// reported once, naming the first child that has it).
std::vector<std::string> ArrayJobProblems(const JobSpec& spec, const ValidateOptions& options) {
  Problems p;
  if (spec.type() != mesa::v1::JOB_TYPE_EVAL && !options.as_eval) {
    p.Add("array", "applies only to JOB_TYPE_EVAL");
  }
  if (spec.eval().has_shard())
    p.Add("eval.shard", "is set per child by array.shards; leave it out");
  if (spec.array().cg_settings_size() > 0) {
    const std::vector<std::string> mixers = LayerMixers(spec.model());
    if (std::none_of(mixers.begin(), mixers.end(), [](const std::string& m) {
          const MixerTraits* traits = FindMixer(m);
          return traits != nullptr && traits->solves_with_cg;
        })) {
      p.Add("array.cg_settings", "applies only to models with \"mesa\" layers; leave it out");
    }
  }
  absl::StatusOr<std::vector<ArrayChildSpec>> children = ExpandArray(spec);
  if (!children.ok()) {
    std::vector<std::string> out = p.Take();
    out.push_back(absl::StrCat("spec.", children.status().message()));
    return out;
  }
  std::vector<std::string> out = p.Take();
  std::vector<std::string> seen;
  for (const ArrayChildSpec& child : *children) {
    for (const std::string& problem : JobSpecProblems(child.spec, options)) {
      if (std::find(seen.begin(), seen.end(), problem) != seen.end()) continue;
      seen.push_back(problem);
      out.push_back(absl::StrCat("array child ", child.spec.name(), ": ", problem));
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> JobSpecProblems(const JobSpec& spec, const ValidateOptions& options) {
  if (spec.has_array()) {
    std::vector<std::string> problems = ArrayJobProblems(spec, options);
    for (const std::string& problem : DependencyProblems(spec)) {
      problems.push_back(absl::StrCat("spec.", problem));
    }
    return problems;
  }
  Problems p;
  const bool eval = options.as_eval || spec.type() == mesa::v1::JOB_TYPE_EVAL;
  const bool train = !eval && spec.type() == mesa::v1::JOB_TYPE_TRAIN;
  const bool generate = !eval && spec.type() == mesa::v1::JOB_TYPE_GENERATE;
  const unsigned type = train ? kTrain : eval ? kEval : generate ? kGenerate : 0;

  if (spec.name().empty()) {
    p.Add("name", "required");
  } else if (!IsValidName(spec.name())) {
    p.Add("name", absl::StrCat("must match ^[a-z][a-z0-9-]{0,62}$, got \"", spec.name(), "\""));
  }
  if (!train && !eval && !generate) {
    p.Add("type", absl::StrCat("must be JOB_TYPE_TRAIN, JOB_TYPE_EVAL or JOB_TYPE_GENERATE, got ",
                               mesa::v1::JobType_Name(spec.type())));
  }
  if (!spec.queue().empty() && !IsValidName(spec.queue())) {
    p.Add("queue", absl::StrCat("must match ^[a-z][a-z0-9-]{0,62}$, got \"", spec.queue(), "\""));
  }
  if (spec.labels_size() > kMaxLabels) {
    p.Add("labels", absl::StrCat("at most ", kMaxLabels, " labels, got ", spec.labels_size()));
  }
  for (const auto& [k, v] : spec.labels()) {
    const std::string path = absl::StrCat("labels[\"", k, "\"]");
    if (!IsLabelKey(k)) {
      p.Add(path, "key must be 1 to 63 of [A-Za-z0-9._/-], starting with a letter or digit");
    }
    p.MaxLen(path, v, kMaxLabelValue);
    // Values end up in tables, logs and Prometheus labels: no NUL or other control characters.
    for (size_t i = 0; i < v.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(v[i]);
      if (c < 0x20 || c == 0x7f) {
        p.Add(path, absl::StrCat("value must not contain control characters (byte ", i + 1,
                                 " is 0x", absl::Hex(c, absl::kZeroPad2), ")"));
        break;
      }
    }
  }

  for (const NumericLimit& limit : kNumericLimits) {
    if ((limit.applies_to & type) == 0 && type != 0) continue;
    if (type == 0 && limit.applies_to != kBoth && limit.applies_to != kTrain) continue;
    bool is_float = false;
    const double value = NumericField(spec, limit.path, &is_float);
    // Float fields are compared with the bounds as floats, so a bound is itself accepted.
    const double lo = is_float ? static_cast<float>(limit.lo) : limit.lo;
    const double hi = is_float ? static_cast<float>(limit.hi) : limit.hi;
    if (!std::isfinite(value) || value < lo || value > hi) {
      p.Add(limit.path, absl::StrCat("must be between ", NumberText(limit.lo), " and ",
                                     NumberText(limit.hi), ", got ", NumberText(value)));
    }
  }
  const auto& r = spec.resources();
  if (r.gpus() > 0 && r.cpu_ranks() > 1) {
    p.Add("resources.cpu_ranks", "only applies to CPU jobs (resources.gpus = 0)");
  }
  const int world_size = options.world_size > 0 ? options.world_size
                         : r.gpus() > 0         ? r.gpus()
                                                : std::max(1, r.cpu_ranks());

  if (generate) {
    CheckGenerate(spec, p);
  } else {
    if (spec.has_generate()) p.Add("generate", "applies only to JOB_TYPE_GENERATE");
    CheckModel(spec, p);
    CheckData(spec, train, eval, world_size, p);
  }
  CheckTraining(spec, options, train, p);

  for (const std::string& problem : DependencyProblems(spec)) {
    p.Add(problem.substr(0, problem.find(": ")), problem.substr(problem.find(": ") + 2));
  }
  const auto& k = spec.checkpoint();
  p.MaxLen("checkpoint.dir", k.dir(), kMaxPathLength);
  p.MaxLen("checkpoint.init_from", k.init_from(), kMaxPathLength);
  if (!k.resume().empty() && k.resume() != "auto" && k.resume() != "never" &&
      k.resume() != "must") {
    p.Add("checkpoint.resume",
          absl::StrCat("must be auto, never or must, got \"", k.resume().substr(0, 64), "\""));
  }
  if (eval && spec.eval().checkpoint().empty() && !options.as_eval) {
    p.Add("eval.checkpoint", "required for evaluation");
  }
  p.MaxLen("eval.checkpoint", spec.eval().checkpoint(), kMaxPathLength);
  CheckEvalSection(spec, eval, p);
  p.MaxLen("generate.checkpoint", spec.generate().checkpoint(), kMaxPathLength);
  if (options.require_absolute_paths) {
    std::vector<SpecPath> paths = ShardPatterns(spec);
    paths.push_back({"checkpoint.dir", k.dir()});
    for (const SpecPath& read : CheckpointReads(spec)) paths.push_back(read);
    for (const SpecPath& read : DataFileReads(spec)) paths.push_back(read);
    for (const auto& [path, value] : paths) {
      for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
        item = absl::StripAsciiWhitespace(item);
        if (!item.empty() && item[0] != '/') {
          p.Add(path, absl::StrCat("must be an absolute path (the trainer runs on a worker, in "
                                   "a directory of its own), got \"",
                                   item.substr(0, 256), "\""));
          break;
        }
      }
    }
  }
  if (!options.data_roots.empty() || !options.checkpoint_root.empty()) {
    CheckRoots(spec, options, p);
  }
  return p.Take();
}

absl::Status ValidateJobSpec(const JobSpec& spec, const ValidateOptions& options) {
  std::vector<std::string> problems = JobSpecProblems(spec, options);
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
}

}  // namespace mesa::spec
