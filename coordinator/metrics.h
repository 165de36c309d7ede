// Prometheus metrics of the coordinator (docs/design.md §9). All names carry the mesa_ prefix and
// base units. Per-job trainer figures are labelled by job id and removed when the job ends, so
// label cardinality stays bounded by the number of live jobs.
#ifndef MESANET_COORDINATOR_METRICS_H_
#define MESANET_COORDINATOR_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "base/exponential_buckets.h"
#include "mesa/v1/job.pb.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace mesa::coordinator {

// Bucket bounds of the latency histograms (base/exponential_buckets.h): the queue wait uses 2^(1/4)
// (four buckets per doubling, within 19%), the scheduling pass sqrt(2).
using base::ExponentialBuckets;

// The coordinator's own figures (docs/design.md §9). Per-job trainer figures (mesa_job_*) are
// exported by the worker that runs the job's rank 0, not here, so each job has one series to sum
// over.
class Metrics {
 public:
  Metrics();
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  void SetJobs(mesa::v1::JobState state, int64_t count);
  void SetWorkers(const std::string& state, int64_t count);
  // A worker's lease ran out (no heartbeat, or no re-registration after a restart): the only way
  // a worker becomes lost. A clean deregistration or a drain does not count here, so
  // MesaWorkersLost alerts on increases of this counter alone.
  void CountLeaseExpiry();
  // One worker's series (labelled worker_id), kept while the coordinator knows the worker and
  // removed when it deregisters or is forgotten.
  struct WorkerFigures {
    int gpus = 0;
    int gpus_allocated = 0;
    int cpu_slots = 0;
    int cpu_slots_allocated = 0;
    int attempts = 0;
    bool live = false;
    bool draining = false;
  };
  void SetWorker(const std::string& worker_id, const WorkerFigures& figures);
  void RemoveWorker(const std::string& worker_id);
  // Leadership (docs/coordinator.md, "Replicated coordinators"): whether this process leads (a
  // coordinator without --leader_lease always does) and its epoch (0: none).
  void SetLeadership(bool leader, int64_t epoch);
  void CountSubmission(const std::string& code);
  void CountRpc(const std::string& method, const std::string& code);
  void ObserveQueueWait(double seconds);
  void ObserveSchedulingPass(double seconds);
  // GPU time held by placed jobs (SCHEDULED or RUNNING), by the job's owner ("anonymous" without
  // users) and queue: accounting per team, as a counter to rate() or increase() over a period.
  void AddGpuSeconds(const std::string& owner, const std::string& queue, double seconds);

  // The text exposition (tests and debugging).
  std::string Serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Counter& lease_expiries_;
  prometheus::Family<prometheus::Gauge>& worker_gpus_;
  prometheus::Family<prometheus::Gauge>& worker_gpus_allocated_;
  prometheus::Family<prometheus::Gauge>& worker_cpu_slots_;
  prometheus::Family<prometheus::Gauge>& worker_cpu_slots_allocated_;
  prometheus::Family<prometheus::Gauge>& worker_attempts_;
  prometheus::Family<prometheus::Gauge>& worker_live_;
  prometheus::Family<prometheus::Gauge>& worker_draining_;
  prometheus::Family<prometheus::Counter>& submissions_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Family<prometheus::Counter>& gpu_seconds_;
  prometheus::Histogram& queue_wait_;
  prometheus::Histogram& scheduling_pass_;
  prometheus::Gauge& leader_;
  prometheus::Gauge& leader_epoch_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, prometheus::Counter*> rpc_counters_ ABSL_GUARDED_BY(mu_);
  // Per worker: its gauges in the order of the worker_* families above.
  absl::flat_hash_map<std::string, std::vector<prometheus::Gauge*>> worker_series_
      ABSL_GUARDED_BY(mu_);
  std::vector<prometheus::Family<prometheus::Gauge>*> WorkerFamilies();
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_METRICS_H_
