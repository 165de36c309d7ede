#include "coordinator/scheduler.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mesa::coordinator {
namespace {

// "8 GiB", "1.5 GiB", "512 MiB", "100 bytes".
std::string Bytes(int64_t n) {
  constexpr int64_t kMiB = int64_t{1} << 20, kGiB = int64_t{1} << 30;
  if (n >= kGiB) return absl::StrCat(absl::SixDigits(static_cast<double>(n) / kGiB), " GiB");
  if (n >= kMiB) return absl::StrCat(absl::SixDigits(static_cast<double>(n) / kMiB), " MiB");
  return absl::StrCat(n, " bytes");
}

}  // namespace

int Scheduler::Index(const std::string& id) const {
  auto it = worker_index_.find(id);
  return it == worker_index_.end() ? -1 : it->second;
}

int Scheduler::GpuPos(const Worker& w, int gpu) {
  auto it = std::find(w.gpu_indices.begin(), w.gpu_indices.end(), gpu);
  return it == w.gpu_indices.end() ? -1 : static_cast<int>(it - w.gpu_indices.begin());
}

void Scheduler::Unbucket(int w) {
  Worker& wk = workers_[w];
  if (!wk.gpu_indices.empty()) gpu_buckets_[wk.free_gpus].erase(w);
  if (wk.cpu_total > 0) cpu_buckets_[wk.cpu_free].erase(w);
  free_gpus_ -= wk.free_gpus;
  free_cpu_ -= wk.cpu_free;
}

void Scheduler::Bucket(int w) {
  Worker& wk = workers_[w];
  if (!wk.gpu_indices.empty()) {
    if (gpu_buckets_.size() <= static_cast<size_t>(wk.free_gpus))
      gpu_buckets_.resize(wk.free_gpus + 1);
    gpu_buckets_[wk.free_gpus].insert(w);
  }
  if (wk.cpu_total > 0) {
    if (cpu_buckets_.size() <= static_cast<size_t>(wk.cpu_free))
      cpu_buckets_.resize(wk.cpu_free + 1);
    cpu_buckets_[wk.cpu_free].insert(w);
  }
  free_gpus_ += wk.free_gpus;
  free_cpu_ += wk.cpu_free;
}

void Scheduler::UpsertWorker(const std::string& id, const std::vector<int>& gpu_indices,
                             int cpu_slots, int64_t memory_bytes) {
  int w = Index(id);
  if (w >= 0) {
    Unbucket(w);
  } else {
    if (!free_slots_.empty()) {
      w = free_slots_.back();
      free_slots_.pop_back();
    } else {
      w = static_cast<int>(workers_.size());
      workers_.emplace_back();
    }
    worker_index_[id] = w;
  }
  Worker& wk = workers_[w];
  wk.id = id;
  wk.gpu_indices = gpu_indices;
  wk.gpu_busy.assign(gpu_indices.size(), false);
  wk.free_gpus = static_cast<int>(gpu_indices.size());
  wk.cpu_total = std::max(cpu_slots, 0);
  wk.cpu_free = wk.cpu_total;
  wk.mem_total = std::max<int64_t>(memory_bytes, 0);
  wk.mem_free = wk.mem_total;
  Bucket(w);
  if (wk.reserved) ClearReservation();  // its capacity changed
}

void Scheduler::RemoveWorker(const std::string& id) {
  int w = Index(id);
  if (w < 0) return;
  if (workers_[w].reserved) ClearReservation();
  Unbucket(w);
  workers_[w] = Worker();
  worker_index_.erase(id);
  free_slots_.push_back(w);
}

