#include "coordinator/scheduler.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

std::vector<int> Gpus(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

Demand GpuJob(int gpus, int max_per_node = 0) {
  Demand d;
  d.gpus = gpus;
  d.max_gpus_per_node = max_per_node;
  return d;
}

Demand CpuJob(int threads, int ranks) {
  Demand d;
  d.cpu_threads = threads;
  d.cpu_ranks = ranks;
  return d;
}

std::vector<std::string> Started(const std::vector<Scheduler::Decision>& ds) {
  std::vector<std::string> out;
  for (const auto& d : ds) out.push_back(d.job_id);
  return out;
}

const Scheduler::Decision* Find(const std::vector<Scheduler::Decision>& ds, const std::string& id) {
  for (const auto& d : ds) {
    if (d.job_id == id) return &d;
  }
  return nullptr;
}

TEST(SchedulerTest, StrictPriorityThenFifo) {
  Scheduler s;
  s.UpsertWorker("w", Gpus(1), 0);
  s.AddPending("low-early", 0, 1, GpuJob(1));
  s.AddPending("high-late", 10, 3, GpuJob(1));
  s.AddPending("high-early", 10, 2, GpuJob(1));
  EXPECT_EQ(Started(s.Pass()), std::vector<std::string>{"high-early"});
  EXPECT_EQ(s.Explain("high-late").position, 1);
  EXPECT_EQ(s.Explain("low-early").position, 2);
  s.UpsertWorker("w", Gpus(1), 0);  // all free again
  EXPECT_EQ(Started(s.Pass()), std::vector<std::string>{"high-late"});
}

TEST(SchedulerTest, AdmissionSkipsRefusedJobsWithoutMakingThemTheHead) {
  Scheduler s;
  s.UpsertWorker("w", Gpus(4), 0);
  s.AddPending("held", 0, 1, GpuJob(4));  // would fit, but its owner is over quota
  s.AddPending("a", 0, 2, GpuJob(2));
  s.AddPending("b", 0, 3, GpuJob(2));
  int used = 0;  // one owner's GPUs: at most 2
  Scheduler::Admission quota{
      .admit = [&](const std::string& id,
                   const Demand& d) { return id != "held" && used + d.gpus <= 2; },
      .placed = [&](const std::string&, const Demand& d) { used += d.gpus; }};
  // "held" is skipped (no reservation for it), "a" starts, "b" is refused by the count of this
  // pass.
  EXPECT_EQ(Started(s.Pass(&quota)), std::vector<std::string>{"a"});
  EXPECT_EQ(s.reserved_for(), "");
  EXPECT_TRUE(s.IsPending("held"));
  EXPECT_TRUE(s.IsPending("b"));
}

TEST(SchedulerTest, GangAllOrNothingAcrossWorkers) {
  Scheduler s;
  s.UpsertWorker("a", Gpus(2), 0);
  s.UpsertWorker("b", Gpus(2), 0);
  s.AddPending("five", 0, 1, GpuJob(5));  // can never fit 4 GPUs: must not take any
  s.AddPending("four", 0, 2, GpuJob(4));
  auto ds = s.Pass();
  ASSERT_EQ(Started(ds), std::vector<std::string>{"four"});
  EXPECT_EQ(ds[0].placement.num_workers(), 2);
  EXPECT_EQ(s.free_gpus(), 0);
  EXPECT_TRUE(s.IsPending("five"));
  EXPECT_NE(s.Explain("five").reason.find("cannot fit"), std::string::npos)
      << s.Explain("five").reason;
}

TEST(SchedulerTest, FewestWorkersAndBestFit) {
  Scheduler s;
  s.UpsertWorker("eight", Gpus(8), 0);
  s.UpsertWorker("four-a", Gpus(4), 0);
  s.UpsertWorker("four-b", Gpus(4), 0);
  s.AddPending("j4", 0, 1, GpuJob(4));
  s.AddPending("j12", 0, 2, GpuJob(12));
  auto ds = s.Pass();
  // j4 goes to a 4-GPU worker (best fit), leaving the 8-GPU worker whole; j12 then needs 2 workers.
  ASSERT_EQ(ds.size(), 2u);
  ASSERT_EQ(Find(ds, "j4")->placement.num_workers(), 1);
  EXPECT_NE(Find(ds, "j4")->placement.shares[0].worker_id, "eight");
  const Placement& p12 = Find(ds, "j12")->placement;
  ASSERT_EQ(p12.num_workers(), 2);
  EXPECT_EQ(p12.shares[0].worker_id, "eight");
  EXPECT_EQ(p12.shares[0].gpu_indices.size(), 8u);
  EXPECT_EQ(p12.shares[1].gpu_indices.size(), 4u);
}

TEST(SchedulerTest, HonoursMaxGpusPerNode) {
  Scheduler s;
  s.UpsertWorker("a", Gpus(8), 0);
  s.UpsertWorker("b", Gpus(8), 0);
  s.AddPending("j", 0, 1, GpuJob(8, 4));
  auto ds = s.Pass();
  ASSERT_EQ(ds.size(), 1u);
  ASSERT_EQ(ds[0].placement.num_workers(), 2);
  for (const auto& sh : ds[0].placement.shares) EXPECT_EQ(sh.gpu_indices.size(), 4u);
}

TEST(SchedulerTest, BackfillNeverDelaysHead) {
  Scheduler s;
  s.UpsertWorker("a", Gpus(4), 0);
  s.UpsertWorker("b", Gpus(4), 0);
  s.AddPending("running", 10, 1, GpuJob(3));
  auto first = s.Pass();
  ASSERT_EQ(first.size(), 1u);
  const std::string busy = first[0].placement.shares[0].worker_id;
  // The head needs both workers, so it must wait for `running`.
  s.AddPending("head", 5, 2, GpuJob(8));
  s.AddPending("small", 0, 3, GpuJob(1));
  auto ds = s.Pass();
  // `small` would fit now (5 GPUs free) but any GPU it takes is one the head needs: not started.
  EXPECT_TRUE(ds.empty()) << Started(ds)[0];
  EXPECT_EQ(s.reserved_for(), "head");
  EXPECT_NE(s.Explain("small").reason.find("reserved for head job head"), std::string::npos);
  EXPECT_NE(s.Explain("head").reason.find("head of the queue"), std::string::npos);
  // Once `running` ends, the head starts at once.
  s.Release(first[0].placement);
  EXPECT_EQ(Started(s.Pass()), std::vector<std::string>{"head"});
}

TEST(SchedulerTest, BackfillUsesWorkersOutsideTheReservation) {
  Scheduler s;
  s.UpsertWorker("a", Gpus(4), 0);
  s.UpsertWorker("b", Gpus(4), 0);
  s.AddPending("r1", 10, 1, GpuJob(2));
  auto first = s.Pass();
  ASSERT_EQ(first.size(), 1u);
  s.AddPending("head", 5, 2, GpuJob(4));    // fits on the idle worker now: starts, not a head
  s.AddPending("big", 4, 3, GpuJob(4));     // must wait for the other worker
  s.AddPending("cpu", 0, 4, CpuJob(1, 1));  // CPU jobs do not compete for GPUs
  s.UpsertWorker("c", {}, 2);
  auto ds = s.Pass();
  EXPECT_EQ(Started(ds), (std::vector<std::string>{"head", "cpu"}));
  EXPECT_EQ(s.reserved_for(), "big");
  // A 1-GPU job behind `big` may not take the 2 free GPUs of the worker reserved for `big`.
  s.AddPending("tiny", 0, 5, GpuJob(1));
  EXPECT_TRUE(s.Pass().empty());
  // A new worker outside the reservation: backfill may use it.
  s.UpsertWorker("d", Gpus(1), 0);
  EXPECT_EQ(Started(s.Pass()), std::vector<std::string>{"tiny"});
}

TEST(SchedulerTest, JobThatCanNeverFitDoesNotBlock) {
  Scheduler s;
  s.UpsertWorker("a", Gpus(2), 0);
  s.AddPending("huge", 100, 1, GpuJob(16));
  s.AddPending("ok", 0, 2, GpuJob(2));
  EXPECT_EQ(Started(s.Pass()), std::vector<std::string>{"ok"});
  EXPECT_EQ(s.Explain("huge").position, 1);
}

TEST(SchedulerTest, CpuSlotsAndMultiRankSpread) {
  Scheduler s;
  s.UpsertWorker("a", {}, 4);
  s.UpsertWorker("b", {}, 4);
  s.AddPending("two-by-two", 0, 1, CpuJob(2, 2));    // 4 slots: one worker
  s.AddPending("three-by-one", 0, 2, CpuJob(3, 1));  // 3 slots on the other worker
  auto ds = s.Pass();
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(Find(ds, "two-by-two")->placement.num_workers(), 1);
  EXPECT_EQ(Find(ds, "two-by-two")->placement.shares[0].cpu_slots, 4);
  EXPECT_EQ(s.free_cpu_slots(), 1);
  s.Release(ds[0].placement);
  s.Release(ds[1].placement);
  s.AddPending("spread", 0, 3, CpuJob(2, 4));  // 8 slots: needs both workers, 2 ranks each
  auto spread = s.Pass();
  ASSERT_EQ(spread.size(), 1u);
  ASSERT_EQ(spread[0].placement.num_workers(), 2);
  EXPECT_EQ(spread[0].placement.shares[0].cpu_ranks + spread[0].placement.shares[1].cpu_ranks, 4);
  // Threads of one rank cannot be split across workers: 3 ranks of 3 threads cannot fit 4+4 slots.
  s.Release(spread[0].placement);
  s.AddPending("nosplit", 0, 4, CpuJob(3, 3));
  EXPECT_TRUE(s.Pass().empty());
}

TEST(SchedulerTest, LostWorkerFreesNothingElseAndDropsReservation) {
  Scheduler s;
  s.UpsertWorker("a", Gpus(2), 0);
  s.AddPending("r", 0, 1, GpuJob(2));
  ASSERT_EQ(s.Pass().size(), 1u);
  s.AddPending("head", 0, 2, GpuJob(2));
  EXPECT_TRUE(s.Pass().empty());
  EXPECT_EQ(s.reserved_for(), "head");
  s.RemoveWorker("a");
  EXPECT_EQ(s.reserved_for(), "");
  EXPECT_EQ(s.free_gpus(), 0);
  s.UpsertWorker("b", Gpus(2), 0);
  EXPECT_EQ(Started(s.Pass()), std::vector<std::string>{"head"});
}

TEST(SchedulerTest, AllocateRestoresPlacementAndRejectsDoubleUse) {
  Scheduler s;
  s.UpsertWorker("a", Gpus(4), 0);
  Placement p;
  p.shares.push_back(WorkerShare{"a", {1, 2}, 0, 0});
  ASSERT_TRUE(s.Allocate(p).ok());
  EXPECT_EQ(s.free_gpus(), 2);
  EXPECT_FALSE(s.Allocate(p).ok());
  s.AddPending("j", 0, 1, GpuJob(2));
  auto ds = s.Pass();
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].placement.shares[0].gpu_indices, (std::vector<int>{0, 3}));
}

