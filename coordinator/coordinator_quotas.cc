// Quotas: per user and per queue limits on queued jobs, GPUs in use and the submission rate
// (docs/coordinator.md "Quotas").
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"
#include "coordinator/state_machine.h"

namespace mesa::coordinator {
namespace {

std::string UserName(const std::string& owner) { return owner.empty() ? "(anonymous)" : owner; }

// RESOURCE_EXHAUSTED when a job of `gpus` GPUs could never run under the GPU quota.
absl::Status CheckJobFitsGpuQuota(absl::string_view scope, const std::string& name,
                                  const QuotaLimits& limits, int gpus) {
  if (limits.max_gpus <= 0 || gpus <= limits.max_gpus) return absl::OkStatus();
  return QuotaExceeded(scope, name, "max_gpus", absl::StrCat(limits.max_gpus),
                       absl::StrCat("the job alone needs ", gpus, " GPUs"));
}

}  // namespace

absl::Status Coordinator::CheckSubmitQuotas(const std::string& owner, const std::string& queue,
                                            const Demand& demand) {
  const Quotas& q = options_.quotas;
  const QuotaLimits user = q.ForUser(owner);
  if (!user.any() && !q.queue.any()) return absl::OkStatus();
  if (absl::Status s = CheckJobFitsGpuQuota("user", UserName(owner), user, demand.gpus); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckJobFitsGpuQuota("queue", queue, q.queue, demand.gpus); !s.ok()) {
    return s;
  }
  if (user.max_queued_jobs > 0 || q.queue.max_queued_jobs > 0) {
    int64_t user_queued = 0, queue_queued = 0;
    for (const auto& [id, e] : jobs_) {
      if (!IsPending(e->row.state)) continue;  // pending jobs are always loaded
      if (e->job.owner() == owner) ++user_queued;
      if (e->row.queue == queue) ++queue_queued;
    }
    if (user.max_queued_jobs > 0 && user_queued >= user.max_queued_jobs) {
      return QuotaExceeded("user", UserName(owner), "max_queued_jobs",
                           absl::StrCat(user.max_queued_jobs),
                           absl::StrCat(user_queued, " jobs already queued"));
    }
    if (q.queue.max_queued_jobs > 0 && queue_queued >= q.queue.max_queued_jobs) {
      return QuotaExceeded("queue", queue, "max_queued_jobs", absl::StrCat(q.queue.max_queued_jobs),
                           absl::StrCat(queue_queued, " jobs already queued"));
    }
  }
  const absl::Time now = clock_->Now();
  if (absl::Status s = user_buckets_.Check("user", owner, user, now); !s.ok()) return s;
  if (absl::Status s = queue_buckets_.Check("queue", queue, q.queue, now); !s.ok()) return s;
  user_buckets_.Take("user", owner, user, now).IgnoreError();
  queue_buckets_.Take("queue", queue, q.queue, now).IgnoreError();
  return absl::OkStatus();
}

Coordinator::GpuUse Coordinator::CountGpusInUse() const {
  GpuUse use;
  for (const auto& [id, e] : jobs_) {
    if (!IsActive(e->row.state)) continue;  // active jobs are always loaded
    const int gpus = e->job.spec().resources().gpus();
    if (gpus <= 0) continue;
    use.by_user[e->job.owner()] += gpus;
    use.by_queue[e->row.queue] += gpus;
  }
  return use;
}

std::string Coordinator::QuotaHoldReason(const JobEntry& e) const {
  const Quotas& q = options_.quotas;
  const int gpus = e.job.spec().resources().gpus();
  const QuotaLimits user = q.ForUser(e.job.owner());
  if (gpus <= 0 || (user.max_gpus <= 0 && q.queue.max_gpus <= 0)) return "";
  GpuUse use = CountGpusInUse();
  const int64_t by_user = use.by_user[e.job.owner()];
  if (user.max_gpus > 0 && by_user + gpus > user.max_gpus) {
    return absl::StrCat("held by quota user_max_gpus=", user.max_gpus, ": user ",
                        UserName(e.job.owner()), " has ", by_user, " GPU(s) in use and this job ",
                        "needs ", gpus, "; it starts when enough of them are freed");
  }
  const int64_t by_queue = use.by_queue[e.row.queue];
  if (q.queue.max_gpus > 0 && by_queue + gpus > q.queue.max_gpus) {
    return absl::StrCat("held by quota queue_max_gpus=", q.queue.max_gpus, ": queue ", e.row.queue,
                        " has ", by_queue, " GPU(s) in use and this job needs ", gpus,
                        "; it starts when enough of them are freed");
  }
  return "";
}

}  // namespace mesa::coordinator
