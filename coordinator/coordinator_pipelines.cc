// Pipelines: JobSpec.depends_on and job:<id> references (docs/coordinator.md "Pipelines"). A job
// with dependencies is stored QUEUED with Job.waiting_for set and is not in the scheduler until
// they have ended; each dependency's terminal transition re-checks its dependants in the same
// write batch, so the release (or the failure) is as durable as the end that caused it.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/state_machine.h"
#include "launch/trainer_launch.h"
#include "spec/job_refs.h"

namespace mesa::coordinator {

absl::StatusOr<mesa::v1::JobSpec> Coordinator::SpecForSubmitChecks(const mesa::v1::JobSpec& spec,
                                                                   const std::string& owner,
                                                                   bool admin) {
  for (int i = 0; i < spec.depends_on_size(); ++i) {
    const std::string& id = spec.depends_on(i).job_id();
    absl::StatusOr<JobEntry*> dep = FindLoadedJob(id);
    // Another user's job reads as absent, as everywhere else.
    if (!dep.ok() || (!owner.empty() && !admin && (*dep)->job.owner() != owner)) {
      return absl::NotFoundError(
          absl::StrCat("spec.depends_on[", i, "].job_id: no job ", id.substr(0, 128)));
    }
    if ((*dep)->job.spec().has_array()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.depends_on[", i, "].job_id: ", id,
                                                     " is an array job; depend on its children"));
    }
  }
  return spec::ResolveJobRefs(spec, [&](const std::string& id) -> absl::StatusOr<std::string> {
    JobEntry* dep = *FindLoadedJob(id);  // found above
    return launch::JobCheckpointDir(dep->job.spec().checkpoint().dir(), options_.checkpoint_root,
                                    id);
  });
}

void Coordinator::ReleaseOrWait(JobEntry* e, WriteBatch* batch) {
  const mesa::v1::JobSpec& spec = e->job.spec();
  std::vector<std::string> waiting;
  std::string failed;
  for (const mesa::v1::Dependency& d : spec.depends_on()) {
    absl::StatusOr<JobEntry*> dep = FindLoadedJob(d.job_id());
    if (!dep.ok()) {  // deleted by retention before it could be read: it has ended, unknown how
      failed = absl::StrCat("dependency ", d.job_id(), " is gone (", dep.status().message(), ")");
      break;
    }
    const JobState state = (*dep)->row.state;
    if (!IsTerminal(state)) {
      waiting.push_back(d.job_id());
      continue;
    }
    if (spec::ConditionOf(d) == mesa::v1::DEPENDENCY_CONDITION_SUCCESS &&
        state != mesa::v1::JOB_STATE_SUCCEEDED) {
      const std::string& why = (*dep)->job.failure_reason();
      failed = absl::StrCat("dependency ", d.job_id(), " ended ", ShortStateName(state),
                            why.empty() ? "" : absl::StrCat(" (", why, ")"),
                            " and this job runs only after its success");
      break;
    }
  }
  if (failed.empty() && !waiting.empty()) {
    e->job.clear_waiting_for();
    for (const std::string& id : waiting) {
      e->job.add_waiting_for(id);
      std::vector<std::string>& list = dependants_[id];
      if (std::find(list.begin(), list.end(), e->row.id) == list.end()) list.push_back(e->row.id);
    }
    also_touched_.push_back(e);  // readers of the job wait for this write too
    PutJob(e, batch);
    return;
  }
  e->job.clear_waiting_for();
  mesa::v1::JobSpec resolved;
  if (failed.empty()) {
    absl::StatusOr<mesa::v1::JobSpec> r =
        spec::ResolveJobRefs(spec, [&](const std::string& id) -> absl::StatusOr<std::string> {
          JobEntry* dep = *FindLoadedJob(id);
          if (dep->job.latest_checkpoint().empty()) {
            return absl::FailedPreconditionError(
                absl::StrCat("job:", id, ": ", id, " recorded no checkpoint"));
          }
          return dep->job.latest_checkpoint();
        });
    absl::Status checked =
        r.ok() ? CheckSpecPathsLocked(*r, e->job.owner(), e->job.owner_is_admin()) : r.status();
    if (checked.ok()) {
      resolved = *std::move(r);
    } else {
      failed = absl::StrCat("dependencies met, but the spec they complete is refused: ",
                            checked.message());
    }
  }
  also_touched_.push_back(e);
  if (!failed.empty()) {
    e->job.set_failure_reason(failed);
    Transition(e, mesa::v1::JOB_STATE_FAILED, failed, batch);
    PutJob(e, batch);
    return;
  }
  std::vector<std::string> resolutions;
  for (const spec::JobRef& ref : spec::JobRefs(spec)) {
    resolutions.push_back(
        absl::StrCat(ref.field, " = ", (*FindLoadedJob(ref.job_id))->job.latest_checkpoint()));
  }
  *e->job.mutable_spec() = std::move(resolved);
  AppendNoteEvent(e,
                  absl::StrCat("dependencies met", resolutions.empty() ? "" : "; ",
                               absl::StrJoin(resolutions, ", ")),
                  batch);
  PutJob(e, batch);
  Enqueue(e);
}

void Coordinator::NoteDependencyEnded(const std::string& ended, WriteBatch* batch) {
  auto it = dependants_.find(ended);
  if (it == dependants_.end()) return;
  const std::vector<std::string> ids = std::move(it->second);
  dependants_.erase(it);
  for (const std::string& id : ids) {
    JobEntry* e = FindJob(id);
    // Cancelled (or released) meanwhile: nothing waits any more.
    if (e == nullptr || !e->loaded || e->row.state != mesa::v1::JOB_STATE_QUEUED ||
        e->job.waiting_for().empty()) {
      continue;
    }
    ReleaseOrWait(e, batch);
  }
}

}  // namespace mesa::coordinator
