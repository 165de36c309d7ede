#include "spec/job_refs.h"

#include <set>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mesa::spec {
namespace {

using ::mesa::v1::JobSpec;

// The reference fields, each with its getter and setter.
struct RefField {
  const char* name;
  const std::string& (*get)(const JobSpec&);
  void (*set)(JobSpec&, const std::string&);
};
constexpr RefField kRefFields[] = {
    {"checkpoint.init_from",
     [](const JobSpec& s) -> const std::string& { return s.checkpoint().init_from(); },
     [](JobSpec& s, const std::string& v) { s.mutable_checkpoint()->set_init_from(v); }},
    {"eval.checkpoint",
     [](const JobSpec& s) -> const std::string& { return s.eval().checkpoint(); },
     [](JobSpec& s, const std::string& v) { s.mutable_eval()->set_checkpoint(v); }},
    {"generate.checkpoint",
     [](const JobSpec& s) -> const std::string& { return s.generate().checkpoint(); },
     [](JobSpec& s, const std::string& v) { s.mutable_generate()->set_checkpoint(v); }},
};

}  // namespace

std::optional<std::string> JobRefTarget(absl::string_view value) {
  if (!absl::StartsWith(value, kJobRefPrefix)) return std::nullopt;
  return std::string(value.substr(kJobRefPrefix.size()));
}

mesa::v1::DependencyCondition ConditionOf(const mesa::v1::Dependency& dependency) {
  return dependency.after() == mesa::v1::DEPENDENCY_CONDITION_UNSPECIFIED
             ? mesa::v1::DEPENDENCY_CONDITION_SUCCESS
             : dependency.after();
}

absl::string_view ConditionName(mesa::v1::DependencyCondition condition) {
  return condition == mesa::v1::DEPENDENCY_CONDITION_END ? "end" : "success";
}

std::vector<JobRef> JobRefs(const JobSpec& spec) {
  std::vector<JobRef> out;
  for (const RefField& f : kRefFields) {
    if (std::optional<std::string> id = JobRefTarget(f.get(spec))) out.push_back({f.name, *id});
  }
  return out;
}

std::vector<std::string> DependencyProblems(const JobSpec& spec) {
  std::vector<std::string> problems;
  if (spec.depends_on_size() > kMaxDependencies) {
    problems.push_back(absl::StrCat("depends_on: at most ", kMaxDependencies, " dependencies, got ",
                                    spec.depends_on_size()));
  }
  if (spec.depends_on_size() > 0 && spec.has_array()) {
    problems.push_back(
        "depends_on: an array job cannot wait for other jobs; submit the array after the job it "
        "needs has ended");
  }
  std::set<std::string> named;
  for (int i = 0; i < spec.depends_on_size(); ++i) {
    const mesa::v1::Dependency& d = spec.depends_on(i);
    const std::string at = absl::StrCat("depends_on[", i, "]");
    if (d.job_id().empty()) {
      problems.push_back(absl::StrCat(at, ".job_id: required (the id mesactl submit printed)"));
    } else if (d.job_id().size() > 128) {
      problems.push_back(absl::StrCat(at, ".job_id: must be at most 128 characters"));
    } else if (!named.insert(d.job_id()).second) {
      problems.push_back(absl::StrCat(at, ".job_id: ", d.job_id(), " is named twice"));
    }
    if (!mesa::v1::DependencyCondition_IsValid(d.after())) {
      problems.push_back(
          absl::StrCat(at, ".after: unknown condition ", d.after(), "; expected success or end"));
    }
  }
  for (const JobRef& ref : JobRefs(spec)) {
    if (ref.job_id.empty()) {
      problems.push_back(absl::StrCat(ref.field, ": \"job:\" must name a job, as job:<id>"));
    } else if (!named.contains(ref.job_id)) {
      problems.push_back(absl::StrCat(ref.field, ": job:", ref.job_id.substr(0, 128),
                                      " names a job that depends_on does not list; add "
                                      "depends_on: [{job_id: ",
                                      ref.job_id.substr(0, 128), "}]"));
    }
  }
  return problems;
}

absl::StatusOr<JobSpec> ResolveJobRefs(
    const JobSpec& spec,
    const std::function<absl::StatusOr<std::string>(const std::string& job_id)>& checkpoint_of) {
  JobSpec out = spec;
  for (const RefField& f : kRefFields) {
    std::optional<std::string> id = JobRefTarget(f.get(spec));
    if (!id) continue;
    absl::StatusOr<std::string> path = checkpoint_of(*id);
    if (!path.ok()) {
      return absl::Status(path.status().code(),
                          absl::StrCat(f.name, ": ", path.status().message()));
    }
    f.set(out, *path);
  }
  return out;
}

}  // namespace mesa::spec
