#include "model/export/model_card.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "google/protobuf/util/json_util.h"
#include "mesa/v1/job.pb.h"
#include "nlohmann/json.hpp"

namespace mesa::model {
namespace {

using nlohmann::json;

// "mesa ×7, hawk ×7" in layer order of first appearance.
std::string MixerSummary(const ModelConfig& c) {
  std::vector<std::string> order;
  std::map<std::string, int> counts;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string name = MixerName(c.LayerMixer(l));
    if (counts[name]++ == 0) order.push_back(name);
  }
  std::vector<std::string> parts;
  for (const std::string& name : order) parts.push_back(absl::StrCat(name, " ×", counts[name]));
  return absl::StrJoin(parts, ", ");
}

absl::StatusOr<std::string> EvalSection(const std::string& path) {
  absl::StatusOr<std::string> text = base::ReadFile(path);
  if (!text.ok()) return text.status();
  mesa::v1::Job job;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(*text, &job, options).ok() ||
      job.spec().type() != mesa::v1::JOB_TYPE_EVAL || !job.has_result()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--eval_results ", path,
                     ": not a finished EVAL job as `mesactl get JOB --json` prints it"));
  }
  const mesa::v1::JobResult& r = job.result();
  std::string out = absl::StrCat("### ", job.spec().name().empty() ? job.id() : job.spec().name(),
                                 " (job ", job.id(), ")\n\n");
  if (r.datasets_size() > 0) {
    absl::StrAppend(&out, "| dataset | window | tokens | loss (nats) | perplexity |\n",
                    "|---|---|---|---|---|\n");
    for (const mesa::v1::DatasetResult& d : r.datasets()) {
      absl::StrAppend(&out, absl::StrFormat("| %s | %d | %d | %.4f | %.3f |\n", d.name(),
                                            d.seq_len(), d.tokens(), d.loss(), d.perplexity()));
    }
    out += "\n";
  }
  if (r.tasks_size() > 0) {
    absl::StrAppend(&out, "| task | shots | items | metric | value | stderr |\n",
                    "|---|---|---|---|---|---|\n");
    for (const mesa::v1::TaskResult& t : r.tasks()) {
      for (const mesa::v1::MetricValue& m : t.metrics()) {
        absl::StrAppend(&out, absl::StrFormat("| %s | %d | %d | %s%s | %.4f | %.4f |\n", t.name(),
                                              t.num_fewshot(), t.scored(), m.name(),
                                              m.name() == t.primary_metric() ? " *" : "", m.value(),
                                              m.stderr()));
      }
    }
    out += "\n";
  }
  for (const mesa::v1::TaskGroupResult& g : r.task_groups()) {
    absl::StrAppend(&out, absl::StrFormat("Group %s (%s): %.4f ± %.4f\n\n", g.name(),
                                          absl::StrJoin(g.members(), ", "), g.value(), g.stderr()));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> ModelCard(const ModelCardInputs& in) {
  const ModelConfig& c = *in.model;
  const bool remote = in.format == "remote_code";
  std::string card = absl::StrCat("---\nlibrary_name: transformers\ntags:\n- mesanet\n- ",
                                  remote ? "custom_code" : "fla", "\n---\n\n# ", MixerSummary(c),
                                  " language model\n\n", "Exported by `mesa-export` from `",
                                  in.checkpoint->dir, "` (step ", in.checkpoint->step, "). ");
  if (remote) {
    absl::StrAppend(&card,
                    "The directory carries its own modeling code (plain PyTorch: "
                    "`mesa_lm_core.py`), which computes the model exactly as it was trained",
                    in.format_reason.empty() ? "" : absl::StrCat(" (", in.format_reason, ")"),
                    ".\n\n```python\nfrom transformers import AutoModelForCausalLM, "
                    "AutoTokenizer\nmodel = AutoModelForCausalLM.from_pretrained(path, "
                    "trust_remote_code=True)\ntokenizer = AutoTokenizer.from_pretrained(path, "
                    "trust_remote_code=True)\n```\n\n");
  } else {
    absl::StrAppend(&card,
                    "The format is flash-linear-attention's `MesaNetForCausalLM`:\n\n```python\n"
                    "import fla  # registers the model types\nfrom transformers import "
                    "AutoModelForCausalLM\nmodel = AutoModelForCausalLM.from_pretrained(path)\n"
                    "```\n\n");
  }
  absl::StrAppend(
      &card, "## Architecture\n\n",
      absl::StrFormat("| parameters | layers | d_model | heads × head_dim | MLP | vocabulary |\n"
                      "|---|---|---|---|---|---|\n| %d | %d | %d | %d × %d | %d | %d |\n\n",
                      c.NumParameters(), c.n_layers, c.d_model, c.n_heads, c.head_dim, c.mlp_hidden,
                      c.vocab_size));
  std::vector<std::string> layers;
  for (int l = 0; l < c.n_layers; ++l) layers.push_back(MixerName(c.LayerMixer(l)));
  absl::StrAppend(&card, "Layers, in order: ", absl::StrJoin(layers, ", "), ". γ cap ", c.gamma_cap,
                  ", logit soft-cap ", c.logit_softcap, ", ", c.tie_embeddings ? "tied" : "untied",
                  " embedding, ", c.reset_at_bos ? "state reset at every BOS" : "no reset at BOS",
                  c.MesaLayers() > 0 ? absl::StrCat(", ", c.cg_steps, " CG steps") : "",
                  ". The mathematics is the project's docs/math.md.\n\n");
  absl::StrAppend(&card,
                  "## Training recipe\n\nThe job spec the checkpoint recorded:\n\n```json\n");
  const json spec = json::parse(in.checkpoint->spec_json, nullptr, /*allow_exceptions=*/false);
  absl::StrAppend(&card, spec.is_discarded() ? in.checkpoint->spec_json : spec.dump(2),
                  "\n```\n\n## Evaluation\n\n");
  if (in.eval_results.empty()) {
    card += "No evaluation results were given to mesa-export (`--eval_results`).\n";
  }
  for (const std::string& path : in.eval_results) {
    absl::StatusOr<std::string> section = EvalSection(path);
    if (!section.ok()) return section.status();
    card += *section;
  }
  return card;
}

}  // namespace mesa::model
