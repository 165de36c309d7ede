// Placement of pending jobs onto workers: an in-memory, single-threaded structure (the coordinator
// calls it under its lock). The store is for durability; everything here is rebuilt on restart.
//
// Rules (docs/coordinator.md has the argument for why backfill never delays the head job):
// - Order: higher priority first, then lower submission number (FIFO within a level).
// - Gang: all of a job's GPUs (or CPU ranks) are placed at once or not at all.
// - As few workers as possible: one worker if any can hold the job (the fullest that fits, to keep
//   large holes free), otherwise the workers with the most free capacity first.
// - GPU jobs take GPUs (at most max_gpus_per_node on one worker); CPU jobs (gpus = 0) take
//   cpu_threads slots per rank, ranks may spread over workers.
// - Memory: a job that states memory_bytes per rank gets a rank only where that much memory is
//   free (the worker's reported memory less the requests of the ranks placed there); workers that
//   reported no memory take no such job.
// - Backfill: the first job in order that does not fit now but could fit on the live workers (the
//   head) gets a reservation: a fixed set of workers whose capacity suffices for it. Jobs behind
//   the head may only use resources of the head's kind (GPUs or CPU slots) on workers outside that
//   set. The reservation is sticky until the head starts or a reserved worker goes away. A job that
//   can never fit on the live workers does not block anyone.
#ifndef MESANET_COORDINATOR_SCHEDULER_H_
#define MESANET_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace mesa::coordinator {

struct Demand {
  int gpus = 0;               // 0 = CPU job
  int max_gpus_per_node = 0;  // 0 = no bound
  int cpu_threads = 1;        // slots per CPU rank (>= 1)
  int cpu_ranks = 1;          // CPU ranks (>= 1)
  int64_t memory_bytes = 0;   // per rank; 0 = not stated
  bool is_cpu() const { return gpus == 0; }
};

// What one worker runs of a job.
struct WorkerShare {
  std::string worker_id;
  std::vector<int> gpu_indices;  // GPU jobs
  int cpu_ranks = 0;             // CPU jobs
  int cpu_slots = 0;             // cpu_ranks * cpu_threads
  int64_t memory_bytes = 0;      // ranks here * Demand::memory_bytes
};

struct Placement {
  std::vector<WorkerShare> shares;  // rank order: ranks are numbered through the shares in order
  int num_workers() const { return static_cast<int>(shares.size()); }
};

class Scheduler {
 public:
  // Adds a worker with all resources free, or replaces its resources (then all free again).
  // memory_bytes: what its ranks may use together; 0 = not reported.
  void UpsertWorker(const std::string& id, const std::vector<int>& gpu_indices, int cpu_slots,
                    int64_t memory_bytes = 0);
  // Removes a worker (lost or gone). Placements on it are forgotten with it.
  void RemoveWorker(const std::string& id);
  int live_workers() const { return static_cast<int>(worker_index_.size()); }

  // Marks resources of an existing placement as used (restored after a restart). Shares on unknown
  // workers are skipped; fails if a GPU or CPU slots are not free. Memory is taken even when that
  // overcommits the worker (it then takes no memory-requesting rank until enough is released).
  absl::Status Allocate(const Placement& placement);
  // Frees the resources of a placement; shares on unknown workers are skipped.
  void Release(const Placement& placement);

  void AddPending(const std::string& job_id, int priority, int64_t order, const Demand& demand);
  void RemovePending(const std::string& job_id);
  bool IsPending(const std::string& job_id) const { return pending_.contains(job_id); }
  int pending_size() const { return static_cast<int>(pending_.size()); }

  struct Decision {
    std::string job_id;
    Placement placement;
  };
  // Quotas (coordinator/quotas.h): a job `admit` refuses stays pending and is skipped by this pass
  // as if it were not there (it neither starts nor becomes the head); `placed` is told of each
  // job placed, so that `admit` can count what this pass already started.
  struct Admission {
    std::function<bool(const std::string& job_id, const Demand& demand)> admit;
    std::function<void(const std::string& job_id, const Demand& demand)> placed;
  };
  // One scheduling pass: the jobs to start now, in order. Their resources are allocated and they
  // are no longer pending.
  std::vector<Decision> Pass(const Admission* admission = nullptr);

