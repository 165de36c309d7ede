#include "coordinator/metrics.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/version.h"
#include "coordinator/state_machine.h"
#include "prometheus/text_serializer.h"

namespace mesa::coordinator {
namespace {

// Four buckets per doubling (queue wait: 50 ms .. 2 days in 88 buckets); two for the
// scheduling pass (10 us .. 7 s in 40).
const double kQuarterOctave = std::pow(2.0, 0.25);
const double kHalfOctave = std::sqrt(2.0);

prometheus::Family<prometheus::Gauge>& Gauges(prometheus::Registry& registry, const char* name,
                                              const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      jobs_(prometheus::BuildGauge()
                .Name("mesa_coordinator_jobs")
                .Help("Jobs by state.")
                .Register(*registry_)),
      workers_(prometheus::BuildGauge()
                   .Name("mesa_coordinator_workers")
                   .Help("Workers by state (live, awaiting = known from the store but not "
                         "re-registered, lost).")
                   .Register(*registry_)),
      lease_expiries_(prometheus::BuildCounter()
                          .Name("mesa_coordinator_worker_lease_expiries_total")
                          .Help("Workers whose lease ran out (lost without deregistering).")
                          .Register(*registry_)
                          .Add({})),
      worker_gpus_(Gauges(*registry_, "mesa_coordinator_worker_gpus", "GPUs a worker offers.")),
      worker_gpus_allocated_(Gauges(*registry_, "mesa_coordinator_worker_gpus_allocated",
                                    "GPUs of a worker held by attempts.")),
      worker_cpu_slots_(
          Gauges(*registry_, "mesa_coordinator_worker_cpu_slots", "CPU slots a worker offers.")),
      worker_cpu_slots_allocated_(Gauges(*registry_, "mesa_coordinator_worker_cpu_slots_allocated",
                                         "CPU slots of a worker held by attempts.")),
      worker_attempts_(
          Gauges(*registry_, "mesa_coordinator_worker_attempts", "Attempts placed on a worker.")),
      worker_live_(Gauges(*registry_, "mesa_coordinator_worker_live",
                          "1 while the worker holds a live lease.")),
      worker_draining_(Gauges(*registry_, "mesa_coordinator_worker_draining",
                              "1 while the worker is cordoned (mesactl drain).")),
      submissions_(prometheus::BuildCounter()
                       .Name("mesa_coordinator_submissions_total")
                       .Help("SubmitJob calls by result code.")
                       .Register(*registry_)),
      rpcs_(prometheus::BuildCounter()
                .Name("mesa_coordinator_rpcs_total")
                .Help("RPCs by method and result code.")
                .Register(*registry_)),
      gpu_seconds_(prometheus::BuildCounter()
                       .Name("mesa_coordinator_gpu_seconds_total")
                       .Help("GPU-seconds held by placed jobs, by owner and queue.")
                       .Register(*registry_)),
      queue_wait_(prometheus::BuildHistogram()
                      .Name("mesa_coordinator_queue_wait_seconds")
                      .Help("Time from (re)queueing to being scheduled.")
                      .Register(*registry_)
                      .Add({}, ExponentialBuckets(0.05, kQuarterOctave, 88))),
      scheduling_pass_(prometheus::BuildHistogram()
                           .Name("mesa_coordinator_scheduling_pass_seconds")
                           .Help("Duration of one scheduling pass.")
                           .Register(*registry_)
                           .Add({}, ExponentialBuckets(0.00001, kHalfOctave, 40))),
      leader_(Gauges(*registry_, "mesa_coordinator_leader",
                     "1 while this coordinator leads (serves the API), 0 while it follows.")
                  .Add({})),
      leader_epoch_(Gauges(*registry_, "mesa_coordinator_leader_epoch",
                           "The leadership epoch this coordinator holds (0: none); it grows by one "
                           "with every takeover.")
                        .Add({})) {
  for (int s = mesa::v1::JOB_STATE_QUEUED; s <= mesa::v1::JOB_STATE_RETRYING; ++s) {
    SetJobs(static_cast<mesa::v1::JobState>(s), 0);
  }
  for (const char* s : {"live", "awaiting", "lost"}) SetWorkers(s, 0);
  prometheus::BuildGauge()
      .Name("mesa_build_info")
      .Help("1, labelled with the binary's component and release (base/version.h).")
      .Register(*registry_)
      .Add({{"component", "coordinator"}, {"version", kVersion}})
      .Set(1);
}

void Metrics::SetLeadership(bool leader, int64_t epoch) {
  leader_.Set(leader ? 1 : 0);
  leader_epoch_.Set(static_cast<double>(epoch));
}

std::vector<prometheus::Family<prometheus::Gauge>*> Metrics::WorkerFamilies() {
  return {
      &worker_gpus_,     &worker_gpus_allocated_, &worker_cpu_slots_, &worker_cpu_slots_allocated_,
      &worker_attempts_, &worker_live_,           &worker_draining_};
}

void Metrics::SetWorker(const std::string& worker_id, const WorkerFigures& f) {
  absl::MutexLock lock(&mu_);
  std::vector<prometheus::Gauge*>& series = worker_series_[worker_id];
  if (series.empty()) {
    for (auto* family : WorkerFamilies())
      series.push_back(&family->Add({{"worker_id", worker_id}}));
  }
  const double values[] = {static_cast<double>(f.gpus),
                           static_cast<double>(f.gpus_allocated),
                           static_cast<double>(f.cpu_slots),
                           static_cast<double>(f.cpu_slots_allocated),
                           static_cast<double>(f.attempts),
                           f.live ? 1.0 : 0.0,
                           f.draining ? 1.0 : 0.0};
  for (size_t i = 0; i < series.size(); ++i) series[i]->Set(values[i]);
}

void Metrics::RemoveWorker(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = worker_series_.find(worker_id);
  if (it == worker_series_.end()) return;
  std::vector<prometheus::Family<prometheus::Gauge>*> families = WorkerFamilies();
  for (size_t i = 0; i < families.size(); ++i) families[i]->Remove(it->second[i]);
  worker_series_.erase(it);
}

void Metrics::SetJobs(mesa::v1::JobState state, int64_t count) {
  jobs_.Add({{"state", absl::AsciiStrToLower(ShortStateName(state))}})
      .Set(static_cast<double>(count));
}

void Metrics::SetWorkers(const std::string& state, int64_t count) {
  workers_.Add({{"state", state}}).Set(static_cast<double>(count));
}

void Metrics::CountLeaseExpiry() { lease_expiries_.Increment(); }

void Metrics::AddGpuSeconds(const std::string& owner, const std::string& queue, double seconds) {
  gpu_seconds_
      .Add({{"owner", owner.empty() ? "anonymous" : owner},
            {"queue", queue.empty() ? "default" : queue}})
      .Increment(seconds);
}

void Metrics::CountSubmission(const std::string& code) {
  submissions_.Add({{"code", code}}).Increment();
}

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

std::string Metrics::Serialize() const {
  prometheus::TextSerializer s;
  return s.Serialize(registry_->Collect());
}

}  // namespace mesa::coordinator
