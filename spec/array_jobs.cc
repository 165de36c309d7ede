#include "spec/array_jobs.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "formats/checkpoint_layout.h"

namespace mesa::spec {
namespace {

constexpr int kMaxNameLength = 63;
constexpr int kDefaultToleranceSteps = 30;

}  // namespace

std::string CgSettingName(const mesa::v1::ArraySpec& array, int cg_index) {
  if (array.cg_settings().empty()) return "model";
  const mesa::v1::ArrayCgSetting& s = array.cg_settings(cg_index);
  if (s.mode() == "fixed") return absl::StrCat("fixed ", s.steps());
  return absl::StrCat("tolerance ", s.tol(), " max ",
                      s.max_steps() > 0 ? s.max_steps() : kDefaultToleranceSteps);
}

absl::Status ExpandCheckpointSteps(mesa::v1::JobSpec& spec) {
  if (!spec.array().has_checkpoint_steps()) return absl::OkStatus();
  mesa::v1::ArraySpec& array = *spec.mutable_array();
  const mesa::v1::ArrayCheckpointSteps steps = array.checkpoint_steps();
  if (array.checkpoints_size() > 0) {
    return absl::InvalidArgumentError(
        "array.checkpoint_steps: give checkpoints or checkpoint_steps, not both");
  }
  if (steps.every() < 1 || steps.root().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("array.checkpoint_steps: needs a root and every >= 1, got root \"",
                     steps.root().substr(0, 256), "\", every ", steps.every()));
  }
  std::vector<std::pair<int64_t, std::string>> found;
  for (const std::string& dir : formats::ListStepDirs(steps.root())) {
    const std::string name = std::filesystem::path(dir).filename().string();
    int64_t step = 0;
    if (!absl::SimpleAtoi(absl::StripPrefix(name, "step_"), &step)) continue;
    if (step % steps.every() == 0) found.push_back({step, dir});
  }
  if (found.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("array.checkpoint_steps: no step directory of ",
                                                   steps.root(), " is a multiple of ",
                                                   steps.every(), " (is the root mounted here?)"));
  }
  std::sort(found.begin(), found.end());
  for (const auto& [step, dir] : found) array.add_checkpoints(dir);
  array.clear_checkpoint_steps();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ArrayChildSpec>> ExpandArray(const mesa::v1::JobSpec& parent) {
  const mesa::v1::ArraySpec& array = parent.array();
  auto invalid = [](const std::string& field, const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat("array.", field, ": ", message));
  };
  if (array.has_checkpoint_steps()) {
    return invalid("checkpoint_steps",
                   "is expanded into checkpoints where the root is mounted (mesactl submit does); "
                   "list array.checkpoints instead");
  }
  if (array.shards() < 0 || array.shards() > kMaxArrayShards) {
    return invalid("shards", absl::StrCat("must be between 0 and ", kMaxArrayShards, ", got ",
                                          array.shards()));
  }
  if (array.max_parallel() < 0 || array.max_parallel() > kMaxArrayChildren) {
    return invalid("max_parallel", absl::StrCat("must be between 0 and ", kMaxArrayChildren,
                                                ", got ", array.max_parallel()));
  }
  for (int j = 0; j < array.cg_settings_size(); ++j) {
    const mesa::v1::ArrayCgSetting& s = array.cg_settings(j);
    const std::string at = absl::StrCat("cg_settings[", j, "]");
    if (s.mode() == "fixed") {
      if (s.tol() != 0 || s.max_steps() != 0) {
        return invalid(at, "a fixed setting takes steps only (tol and max_steps are tolerance's)");
      }
    } else if (s.mode() == "tolerance") {
      if (!(s.tol() > 0 && s.tol() <= 1)) {
        return invalid(at + ".tol", absl::StrCat("must be in (0, 1], got ", s.tol()));
      }
      if (s.steps() != 0) return invalid(at, "a tolerance setting takes tol and max_steps");
    } else {
      return invalid(at + ".mode", absl::StrCat("must be fixed or tolerance, got \"",
                                                s.mode().substr(0, 64), "\""));
    }
  }
  const int checkpoints = std::max(1, array.checkpoints_size());
  const int settings = std::max(1, array.cg_settings_size());
  const int shards = std::max(1, array.shards());
  const int64_t children = int64_t{checkpoints} * settings * shards;
  if (children > kMaxArrayChildren) {
    return absl::InvalidArgumentError(
        absl::StrCat("array: ", checkpoints, " checkpoints x ", settings, " CG settings x ", shards,
                     " shards make ", children, " jobs; at most ", kMaxArrayChildren));
  }
  std::vector<ArrayChildSpec> out;
  out.reserve(children);
  for (int i = 0; i < checkpoints; ++i) {
    for (int j = 0; j < settings; ++j) {
      for (int k = 0; k < shards; ++k) {
        ArrayChildSpec& child = out.emplace_back();
        child.checkpoint_index = i;
        child.cg_index = j;
        child.shard = k;
        mesa::v1::JobSpec& spec = child.spec;
        spec = parent;
        spec.clear_array();
        const std::string suffix =
            absl::StrCat("-c", i, "-s", j, shards > 1 ? absl::StrCat("-k", k) : "");
        std::string name = parent.name().substr(0, kMaxNameLength - suffix.size());
        while (!name.empty() && name.back() == '-') name.pop_back();
        spec.set_name(name + suffix);
        // The coordinator puts the parent's id in place of its name.
        (*spec.mutable_labels())[kArrayLabel] = parent.name();
        (*spec.mutable_labels())[kArrayIndexLabel] = absl::StrCat(out.size() - 1);
        if (array.checkpoints_size() > 0) {
          spec.mutable_eval()->set_checkpoint(array.checkpoints(i));
        }
        if (array.cg_settings_size() > 0) {
          const mesa::v1::ArrayCgSetting& s = array.cg_settings(j);
          mesa::v1::ModelConfig& model = *spec.mutable_model();
          if (s.mode() == "fixed") {
            model.set_cg_steps(s.steps());
            model.set_cg_tol(0);
            model.set_cg_max_steps(0);
          } else {
            model.set_cg_tol(s.tol());
            model.set_cg_max_steps(s.max_steps() > 0 ? s.max_steps() : kDefaultToleranceSteps);
          }
        }
        if (shards > 1) {
          spec.mutable_eval()->mutable_shard()->set_index(k);
          spec.mutable_eval()->mutable_shard()->set_count(shards);
        }
      }
    }
  }
  return out;
}

}  // namespace mesa::spec