absl::Status Scheduler::Allocate(const Placement& placement) {
  // Check first so a failure changes nothing.
  for (const WorkerShare& s : placement.shares) {
    int w = Index(s.worker_id);
    if (w < 0) continue;
    const Worker& wk = workers_[w];
    for (int g : s.gpu_indices) {
      const int pos = GpuPos(wk, g);
      if (pos < 0 || wk.gpu_busy[pos]) {
        return absl::FailedPreconditionError(
            absl::StrCat("GPU ", g, " of worker ", s.worker_id, " is not free"));
      }
    }
    if (s.cpu_slots > wk.cpu_free) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", s.worker_id, " lacks CPU slots"));
    }
  }
  for (const WorkerShare& s : placement.shares) {
    int w = Index(s.worker_id);
    if (w < 0) continue;
    Unbucket(w);
    Worker& wk = workers_[w];
    for (int g : s.gpu_indices) {
      wk.gpu_busy[GpuPos(wk, g)] = true;
      --wk.free_gpus;
    }
    wk.cpu_free -= s.cpu_slots;
    wk.mem_free -= s.memory_bytes;
    Bucket(w);
  }
  return absl::OkStatus();
}

void Scheduler::Release(const Placement& placement) {
  for (const WorkerShare& s : placement.shares) {
    int w = Index(s.worker_id);
    if (w < 0) continue;
    Unbucket(w);
    Worker& wk = workers_[w];
    for (int g : s.gpu_indices) {
      const int pos = GpuPos(wk, g);
      if (pos >= 0 && wk.gpu_busy[pos]) {
        wk.gpu_busy[pos] = false;
        ++wk.free_gpus;
      }
    }
    wk.cpu_free = std::min(wk.cpu_total, wk.cpu_free + s.cpu_slots);
    wk.mem_free = std::min(wk.mem_total, wk.mem_free + s.memory_bytes);
    Bucket(w);
  }
}

void Scheduler::AddPending(const std::string& job_id, int priority, int64_t order,
                           const Demand& demand) {
  RemovePending(job_id);
  Demand d = demand;
  d.cpu_threads = std::max(d.cpu_threads, 1);
  d.cpu_ranks = std::max(d.cpu_ranks, 1);
  Key key{-priority, order, job_id};
  order_.insert(key);
  pending_[job_id] = PendingJob{key, d};
}

void Scheduler::RemovePending(const std::string& job_id) {
  auto it = pending_.find(job_id);
  if (it == pending_.end()) return;
  order_.erase(it->second.key);
  pending_.erase(it);
  if (reservation_.job_id == job_id) ClearReservation();
}

int Scheduler::CapIgnoringMemory(const Worker& w, const Demand& d, bool total) const {
  if (d.is_cpu()) return (total ? w.cpu_total : w.cpu_free) / d.cpu_threads;
  int n = total ? static_cast<int>(w.gpu_indices.size()) : w.free_gpus;
  return d.max_gpus_per_node > 0 ? std::min(n, d.max_gpus_per_node) : n;
}

int Scheduler::Cap(const Worker& w, const Demand& d, bool total) const {
  const int units = CapIgnoringMemory(w, d, total);
  if (d.memory_bytes <= 0) return units;
  const int64_t mem = std::max<int64_t>(total ? w.mem_total : w.mem_free, 0);
  return static_cast<int>(std::min<int64_t>(units, mem / d.memory_bytes));
}

void Scheduler::Take(int w, const Demand& d, int units, Placement* out) {
  Worker& wk = workers_[w];
  Unbucket(w);
  WorkerShare share;
  share.worker_id = wk.id;
  share.memory_bytes = units * d.memory_bytes;
  wk.mem_free -= share.memory_bytes;
  if (d.is_cpu()) {
    share.cpu_ranks = units;
    share.cpu_slots = units * d.cpu_threads;
    wk.cpu_free -= share.cpu_slots;
  } else {
    for (size_t i = 0;
         i < wk.gpu_indices.size() && static_cast<int>(share.gpu_indices.size()) < units; ++i) {
      if (!wk.gpu_busy[i]) {
        wk.gpu_busy[i] = true;
        share.gpu_indices.push_back(wk.gpu_indices[i]);
      }
    }
    wk.free_gpus -= units;
  }
  Bucket(w);
  out->shares.push_back(std::move(share));
}

