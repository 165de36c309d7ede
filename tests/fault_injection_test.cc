// Fault injection for replicated coordinators (docs/reliability.md): two mesa-coordinator
// processes with --leader_lease on one real PostgreSQL server (one of them with its clock an hour
// ahead), a client load (submissions with
// idempotency keys, cancels) and two fake workers running jobs through a channel over both
// addresses, while a seeded nemesis kills the leader (SIGKILL), pauses it past its lease
// (SIGSTOP/SIGCONT), restarts PostgreSQL, or makes the store refuse writes for 2 s (what a full
// disk does: every session cut, new ones read-only); a supervisor restarts every coordinator that
// stopped.
// Then a checker proves, per schedule: every acknowledged submission exists; no job ran on two
// workers at once, nor again after its success was acknowledged; an ended job never changed its
// end state or ran again (a watcher samples them during the run); no acknowledged cancel left a
// job waiting to run; and reports acknowledged / lost / double-run, the longest takeover (from a
// fault's end until a coordinator leads and listens) and the longest gap until the clients' next
// acknowledged submission.
//   MESA_FAULT_SEED=N: only schedule N (default: seeds 1 and 2); MESA_FAULT_STEPS=K: faults per
//   schedule (default 5).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/client.h"
#include "coordinator/postgres_test_server.h"
#include "gtest/gtest.h"
#include "tests/coordinator_harness.h"
#include "tests/process_harness.h"

namespace mesa::testing {
namespace {

using ::mesa::coordinator::PostgresTestServer;
using ::mesa::v1::Job;

struct Report {
  int acknowledged = 0, lost = 0, double_run = 0, cancel_violations = 0, backwards = 0, faults = 0;
  int watched = 0;  // ended jobs the watcher saw (the end-state check's sample)
  // From a fault's end: until a coordinator leads and listens (the takeover), and until the
  // clients' next submission is acknowledged (their reconnect included).
  absl::Duration longest_takeover, longest_client_gap;
};

// One schedule on a fresh database.
Report RunSchedule(PostgresTestServer& pg, uint32_t seed, int steps) {
  Report report;
  const std::string database = absl::StrCat("fault_", seed, "_", FreeLoopbackPort());
  auto uri = pg.NewDatabase(database);
  EXPECT_TRUE(uri.ok()) << uri.status();
  if (!uri.ok()) return report;
  const int ports[2] = {FreeLoopbackPort(), FreeLoopbackPort()};
  const absl::Duration lease = absl::Seconds(1);
  std::mutex procs_mu;
  std::unique_ptr<Process> procs[2];
  int incarnation = 0;
  // Slot 1's coordinator runs with its clock an hour ahead (libfaketime): leases are kept by the
  // database's clock, so the skew must change nothing.
  auto start = [&](int slot) {
    std::vector<std::string> args = {absl::StrCat("--listen=127.0.0.1:", ports[slot]),
                                     "--metrics_listen=",
                                     absl::StrCat("--db=", *uri),
                                     "--leader_lease=1s",
                                     absl::StrCat("--leader_name=c", slot, "-", ++incarnation),
                                     "--lease_ttl=5s"};
    std::string binary = CoordinatorBinary();
    if (slot == 1) {
      args.insert(args.begin(), {"-m", "-f", "+1h", binary});
      binary = "/usr/bin/faketime";  // Debian's faketime (scripts/setup.sh)
    }
    auto p = Process::Start(
        binary, args, Process::Options{.echo_stderr = std::getenv("MESA_FAULT_ECHO") != nullptr});
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) procs[slot] = std::move(*p);
  };
  auto alive = [&](int slot) {
    return procs[slot] != nullptr && !procs[slot]->Wait(absl::ZeroDuration()).ok();
  };
  auto leader = [&]() -> int {
    for (int slot : {0, 1}) {
      if (alive(slot) && absl::StrContains(procs[slot]->Stdout(), "listening on")) return slot;
    }
    return -1;
  };
  start(0);
  EXPECT_TRUE(procs[0]->WaitForLinePrefix("listening on", absl::Seconds(20)).ok());
  start(1);