// Memory per rank: ranks spread by memory too, a restored placement takes its memory back
// (overcommitting rather than failing), and a release frees it.
TEST(SchedulerTest, MemoryBoundsRanksPerWorkerAndIsRestoredAndReleased) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  Scheduler s;
  s.UpsertWorker("a", {}, 8, 4 * kGiB);
  s.UpsertWorker("b", {}, 8, 4 * kGiB);
  Demand d = CpuJob(1, 4);
  d.memory_bytes = 2 * kGiB;
  s.AddPending("j", 0, 1, d);
  auto ds = s.Pass();
  ASSERT_EQ(ds.size(), 1u);
  ASSERT_EQ(ds[0].placement.shares.size(), 2u);  // 2 ranks of 2 GiB on each 4 GiB worker
  for (const WorkerShare& share : ds[0].placement.shares) {
    EXPECT_EQ(share.cpu_ranks, 2);
    EXPECT_EQ(share.memory_bytes, 4 * kGiB);
  }
  Demand one = CpuJob(1, 1);
  one.memory_bytes = 1;
  s.AddPending("k", 0, 2, one);
  EXPECT_TRUE(s.Pass().empty());  // slots are free, memory is not
  s.Release(ds[0].placement);
  EXPECT_EQ(Started(s.Pass()), std::vector<std::string>{"k"});

  Scheduler r;
  r.UpsertWorker("a", {}, 8, 1 * kGiB);
  Placement restored;
  restored.shares.push_back(WorkerShare{"a", {}, 1, 1, 2 * kGiB});
  ASSERT_TRUE(r.Allocate(restored).ok());  // the worker now reports less than it runs
  r.AddPending("m", 0, 1, one);
  EXPECT_TRUE(r.Pass().empty());
  r.Release(restored);
  EXPECT_EQ(Started(r.Pass()), std::vector<std::string>{"m"});
}