bool Scheduler::TryPlace(const Demand& d, bool avoid_reserved, Placement* out) {
  const bool cpu = d.is_cpu();
  const auto& buckets = cpu ? cpu_buckets_ : gpu_buckets_;
  const int unit = cpu ? d.cpu_threads : 1;  // resource per unit (rank or GPU)
  const int cap_limit =
      (!cpu && d.max_gpus_per_node > 0) ? d.max_gpus_per_node : std::numeric_limits<int>::max();
  int remaining = cpu ? d.cpu_ranks : d.gpus;
  std::vector<std::pair<int, int>> chosen;  // worker, units
  // Buckets order workers by free GPUs / CPU slots; a job that states memory also needs `units`
  // ranks' worth of it free on the worker.
  auto usable = [&](int w, int units) {
    if (avoid_reserved && workers_[w].reserved) return false;
    for (const auto& c : chosen) {
      if (c.first == w) return false;
    }
    return d.memory_bytes <= 0 || Cap(workers_[w], d, false) >= units;
  };
  while (remaining > 0) {
    // Best fit: the fullest single worker that holds all that remains.
    int pick = -1;
    if (remaining <= cap_limit) {
      for (size_t k = static_cast<size_t>(remaining) * unit; k < buckets.size() && pick < 0; ++k) {
        for (int w : buckets[k]) {
          if (usable(w, remaining)) {
            pick = w;
            break;
          }
        }
      }
    }
    if (pick >= 0) {
      chosen.push_back({pick, remaining});
      remaining = 0;
      break;
    }
    // Otherwise the worker with the most free capacity (fewest workers overall).
    for (size_t k = buckets.size(); k-- > static_cast<size_t>(unit) && pick < 0;) {
      for (int w : buckets[k]) {
        if (usable(w, 1)) {
          pick = w;
          break;
        }
      }
    }
    if (pick < 0) return false;
    int units = std::min(Cap(workers_[pick], d, false), remaining);
    if (units <= 0) return false;
    chosen.push_back({pick, units});
    remaining -= units;
  }
  out->shares.clear();
  for (const auto& [w, units] : chosen) Take(w, d, units, out);
  return true;
}

int64_t Scheduler::TotalCapacity(const Demand& d) const {
  int64_t total = 0;
  for (const auto& [id, w] : worker_index_) total += Cap(workers_[w], d, true);
  return total;
}

bool Scheduler::ReservationValid(const std::string& job_id, const Demand& d) const {
  if (reservation_.job_id != job_id || reservation_.cpu != d.is_cpu()) return false;
  int64_t cap = 0;
  // Reserved workers are live: removing or changing one clears the reservation.
  for (int w : reservation_.workers) cap += Cap(workers_[w], d, true);
  return cap >= (d.is_cpu() ? d.cpu_ranks : d.gpus);
}

void Scheduler::ClearReservation() {
  for (int w : reservation_.workers) {
    if (w < static_cast<int>(workers_.size())) workers_[w].reserved = false;
  }
  reservation_ = Reservation();
}

void Scheduler::Reserve(const std::string& job_id, const Demand& d) {
  ClearReservation();
  // Fewest workers by total capacity; among equals, those with the most free now (start soonest).
  std::vector<int> cand;
  for (const auto& [id, w] : worker_index_) {
    if (Cap(workers_[w], d, true) > 0) cand.push_back(w);
  }
  auto free_units = [&](int w) { return Cap(workers_[w], d, false); };
  std::sort(cand.begin(), cand.end(), [&](int a, int b) {
    int ca = Cap(workers_[a], d, true), cb = Cap(workers_[b], d, true);
    if (ca != cb) return ca > cb;
    if (free_units(a) != free_units(b)) return free_units(a) > free_units(b);
    return workers_[a].id < workers_[b].id;
  });
  const int need = d.is_cpu() ? d.cpu_ranks : d.gpus;
  int64_t got = 0;
  for (int w : cand) {
    if (got >= need) break;
    reservation_.workers.push_back(w);
    got += Cap(workers_[w], d, true);
  }
  reservation_.job_id = job_id;
  reservation_.cpu = d.is_cpu();
  for (int w : reservation_.workers) workers_[w].reserved = true;
}