  // Each client owns a channel over both addresses and, like the worker agent, opens a new one
  // after a call fails (gRPC's channel, once every address failed, was seen to take seconds to
  // try the new leader's again; a new channel connects at once).
  const std::string addresses = absl::StrCat("127.0.0.1:", ports[0], ",127.0.0.1:", ports[1]);
  auto new_channel = [&] {
    return cli::JobClient::OpenChannel(addresses, grpc::InsecureChannelCredentials());
  };
  auto channel = new_channel();
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<std::string, std::string> acked;  // client_job_id -> job id
  std::set<std::string> cancel_acked;        // job ids
  std::set<std::string> success_acked;       // job ids
  std::atomic<int> double_run{0};
  std::map<std::string, std::string> holder;          // job id -> the worker running it now
  std::map<std::string, v1::JobState> terminal_seen;  // job id -> the end state first seen
  std::atomic<int> backwards{0};
  absl::Time last_ack = absl::Now();

  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      auto stub = v1::JobService::NewStub(new_channel());
      for (int i = 0; !stop; ++i) {
        const std::string cid = absl::StrCat("s", seed, "-t", t, "-", i);
        // Resubmit the same key until acknowledged: idempotency makes it exactly once.
        while (!stop) {
          v1::SubmitJobRequest request;
          *request.mutable_spec() = TinyTrainSpec("fault");
          request.set_client_job_id(cid);
          grpc::ClientContext context;
          SetDeadline(context, absl::Seconds(3));
          Job job;
          const grpc::Status st = stub->SubmitJob(&context, request, &job);
          if (st.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            acked[cid] = job.id();
            last_ack = absl::Now();
            break;
          }
          stub = v1::JobService::NewStub(new_channel());
          absl::SleepFor(absl::Milliseconds(50));
        }
        absl::SleepFor(absl::Milliseconds(20));
      }
    });
  }
  threads.emplace_back([&] {  // cancels
    auto stub = v1::JobService::NewStub(new_channel());
    std::mt19937 rng(seed * 7919);
    while (!stop) {
      absl::SleepFor(absl::Milliseconds(150));
      std::string id;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (acked.empty()) continue;
        auto it = acked.begin();
        std::advance(it, rng() % acked.size());
        id = it->second;
      }
      v1::CancelJobRequest request;
      request.set_id(id);
      request.set_reason("fault test");
      grpc::ClientContext context;
      SetDeadline(context, absl::Seconds(3));
      Job job;
      if (stub->CancelJob(&context, request, &job).ok()) {
        std::lock_guard<std::mutex> lock(mu);
        cancel_acked.insert(id);
      } else {
        stub = v1::JobService::NewStub(new_channel());
      }
    }
  });
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      auto worker = std::make_unique<FakeWorker>(new_channel(), absl::StrCat("w", w), 2);
      bool registered = false;
      while (!stop) {
        if (!registered) {
          // A new channel, as the agent opens after a failure (its attempts all finished).
          worker = std::make_unique<FakeWorker>(new_channel(), absl::StrCat("w", w), 2);
          registered = worker->Register().ok();
          if (!registered) absl::SleepFor(absl::Milliseconds(200));
          continue;
        }
        absl::StatusOr<v1::Assignment> a = worker->WaitForAssignment(absl::Seconds(1));
        if (!a.ok()) {
          if (a.status().code() != absl::StatusCode::kDeadlineExceeded) registered = false;
          continue;
        }
        const std::string me = absl::StrCat("w", w);
        {
          std::lock_guard<std::mutex> lock(mu);
          if (success_acked.count(a->job_id()) > 0) ++double_run;  // finished, yet run again
          auto [it, fresh] = holder.emplace(a->job_id(), me);
          if (!fresh && it->second != me) ++double_run;  // running on two workers at once
          it->second = me;
        }
        // The attempt ends here, finished or abandoned (a fake worker that loses the coordinator
        // starts afresh, as an agent whose trainer died would).
        auto release = [&] {
          std::lock_guard<std::mutex> lock(mu);
          if (holder.count(a->job_id()) > 0 && holder[a->job_id()] == me) holder.erase(a->job_id());
        };
        v1::Progress progress;
        progress.set_step(1);
        if (!worker->Running(*a, progress).ok()) {
          release();
          registered = false;
          continue;
        }
        v1::JobResult result;
        result.set_final_loss(1.f);
        if (worker->Succeed(*a, result).ok()) {
          std::lock_guard<std::mutex> lock(mu);
          success_acked.insert(a->job_id());
        } else {
          registered = false;
        }
        release();
      }
    });
  }

  threads.emplace_back([&] {  // watches ended jobs: an end state never changes
    auto stub = v1::JobService::NewStub(new_channel());
    std::mt19937 pick(seed * 104729);
    while (!stop) {
      absl::SleepFor(absl::Milliseconds(100));
      std::string id;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (acked.empty()) continue;
        auto it = acked.begin();
        std::advance(it, pick() % acked.size());
        id = it->second;
      }
      v1::GetJobRequest request;
      request.set_id(id);
      grpc::ClientContext context;
      SetDeadline(context, absl::Seconds(3));
      Job got;
      if (!stub->GetJob(&context, request, &got).ok()) {
        stub = v1::JobService::NewStub(new_channel());
        continue;
      }
      const v1::JobState st = got.state();
      if (st != v1::JOB_STATE_SUCCEEDED && st != v1::JOB_STATE_FAILED &&
          st != v1::JOB_STATE_CANCELLED) {
        std::lock_guard<std::mutex> lock(mu);
        if (terminal_seen.count(id) > 0) ++backwards;  // ended, then running again
        continue;
      }
      std::lock_guard<std::mutex> lock(mu);
      auto [it, fresh] = terminal_seen.emplace(id, st);
      if (!fresh && it->second != st) ++backwards;
    }
  });

  // The nemesis, with a supervisor that restarts stopped coordinators.
  std::mt19937 rng(seed);
  // Every kind of fault in each run of four, in a seeded order.
  std::vector<int> kinds = {0, 1, 2, 3};
  std::shuffle(kinds.begin(), kinds.end(), rng);
  for (int step = 0; step < steps; ++step) {
    absl::SleepFor(absl::Milliseconds(1500 + rng() % 1500));
    const int l = leader();
    const int fault = kinds[step % 4];
    const absl::Time at = absl::Now();
    if (fault == 0 && l >= 0) {
      (void)procs[l]->Kill();
    } else if (fault == 1 && l >= 0) {
      (void)procs[l]->Signal(SIGSTOP);
      absl::SleepFor(lease * 2 + absl::Milliseconds(500));
      (void)procs[l]->Signal(SIGCONT);
    } else if (fault == 2) {
      EXPECT_TRUE(pg.Restart().ok());
    } else {
      // The store refuses writes for 2 s, as a full disk would.
      EXPECT_TRUE(pg.RefuseWrites(database, true).ok());
      absl::SleepFor(absl::Seconds(2));
      EXPECT_TRUE(pg.RefuseWrites(database, false).ok());
    }
    ++report.faults;
    const absl::Time done = absl::Now();  // failover counts from the fault's end
    // Until a submission is acknowledged after the fault: supervise, bounded.
    bool led = false;
    while (absl::Now() - at < absl::Seconds(30)) {
      for (int slot : {0, 1}) {
        if (!alive(slot)) start(slot);
      }
      // A new leader, or the old one still leading (a database restart it rode out).
      if (!led && leader() >= 0) {
        led = true;
        report.longest_takeover = std::max(report.longest_takeover, absl::Now() - done);
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        if (led && last_ack > done) {
          report.longest_client_gap = std::max(report.longest_client_gap, last_ack - done);
          std::cerr << "seed " << seed << " fault " << step << " ("
                    << (fault == 0   ? "kill -9 leader"
                        : fault == 1 ? "pause leader"
                        : fault == 2 ? "restart postgres"
                                     : "writes refused")
                    << "): the next submission acknowledged after " << (last_ack - done) << "\n";
          break;
        }
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  absl::SleepFor(absl::Seconds(1));
  stop = true;
  for (auto& t : threads) t.join();

  // The checker, against whichever coordinator leads now.
  auto stub = v1::JobService::NewStub(channel);
  std::lock_guard<std::mutex> lock(mu);
  report.acknowledged = static_cast<int>(acked.size());
  report.double_run = double_run;
  for (const auto& [cid, id] : acked) {
    v1::GetJobRequest request;
    request.set_id(id);
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    Job got;
    if (!stub->GetJob(&context, request, &got).ok() || got.client_job_id() != cid) {
      ++report.lost;
      continue;
    }
    if (terminal_seen.count(id) > 0 && terminal_seen[id] != got.state()) ++backwards;
    // A success acknowledged stays; an acknowledged cancel of a job not acknowledged finished
    // ends CANCELLED (the coordinator refuses to cancel a finished job).
    if (success_acked.count(id) > 0) {
      if (got.state() != v1::JOB_STATE_SUCCEEDED && cancel_acked.count(id) == 0) ++report.lost;
    } else if (cancel_acked.count(id) > 0 &&
               (got.state() == v1::JOB_STATE_QUEUED || got.state() == v1::JOB_STATE_RETRYING)) {
      // Cancelled, yet waiting to run (a running one may still wait for its worker's confirmation:
      // the fake workers never confirm).
      ++report.cancel_violations;
    }
  }
  report.backwards = backwards;
  report.watched = static_cast<int>(terminal_seen.size());
  for (int slot : {0, 1}) {
    if (procs[slot]) (void)procs[slot]->Terminate(absl::Seconds(5));
  }
  return report;
}

TEST(FaultInjectionTest, NoAcknowledgedJobIsLostOrRunTwiceUnderKillsPausesAndDatabaseRestarts) {
  auto pg = PostgresTestServer::Start();
  ASSERT_TRUE(pg.ok()) << pg.status();
  std::vector<uint32_t> seeds = {1, 2};
  if (const char* s = std::getenv("MESA_FAULT_SEED")) seeds = {static_cast<uint32_t>(std::atoi(s))};
  int steps = 5;
  if (const char* s = std::getenv("MESA_FAULT_STEPS")) steps = std::max(1, std::atoi(s));
  for (uint32_t seed : seeds) {
    const Report r = RunSchedule(**pg, seed, steps);
    std::cerr << "FAULTS seed " << seed << ": " << r.faults << " faults, " << r.acknowledged
              << " acknowledged, " << r.lost << " lost, " << r.double_run << " double-run, "
              << r.cancel_violations << " cancels not applied, " << r.backwards
              << " end states changed (of " << r.watched << " watched), longest takeover "
              << r.longest_takeover << ", longest gap to the next acknowledged submission "
              << r.longest_client_gap << "\n";
    EXPECT_GT(r.acknowledged, 0) << "seed " << seed;
    EXPECT_EQ(r.lost, 0) << "seed " << seed;
    EXPECT_EQ(r.double_run, 0) << "seed " << seed;
    EXPECT_EQ(r.cancel_violations, 0) << "seed " << seed;
    EXPECT_EQ(r.backwards, 0) << "seed " << seed;
    EXPECT_GT(r.watched, 0) << "seed " << seed << ": the watcher saw no ended job";
    EXPECT_LT(r.longest_takeover, absl::Seconds(10)) << "seed " << seed;
    EXPECT_LT(r.longest_client_gap, absl::Seconds(10)) << "seed " << seed;
  }
}

}  // namespace
}  // namespace mesa::testing
