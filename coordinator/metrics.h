// Prometheus metrics of the coordinator (docs/design.md §9). All names carry the mesa_ prefix and
// base units. Per-job trainer figures are labelled by job id and removed when the job ends, so
// label cardinality stays bounded by the number of live jobs.
#ifndef MESANET_COORDINATOR_METRICS_H_
#define MESANET_COORDINATOR_METRICS_H_

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

// The coordinator's own figures (docs/design.md §9). Per-job trainer figures (mesa_job_*) are
// exported by the worker that runs the job's rank 0, not here, so each job has one series to sum
// over.
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

  // The text exposition (tests and debugging).
  std::string Serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Family<prometheus::Counter>& submissions_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Histogram& queue_wait_;
  prometheus::Histogram& scheduling_pass_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, prometheus::Counter*> rpc_counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_METRICS_H_
