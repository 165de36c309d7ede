// The agent's Prometheus metrics (docs/design.md §9): its own figures and the trainers' figures,
// labelled by job and removed when the job's attempt ends on this worker.
#ifndef MESANET_WORKER_METRICS_H_
#define MESANET_WORKER_METRICS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "mesa/v1/job.pb.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace mesa::worker {

class WorkerMetrics {
 public:
  // `worker_id` non-empty: a constant worker_id label on every series.
  explicit WorkerMetrics(const std::string& worker_id = "");

  // Serves /metrics on `address` ("host:port", port 0 = any). Returns the bound "host:port".
  absl::StatusOr<std::string> Serve(const std::string& address);

  void SetGpusTotal(int gpus);
  void AddGpusAllocated(int delta);
  void AddTrainerProcesses(int delta);
  // A trainer started to resume an earlier attempt (attempt > 1).
  void CountRestart();
  // kind: "succeeded", "stopped", "user", "infra".
  void CountExit(const std::string& kind);
  void CountAssignment();
  // A failed read of this worker's Kubernetes Node (--kubernetes_node).
  void CountKubernetesApiError();
  // The node's cordon as last read (1 cordoned, 0 schedulable).
  void SetNodeCordoned(bool cordoned);

  // The UUID of each CUDA device index this worker offers (GpuDevice::uuid).
  void SetGpuUuids(std::map<int, std::string> uuid_by_index);
  // GPU `gpu_index` runs a trainer of `job_id`: mesa_job_gpu_info{job_id, gpu, UUID} 1 until
  // RemoveJob, the series DCGM-exporter's per-GPU series join on (UUID) to be read per job.
  void AddJobGpu(const std::string& job_id, int gpu_index);
  // Latest training figures of `job_id` (from its rank 0 trainer).
  void SetJobProgress(const std::string& job_id, const mesa::v1::Progress& progress);
  void RemoveJob(const std::string& job_id);

  prometheus::Registry& registry() { return *registry_; }

 private:
  struct JobGauges {
    prometheus::Gauge* loss;
    prometheus::Gauge* tokens_per_second;
    prometheus::Gauge* mfu;
    prometheus::Gauge* cg_steps_mean;
    prometheus::Gauge* step;
    prometheus::Gauge* grad_norm;
    prometheus::Counter* tokens;
    int64_t tokens_seen = -1;  // the trainer's count when `tokens` last moved (-1: none yet)
  };

  prometheus::Family<prometheus::Gauge>& Gauge(prometheus::Registry& registry, const char* name,
                                               const char* help);
  prometheus::Family<prometheus::Counter>& Counter(prometheus::Registry& registry, const char* name,
                                                   const char* help);

  const prometheus::Labels labels_;  // constant labels of every family (worker_id)
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;

  prometheus::Gauge& gpus_total_;
  prometheus::Gauge& gpus_allocated_;
  prometheus::Gauge& trainer_processes_;
  prometheus::Counter& restarts_;
  prometheus::Counter& assignments_;
  prometheus::Counter& kubernetes_api_errors_;
  prometheus::Gauge& node_cordoned_;
  prometheus::Family<prometheus::Counter>& exits_;
  prometheus::Family<prometheus::Gauge>& job_loss_;
  prometheus::Family<prometheus::Gauge>& job_tokens_per_second_;
  prometheus::Family<prometheus::Gauge>& job_mfu_;
  prometheus::Family<prometheus::Gauge>& job_cg_steps_mean_;
  prometheus::Family<prometheus::Gauge>& job_step_;
  prometheus::Family<prometheus::Gauge>& job_grad_norm_;
  prometheus::Family<prometheus::Counter>& job_tokens_;
  prometheus::Family<prometheus::Gauge>& job_gpu_info_;

  absl::Mutex mu_;
  std::map<std::string, JobGauges> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::string> gpu_uuids_ ABSL_GUARDED_BY(mu_);
  // The mesa_job_gpu_info series of each job.
  std::map<std::string, std::vector<prometheus::Gauge*>> job_gpus_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mesa::worker

#endif  // MESANET_WORKER_METRICS_H_