  struct Explanation {
    int position = 0;  // 1-based in scheduling order; 0 if not pending
    int pending = 0;
    std::string reason;
  };
  Explanation Explain(const std::string& job_id) const;

  // Pending job ids in scheduling order.
  std::vector<std::string> PendingInOrder() const;

  // Preemption (docs/coordinator.md "Preemption"): which of `candidates` (placements of running
  // jobs, in the order they should be preempted) to stop so that `demand` can be placed at once:
  // the shortest prefix whose release makes room, less each member the others make room without,
  // as indices into `candidates` in order. Empty when releasing all of them is not enough. Nothing
  // here changes: the released resources stay allocated until the victims' attempts end.
  std::vector<int> PreemptionVictims(const Demand& demand,
                                     const std::vector<const Placement*>& candidates) const;

  int free_gpus() const { return free_gpus_; }
  int free_cpu_slots() const { return free_cpu_; }
  // The job holding the backfill reservation, empty if none.
  const std::string& reserved_for() const { return reservation_.job_id; }
  std::vector<std::string> reserved_workers() const;

 private:
  struct Worker {
    std::string id;
    std::vector<int> gpu_indices;
    std::vector<bool> gpu_busy;
    int free_gpus = 0;
    int cpu_total = 0;
    int cpu_free = 0;
    int64_t mem_total = 0;  // 0 = not reported
    int64_t mem_free = 0;   // may go negative after Allocate (see there)
    bool reserved = false;  // in the current reservation
  };
  struct Key {
    int neg_priority;
    int64_t order;
    std::string job_id;
    bool operator<(const Key& o) const {
      return std::tie(neg_priority, order, job_id) < std::tie(o.neg_priority, o.order, o.job_id);
    }
  };
  struct PendingJob {
    Key key;
    Demand demand;
  };
  struct Reservation {
    std::string job_id;
    bool cpu = false;
    std::vector<int> workers;
  };

  int Index(const std::string& id) const;
  // Position of GPU `gpu` in w.gpu_indices, -1 if the worker has no such GPU.
  static int GpuPos(const Worker& w, int gpu);
  void Unbucket(int w);
  void Bucket(int w);
  // Capacity of worker w for demand d: GPUs (capped per node) or CPU ranks, and no more ranks than
  // its memory holds when d states memory. total: as if empty.
  int Cap(const Worker& w, const Demand& d, bool total) const;
  // Cap() ignoring memory: tells ExplainJob whether memory is what a job lacks.
  int CapIgnoringMemory(const Worker& w, const Demand& d, bool total) const;
  // Places d on free resources, skipping reserved workers if `avoid_reserved`. Empty on failure.
  bool TryPlace(const Demand& d, bool avoid_reserved, Placement* out);
  void Take(int w, const Demand& d, int units, Placement* out);
  // Largest amount of d the live workers could hold if all were idle.
  int64_t TotalCapacity(const Demand& d) const;
  // Why a job that can never fit does not: its need against what the live workers hold.
  std::string NeverFitsReason(const Demand& d, const std::string& need, int64_t total) const;
  bool ReservationValid(const std::string& job_id, const Demand& d) const;
  void Reserve(const std::string& job_id, const Demand& d);
  void ClearReservation();

  std::vector<Worker> workers_;
  std::vector<int> free_slots_;  // reusable indices of removed workers
  absl::flat_hash_map<std::string, int> worker_index_;
  // Workers by free GPUs / free CPU slots: bucket k holds workers with exactly k free.
  std::vector<absl::btree_set<int>> gpu_buckets_;
  std::vector<absl::btree_set<int>> cpu_buckets_;
  int free_gpus_ = 0;
  int free_cpu_ = 0;

  absl::btree_set<Key> order_;
  absl::flat_hash_map<std::string, PendingJob> pending_;
  Reservation reservation_;
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_SCHEDULER_H_
