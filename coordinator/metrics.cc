#include "coordinator/metrics.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "coordinator/state_machine.h"
#include "prometheus/text_serializer.h"

namespace mesa::coordinator {
namespace {

prometheus::Histogram::BucketBoundaries ExponentialBuckets(double start, double factor, int n) {
  prometheus::Histogram::BucketBoundaries b;
  double v = start;
  for (int i = 0; i < n; ++i, v *= factor) b.push_back(v);
  return b;
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      jobs_(prometheus::BuildGauge().Name("mesa_coordinator_jobs").Help("Jobs by state.").Register(*registry_)),
      workers_(prometheus::BuildGauge()
                   .Name("mesa_coordinator_workers")
                   .Help("Workers by state (live, awaiting = known from the store but not re-registered, lost).")
                   .Register(*registry_)),
      submissions_(prometheus::BuildCounter()
                       .Name("mesa_coordinator_submissions_total")
                       .Help("SubmitJob calls by result code.")
                       .Register(*registry_)),
      rpcs_(prometheus::BuildCounter()
                .Name("mesa_coordinator_rpcs_total")
                .Help("RPCs by method and result code.")
                .Register(*registry_)),
      queue_wait_(prometheus::BuildHistogram()
                      .Name("mesa_coordinator_queue_wait_seconds")
                      .Help("Time from (re)queueing to being scheduled.")
                      .Register(*registry_)
                      .Add({}, ExponentialBuckets(0.01, 4, 12))),
      scheduling_pass_(prometheus::BuildHistogram()
                           .Name("mesa_coordinator_scheduling_pass_seconds")
                           .Help("Duration of one scheduling pass.")
                           .Register(*registry_)
                           .Add({}, ExponentialBuckets(0.00001, 2, 18))),
      job_loss_(prometheus::BuildGauge().Name("mesa_job_loss").Help("Latest training loss.").Register(*registry_)),
      job_tokens_per_second_(prometheus::BuildGauge()
                                 .Name("mesa_job_tokens_per_second")
                                 .Help("Training throughput.")
                                 .Register(*registry_)),
      job_mfu_(prometheus::BuildGauge().Name("mesa_job_mfu").Help("Model FLOPs utilisation (0..1).").Register(*registry_)),
      job_cg_steps_mean_(prometheus::BuildGauge()
                             .Name("mesa_job_cg_steps_mean")
                             .Help("Mean conjugate-gradient steps per Mesa layer.")
                             .Register(*registry_)),
      job_step_(prometheus::BuildGauge().Name("mesa_job_step").Help("Latest optimizer step.").Register(*registry_)),
      job_grad_norm_(prometheus::BuildGauge().Name("mesa_job_grad_norm").Help("Latest gradient norm.").Register(*registry_)) {
  for (int s = mesa::v1::JOB_STATE_QUEUED; s <= mesa::v1::JOB_STATE_RETRYING; ++s) {
    SetJobs(static_cast<mesa::v1::JobState>(s), 0);
  }
  for (const char* s : {"live", "awaiting", "lost"}) SetWorkers(s, 0);
}

void Metrics::SetJobs(mesa::v1::JobState state, int64_t count) {
  jobs_.Add({{"state", absl::AsciiStrToLower(ShortStateName(state))}}).Set(static_cast<double>(count));
}

void Metrics::SetWorkers(const std::string& state, int64_t count) {
  workers_.Add({{"state", state}}).Set(static_cast<double>(count));
}

void Metrics::CountSubmission(const std::string& code) { submissions_.Add({{"code", code}}).Increment(); }

void Metrics::CountRpc(const std::string& method, const std::string& code) {
  prometheus::Counter* c;
  {
    absl::MutexLock lock(&mu_);
    std::string key = absl::StrCat(method, "/", code);
    auto it = rpc_counters_.find(key);
    if (it == rpc_counters_.end()) {
      it = rpc_counters_.emplace(key, &rpcs_.Add({{"method", method}, {"code", code}})).first;
    }
    c = it->second;
  }
  c->Increment();
}

void Metrics::ObserveQueueWait(double seconds) { queue_wait_.Observe(seconds); }
void Metrics::ObserveSchedulingPass(double seconds) { scheduling_pass_.Observe(seconds); }

void Metrics::SetJobProgress(const std::string& job_id, const mesa::v1::Progress& p) {
  absl::MutexLock lock(&mu_);
  auto it = job_gauges_.find(job_id);
  if (it == job_gauges_.end()) {
    // "job_id", not "job": Prometheus sets "job" on every scraped series itself.
    prometheus::Labels l{{"job_id", job_id}};
    it = job_gauges_
             .emplace(job_id, JobGauges{&job_loss_.Add(l), &job_tokens_per_second_.Add(l), &job_mfu_.Add(l),
                                        &job_cg_steps_mean_.Add(l), &job_step_.Add(l), &job_grad_norm_.Add(l)})
             .first;
  }
  it->second.loss->Set(p.loss());
  it->second.tokens_per_second->Set(p.tokens_per_second());
  it->second.mfu->Set(p.mfu());
  it->second.cg_steps_mean->Set(p.cg_steps_mean());
  it->second.step->Set(static_cast<double>(p.step()));
  it->second.grad_norm->Set(p.grad_norm());
}

void Metrics::RemoveJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = job_gauges_.find(job_id);
  if (it == job_gauges_.end()) return;
  job_loss_.Remove(it->second.loss);
  job_tokens_per_second_.Remove(it->second.tokens_per_second);
  job_mfu_.Remove(it->second.mfu);
  job_cg_steps_mean_.Remove(it->second.cg_steps_mean);
  job_step_.Remove(it->second.step);
  job_grad_norm_.Remove(it->second.grad_norm);
  job_gauges_.erase(it);
}

std::string Metrics::Serialize() const {
  prometheus::TextSerializer s;
  return s.Serialize(registry_->Collect());
}

}  // namespace mesa::coordinator
