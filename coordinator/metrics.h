// Prometheus metrics of the coordinator (DESIGN.md §9). All names carry the mesa_ prefix and base
// units. Per-job trainer figures are labelled by job id and removed when the job ends, so label
// cardinality stays bounded by the number of live jobs.
#ifndef MESA_COORDINATOR_METRICS_H_
#define MESA_COORDINATOR_METRICS_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "mesa/v1/job.pb.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace mesa::coordinator {

class Metrics {
 public:
  Metrics();
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  void SetJobs(mesa::v1::JobState state, int64_t count);
  void SetWorkers(const std::string& state, int64_t count);
  void CountSubmission(const std::string& code);
  void CountRpc(const std::string& method, const std::string& code);
  void ObserveQueueWait(double seconds);
  void ObserveSchedulingPass(double seconds);
  void SetJobProgress(const std::string& job_id, const mesa::v1::Progress& progress);
  void RemoveJob(const std::string& job_id);

  // The text exposition (tests and debugging).
  std::string Serialize() const;

 private:
  struct JobGauges {
    prometheus::Gauge* loss;
    prometheus::Gauge* tokens_per_second;
    prometheus::Gauge* mfu;
    prometheus::Gauge* cg_steps_mean;
    prometheus::Gauge* step;
    prometheus::Gauge* grad_norm;
  };

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Family<prometheus::Counter>& submissions_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Histogram& queue_wait_;
  prometheus::Histogram& scheduling_pass_;
  prometheus::Family<prometheus::Gauge>& job_loss_;
  prometheus::Family<prometheus::Gauge>& job_tokens_per_second_;
  prometheus::Family<prometheus::Gauge>& job_mfu_;
  prometheus::Family<prometheus::Gauge>& job_cg_steps_mean_;
  prometheus::Family<prometheus::Gauge>& job_step_;
  prometheus::Family<prometheus::Gauge>& job_grad_norm_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, JobGauges> job_gauges_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, prometheus::Counter*> rpc_counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mesa::coordinator

#endif  // MESA_COORDINATOR_METRICS_H_
