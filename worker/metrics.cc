#include "worker/metrics.h"

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "base/version.h"

namespace mesa::worker {
namespace {

// Every series of this worker carries worker_id (when known): Prometheus's `instance` is a pod
// address, which changes when the pod moves, while the worker id is what mesactl and the
// coordinator's mesa_coordinator_worker_* series name.
prometheus::Labels WorkerLabel(const std::string& worker_id) {
  if (worker_id.empty()) return {};
  return {{"worker_id", worker_id}};
}

}  // namespace

prometheus::Family<prometheus::Gauge>& WorkerMetrics::Gauge(prometheus::Registry& registry,
                                                            const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Labels(labels_).Register(registry);
}

prometheus::Family<prometheus::Counter>& WorkerMetrics::Counter(prometheus::Registry& registry,
                                                                const char* name,
                                                                const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Labels(labels_).Register(registry);
}

WorkerMetrics::WorkerMetrics(const std::string& worker_id)
    : labels_(WorkerLabel(worker_id)),
      registry_(std::make_shared<prometheus::Registry>()),
      gpus_total_(Gauge(*registry_, "mesa_worker_gpus", "GPUs this worker offers.").Add({})),
      gpus_allocated_(
          Gauge(*registry_, "mesa_worker_gpus_allocated", "GPUs used by running trainer processes.")
              .Add({})),
      trainer_processes_(
          Gauge(*registry_, "mesa_worker_trainer_processes", "Trainer processes running now.")
              .Add({})),
      restarts_(Counter(*registry_, "mesa_worker_trainer_restarts_total",
                        "Trainers started to resume a job after an earlier attempt ended.")
                    .Add({})),
      assignments_(
          Counter(*registry_, "mesa_worker_assignments_total", "Attempts assigned to this worker.")
              .Add({})),
      kubernetes_api_errors_(
          Counter(*registry_, "mesa_worker_kubernetes_api_errors_total",
                  "Failed reads of this worker's Kubernetes Node (--kubernetes_node): transport, "
                  "TLS, HTTP and parse errors. They never change the drain state.")
              .Add({})),
      node_cordoned_(Gauge(*registry_, "mesa_worker_node_cordoned",
                           "1 while the Kubernetes node is cordoned (spec.unschedulable), as last "
                           "read; 0 otherwise and without --kubernetes_node.")
                         .Add({})),
      exits_(Counter(*registry_, "mesa_worker_trainer_exits_total",
                     "Trainer attempts ended, by outcome (succeeded, stopped, user, infra).")),
      job_loss_(Gauge(*registry_, "mesa_job_loss", "Latest training loss (nats/token).")),
      job_tokens_per_second_(Gauge(*registry_, "mesa_job_tokens_per_second",
                                   "Training throughput over all ranks (tokens/s).")),
      job_mfu_(Gauge(*registry_, "mesa_job_mfu", "Model FLOPs utilisation (0..1).")),
      job_cg_steps_mean_(Gauge(*registry_, "mesa_job_cg_steps_mean",
                               "Mean conjugate-gradient steps per Mesa layer call.")),
      job_step_(Gauge(*registry_, "mesa_job_step", "Latest optimizer step.")),
      job_grad_norm_(Gauge(*registry_, "mesa_job_grad_norm", "Latest global gradient norm.")),
      job_tokens_(Counter(*registry_, "mesa_job_tokens_total",
                          "Tokens trained on by this job's attempts on this worker (rate() it "
                          "for throughput).")),
      job_gpu_info_(Gauge(*registry_, "mesa_job_gpu_info",
                          "1 for each GPU running a trainer of job_id: gpu is the CUDA index the "
                          "worker sees, UUID the device's (join DCGM-exporter series on UUID).")) {
  // Outcomes exist from the start, so rate() works before the first exit.
  for (const char* kind : {"succeeded", "stopped", "user", "infra"}) exits_.Add({{"kind", kind}});
  Gauge(*registry_, "mesa_build_info",
        "1, labelled with the binary's component and release (base/version.h).")
      .Add({{"component", "worker"}, {"version", kVersion}})
      .Set(1);
}

absl::StatusOr<std::string> WorkerMetrics::Serve(const std::string& address) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", address, ": ", e.what()));
  }
  exposer_->RegisterCollectable(registry_);
  const auto ports = exposer_->GetListeningPorts();
  const size_t colon = address.rfind(':');
  const std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  return absl::StrCat(host, ":", ports.empty() ? 0 : ports.front());
}