// Preemption's choice: the shortest prefix of the candidates whose release makes room, less the
// members that did not help; nothing when even all of them are not enough.
TEST(SchedulerTest, PreemptionVictimsAreTheFewestThatMakeRoom) {
  Scheduler s;
  s.UpsertWorker("w1", {0, 1}, 0);
  s.UpsertWorker("w2", {0, 1}, 0);
  s.AddPending("a", 0, 1, GpuJob(2));  // fills w1 (best fit)
  s.AddPending("b", 0, 2, GpuJob(1));
  s.AddPending("c", 0, 3, GpuJob(1));
  const std::vector<Scheduler::Decision> running = s.Pass();
  ASSERT_EQ(running.size(), 3u);
  const Placement* a = &Find(running, "a")->placement;
  const Placement* b = &Find(running, "b")->placement;
  const Placement* c = &Find(running, "c")->placement;
  ASSERT_EQ(a->shares.size(), 1u);
  ASSERT_EQ(b->shares[0].worker_id, c->shares[0].worker_id);
  // Two GPUs on one node: b alone frees one GPU of w2 (not enough), b and a free w1 — and a alone
  // does, so b is not stopped for nothing.
  EXPECT_EQ(s.PreemptionVictims(GpuJob(2, 2), {b, a, c}), (std::vector<int>{1}));
  // Three GPUs: a and one of w2's jobs.
  EXPECT_EQ(s.PreemptionVictims(GpuJob(3), {b, a, c}), (std::vector<int>{0, 1}));
  // Five GPUs exist nowhere.
  EXPECT_TRUE(s.PreemptionVictims(GpuJob(5), {b, a, c}).empty());
  // Nothing changed: the GPUs are still taken.
  EXPECT_EQ(s.free_gpus(), 0);
  s.AddPending("d", 5, 4, GpuJob(1));
  EXPECT_EQ(s.PendingInOrder(), (std::vector<std::string>{"d"}));
  EXPECT_TRUE(s.Pass().empty());
}

}  // namespace
}  // namespace mesa::coordinator