std::vector<std::string> Scheduler::PendingInOrder() const {
  std::vector<std::string> out;
  out.reserve(order_.size());
  for (const Key& k : order_) out.push_back(k.job_id);
  return out;
}

std::vector<int> Scheduler::PreemptionVictims(
    const Demand& demand, const std::vector<const Placement*>& candidates) const {
  // Whether `demand` fits once the chosen candidates are released, on a copy of this state.
  auto fits_without = [&](const std::vector<int>& released) {
    Scheduler trial = *this;
    trial.ClearReservation();
    for (int i : released) trial.Release(*candidates[i]);
    Placement ignored;
    return trial.TryPlace(demand, /*avoid_reserved=*/false, &ignored);
  };
  std::vector<int> chosen;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    chosen.push_back(i);
    if (!fits_without(chosen)) continue;
    // Enough: drop members the rest make room without (earlier ones that did not help).
    for (size_t j = 0; j + 1 < chosen.size();) {
      std::vector<int> without = chosen;
      without.erase(without.begin() + static_cast<std::ptrdiff_t>(j));
      if (fits_without(without)) {
        chosen = std::move(without);
      } else {
        ++j;
      }
    }
    return chosen;
  }
  return {};
}

std::vector<std::string> Scheduler::reserved_workers() const {
  std::vector<std::string> out;
  for (int w : reservation_.workers) out.push_back(workers_[w].id);
  return out;
}

std::vector<Scheduler::Decision> Scheduler::Pass(const Admission* admission) {
  std::vector<Decision> out;
  // No workers: nothing can start or be reserved.
  if (worker_index_.empty()) return out;
  bool have_head = false;
  // Shapes that failed in this pass: resources only shrink during a pass, so they fail again.
  using Shape = std::tuple<int, int, int, int, int64_t>;
  absl::flat_hash_set<Shape> failed;
  absl::flat_hash_set<Shape> never_fits;
  // Free resources outside the reservation (what jobs behind the head may use).
  auto reserved_free = [&](bool cpu) {
    int n = 0;
    if (!have_head || reservation_.cpu != cpu) return 0;
    for (int w : reservation_.workers) n += cpu ? workers_[w].cpu_free : workers_[w].free_gpus;
    return n;
  };
  int avail_gpu = free_gpus_, avail_cpu = free_cpu_;
  for (auto it = order_.begin(); it != order_.end(); ++it) {
    if (have_head && avail_gpu <= 0 && avail_cpu <= 0) break;
    const PendingJob& pj = pending_.at(it->job_id);
    const Demand& d = pj.demand;
    if (admission != nullptr && !admission->admit(it->job_id, d)) continue;
    const bool cpu = d.is_cpu();
    const int64_t need = cpu ? static_cast<int64_t>(d.cpu_ranks) * d.cpu_threads : d.gpus;
    const Shape shape{d.gpus, d.max_gpus_per_node, d.cpu_threads, d.cpu_ranks, d.memory_bytes};
    bool placed = false;
    if (need <= (cpu ? avail_cpu : avail_gpu) && !failed.contains(shape)) {
      Placement p;
      const bool avoid = have_head && reservation_.cpu == cpu;
      if (TryPlace(d, avoid, &p)) {
        placed = true;
        (cpu ? avail_cpu : avail_gpu) -= static_cast<int>(need);
        out.push_back(Decision{it->job_id, std::move(p)});
        if (admission != nullptr) admission->placed(it->job_id, d);
      } else {
        failed.insert(shape);
      }
    }
    if (placed || have_head) continue;
    // The first job that does not fit: the head. Jobs that can never fit do not block others.
    if (never_fits.contains(shape)) continue;
    if (TotalCapacity(d) < (cpu ? d.cpu_ranks : d.gpus)) {
      never_fits.insert(shape);
      continue;
    }
    if (!ReservationValid(it->job_id, d)) Reserve(it->job_id, d);
    have_head = true;
    failed.clear();
    avail_gpu = free_gpus_ - reserved_free(false);
    avail_cpu = free_cpu_ - reserved_free(true);
  }
  for (const Decision& dec : out) RemovePending(dec.job_id);
  if (!have_head) ClearReservation();
  return out;
}