void WorkerMetrics::SetGpusTotal(int gpus) { gpus_total_.Set(gpus); }
void WorkerMetrics::AddGpusAllocated(int delta) { gpus_allocated_.Increment(delta); }
void WorkerMetrics::AddTrainerProcesses(int delta) { trainer_processes_.Increment(delta); }
void WorkerMetrics::CountRestart() { restarts_.Increment(); }
void WorkerMetrics::CountAssignment() { assignments_.Increment(); }
void WorkerMetrics::CountKubernetesApiError() { kubernetes_api_errors_.Increment(); }
void WorkerMetrics::SetNodeCordoned(bool cordoned) { node_cordoned_.Set(cordoned ? 1 : 0); }
void WorkerMetrics::CountExit(const std::string& kind) { exits_.Add({{"kind", kind}}).Increment(); }

void WorkerMetrics::SetGpuUuids(std::map<int, std::string> uuid_by_index) {
  absl::MutexLock lock(&mu_);
  gpu_uuids_ = std::move(uuid_by_index);
}

void WorkerMetrics::AddJobGpu(const std::string& job_id, int gpu_index) {
  absl::MutexLock lock(&mu_);
  auto uuid = gpu_uuids_.find(gpu_index);
  prometheus::Gauge& g =
      job_gpu_info_.Add({{"job_id", job_id},
                         {"gpu", absl::StrCat(gpu_index)},
                         {"UUID", uuid == gpu_uuids_.end() ? "" : uuid->second}});
  g.Set(1);
  std::vector<prometheus::Gauge*>& list = job_gpus_[job_id];
  if (std::find(list.begin(), list.end(), &g) == list.end()) list.push_back(&g);
}

void WorkerMetrics::SetJobProgress(const std::string& job_id, const mesa::v1::Progress& progress) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    // "job_id", not "job": Prometheus sets "job" on every scraped series itself.
    const prometheus::Labels labels = {{"job_id", job_id}};
    it = jobs_
             .emplace(job_id, JobGauges{&job_loss_.Add(labels), &job_tokens_per_second_.Add(labels),
                                        &job_mfu_.Add(labels), &job_cg_steps_mean_.Add(labels),
                                        &job_step_.Add(labels), &job_grad_norm_.Add(labels),
                                        &job_tokens_.Add(labels)})
             .first;
  }
  // The trainer counts tokens over the whole run (resumes included): the counter takes what was
  // trained here since this worker first saw the job, and never goes down (a count below the last
  // one, a restart from an older checkpoint, starts over from there).
  JobGauges& g = it->second;
  if (progress.tokens() > 0) {
    if (g.tokens_seen >= 0 && progress.tokens() > g.tokens_seen) {
      g.tokens->Increment(static_cast<double>(progress.tokens() - g.tokens_seen));
    }
    g.tokens_seen = progress.tokens();
  }
  it->second.loss->Set(progress.loss());
  it->second.tokens_per_second->Set(progress.tokens_per_second());
  it->second.mfu->Set(progress.mfu());
  it->second.cg_steps_mean->Set(progress.cg_steps_mean());
  it->second.step->Set(static_cast<double>(progress.step()));
  it->second.grad_norm->Set(progress.grad_norm());
}

void WorkerMetrics::RemoveJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  if (auto gpus = job_gpus_.find(job_id); gpus != job_gpus_.end()) {
    for (prometheus::Gauge* g : gpus->second) job_gpu_info_.Remove(g);
    job_gpus_.erase(gpus);
  }
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  job_loss_.Remove(it->second.loss);
  job_tokens_per_second_.Remove(it->second.tokens_per_second);
  job_mfu_.Remove(it->second.mfu);
  job_cg_steps_mean_.Remove(it->second.cg_steps_mean);
  job_step_.Remove(it->second.step);
  job_grad_norm_.Remove(it->second.grad_norm);
  job_tokens_.Remove(it->second.tokens);
  jobs_.erase(it);
}

}  // namespace mesa::worker