std::string Scheduler::NeverFitsReason(const Demand& d, const std::string& need,
                                       int64_t total) const {
  const bool cpu = d.is_cpu();
  int64_t without_memory = 0, largest_memory = 0;
  for (const auto& [id, w] : worker_index_) {
    without_memory += CapIgnoringMemory(workers_[w], d, true);
    largest_memory = std::max(largest_memory, workers_[w].mem_total);
  }
  const int64_t want = cpu ? d.cpu_ranks : d.gpus;
  if (d.memory_bytes > 0 && without_memory >= want) {
    // GPUs / slots would do; memory is what is missing.
    return absl::StrCat(
        "cannot fit on the live workers: needs ", need,
        ", the live workers have memory for at most ", total,
        " such rank(s) (the most memory a live worker reported: ",
        largest_memory > 0 ? Bytes(largest_memory) : "none",
        "; workers that report no memory take no job that requests it); waiting for workers with "
        "more memory");
  }
  return absl::StrCat(
      "cannot fit on the live workers: needs ", need, ", the live workers hold at most ", total,
      cpu ? " such rank(s)" : " GPU(s) under this per-worker bound", "; waiting for more workers");
}

Scheduler::Explanation Scheduler::Explain(const std::string& job_id) const {
  Explanation e;
  e.pending = static_cast<int>(order_.size());
  auto pit = pending_.find(job_id);
  if (pit == pending_.end()) return e;
  int pos = 1;
  for (const Key& k : order_) {
    if (k.job_id == job_id) break;
    ++pos;
  }
  e.position = pos;
  const Demand& d = pit->second.demand;
  const bool cpu = d.is_cpu();
  std::string need =
      cpu ? absl::StrCat(d.cpu_ranks, " CPU rank(s) of ", d.cpu_threads, " slot(s)")
          : absl::StrCat(d.gpus, " GPU(s)",
                         d.max_gpus_per_node > 0
                             ? absl::StrCat(" (at most ", d.max_gpus_per_node, " per worker)")
                             : "");
  if (d.memory_bytes > 0) absl::StrAppend(&need, " with ", Bytes(d.memory_bytes), " memory each");
  if (worker_index_.empty()) {
    e.reason = absl::StrCat("no live workers; needs ", need);
    return e;
  }
  int64_t total = TotalCapacity(d);
  int64_t want = cpu ? d.cpu_ranks : d.gpus;
  if (total < want) {
    e.reason = NeverFitsReason(d, need, total);
    return e;
  }
  if (reservation_.job_id == job_id) {
    e.reason = absl::StrCat("head of the queue: waiting for ", need, " on reserved workers [",
                            absl::StrJoin(reserved_workers(), ", "),
                            "] to free up (smaller jobs are not backfilled onto them)");
    return e;
  }
  e.reason = absl::StrCat("waiting for resources: needs ", need, ", ", cpu ? free_cpu_ : free_gpus_,
                          cpu ? " CPU slot(s)" : " GPU(s)", " free; ", pos - 1,
                          " job(s) ahead in the queue");
  if (!reservation_.job_id.empty()) {
    absl::StrAppend(&e.reason, "; workers [", absl::StrJoin(reserved_workers(), ", "),
                    "] are reserved for head job ", reservation_.job_id);
  }
  return e;
}

}  // namespace mesa::coordinator
