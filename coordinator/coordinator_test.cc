// The coordinator core with an injected clock: leases, retries, restart and reconciliation, without
// sleeping. The background threads are off; the test runs scheduling passes and lease checks.
#include "coordinator/coordinator.h"

#include <sqlite3.h>

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/utf8.h"
#include "coordinator/test_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

using mesa::v1::JobState;

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath("coord.db");
    Open();
  }
  void Open() {
    CoordinatorOptions o;
    o.lease_ttl = absl::Seconds(10);
    o.max_loaded_finished_jobs = max_loaded_finished_jobs_;
    o.checkpoint_root = checkpoint_root_;
    o.max_log_bytes_per_job = max_log_bytes_per_job_;
    OpenTestCoordinator(path_, &clock_, &metrics_, o, &store_, &c_);
  }
  void Restart() {
    c_.reset();
    store_.reset();
    Open();
  }
  std::string Submit(const mesa::v1::JobSpec& spec) {
    mesa::v1::SubmitJobRequest r;
    *r.mutable_spec() = spec;
    auto j = c_->SubmitJob(r);
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? j->id() : "";
  }
  std::string Register(const std::string& id, int gpus,
                       std::vector<std::pair<std::string, int>> running = {}, int cpu_slots = 0,
                       mesa::v1::RegisterWorkerResponse* resp = nullptr) {
    mesa::v1::RegisterWorkerRequest r;
    r.set_worker_id(id);
    for (int i = 0; i < gpus; ++i) r.mutable_resources()->add_gpus()->set_index(i);
    r.mutable_resources()->set_cpu_slots(cpu_slots);
    if (auto held = leases_.find(id); held != leases_.end()) r.set_lease_id(held->second);
    for (auto& [job, attempt] : running) {
      auto* ra = r.add_running();
      ra->set_job_id(job);
      ra->set_attempt(attempt);
    }
    auto out = c_->RegisterWorker(r);
    EXPECT_TRUE(out.ok()) << out.status();
    if (resp != nullptr && out.ok()) *resp = *out;
    if (out.ok()) leases_[id] = out->lease_id();
    return out.ok() ? out->lease_id() : "";
  }
  mesa::v1::HeartbeatResponse Beat(const std::string& worker, const std::string& lease,
                                   std::vector<std::pair<std::string, int>> running = {},
                                   int64_t acked = 0) {
    mesa::v1::HeartbeatRequest r;
    r.set_worker_id(worker);
    r.set_lease_id(lease);
    for (auto& [job, attempt] : running) {
      auto* ra = r.add_running();
      ra->set_job_id(job);
      ra->set_attempt(attempt);
    }
    r.set_acked_delivery(acked);
    auto out = c_->Heartbeat(r, nullptr);
    EXPECT_TRUE(out.ok()) << out.status();
    return *out;
  }
  absl::Status Update(const std::string& worker, const std::string& job, int attempt,
                      mesa::v1::AttemptPhase phase,
                      mesa::v1::FailureKind kind = mesa::v1::FAILURE_KIND_UNSPECIFIED) {
    mesa::v1::UpdateAttemptRequest r;
    r.set_worker_id(worker);
    r.set_lease_id(leases_[worker]);
    r.set_job_id(job);
    r.set_attempt(attempt);
    r.set_phase(phase);
    r.set_failure_kind(kind);
    r.set_message("boom");
    return c_->UpdateAttempt(r).status();
  }
  JobState State(const std::string& id) { return c_->GetJob(id)->state(); }
  std::vector<mesa::v1::JobEvent> Events(const std::string& id) {
    std::vector<mesa::v1::JobEvent> out;
    mesa::v1::WatchJobRequest w;
    w.set_id(id);
    // A finished job's watch replays and ends; used only on finished jobs here.
    EXPECT_TRUE(c_->WatchJob(
                      w,
                      [&](const mesa::v1::JobEvent& e) {
                        out.push_back(e);
                        return true;
                      },
                      nullptr)
                    .ok());
    return out;
  }

  std::string path_;
  int64_t max_loaded_finished_jobs_ = 10000;
  std::string checkpoint_root_;
  int64_t max_log_bytes_per_job_ = kMaxLogBytesPerJob;
  std::map<std::string, std::string> leases_;  // worker -> its latest lease
  FakeClock clock_;
  Metrics metrics_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> c_;
};

TEST_F(CoordinatorTest, EveryAttemptGetsTheSameCheckpointRoot) {
  checkpoint_root_ = "/shared/ckpt";
  Restart();
  auto spec = ValidTrainSpec("root", 1);
  spec.set_max_retries(1);
  const std::string id = Submit(spec);
  auto own = ValidTrainSpec("own-dir", 1);
  own.set_max_retries(1);
  // With a checkpoint root, a named directory lies inside it (confined paths).
  own.mutable_checkpoint()->set_dir("/shared/ckpt/named/own-dir");
  Submit(own);
  const std::string lease_a = Register("a", 2);
  ASSERT_EQ(c_->RunSchedulingPass(), 2);
  auto hb = Beat("a", lease_a);
  ASSERT_EQ(hb.assignments_size(), 2);
  for (const auto& a : hb.assignments()) {
    EXPECT_EQ(a.checkpoint_dir(),
              a.job_id() == id ? "/shared/ckpt/" + id : "/shared/ckpt/named/own-dir");
    EXPECT_EQ(a.checkpoint_root(), "/shared/ckpt");  // the worker checks it again at use
  }
  // The worker is lost; the retry elsewhere gets the same root.
  clock_.Advance(absl::Seconds(11));
  c_->CheckLeases();
  const std::string lease_b = Register("b", 2);
  ASSERT_EQ(c_->RunSchedulingPass(), 2);
  hb = Beat("b", lease_b);
  ASSERT_EQ(hb.assignments_size(), 2);
  for (const auto& a : hb.assignments()) {
    EXPECT_EQ(a.attempt(), 2);
    EXPECT_EQ(a.checkpoint_dir(),
              a.job_id() == id ? "/shared/ckpt/" + id : "/shared/ckpt/named/own-dir");
  }
}

TEST_F(CoordinatorTest, RegistrationUnderALiveWorkersIdDoesNotTakeItsLeaseOrFailItsAttempts) {
  // Issue 13 (2): three RegisterWorker calls with a live worker's id replaced its lease and failed
  // its running job for good.
  auto spec = ValidTrainSpec("victim", 1);
  spec.set_max_retries(1);
  const std::string id = Submit(spec);
  const std::string lease_a = Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  ASSERT_EQ(Beat("a", lease_a).assignments_size(), 1);
  ASSERT_TRUE(Update("a", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  for (int i = 0; i < 3; ++i) {
    mesa::v1::RegisterWorkerRequest impostor;
    impostor.set_worker_id("a");
    impostor.mutable_resources()->add_gpus()->set_index(0);
    if (i == 2) impostor.set_lease_id("a-0-1");  // a guessed lease is no better
    auto out = c_->RegisterWorker(impostor);
    ASSERT_EQ(out.status().code(), absl::StatusCode::kAlreadyExists) << out.status();
    EXPECT_NE(out.status().message().find("live lease"), std::string::npos) << out.status();
  }
  auto job = c_->GetJob(id);
  EXPECT_EQ(job->state(), JobState::JOB_STATE_RUNNING);
  EXPECT_EQ(job->attempts(), 1);
  // The real worker keeps its lease and keeps reporting.
  EXPECT_FALSE(Beat("a", lease_a, {{id, 1}}).reregister());
  EXPECT_TRUE(Update("a", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  // The holder may re-register with its lease (what the agent does), keeping its attempt.
  const std::string lease_a2 = Register("a", 1, {{id, 1}});
  EXPECT_NE(lease_a2, lease_a);
  EXPECT_EQ(c_->GetJob(id)->state(), JobState::JOB_STATE_RUNNING);
  // Once the lease lapses (the holder died), the id is free to register again.
  clock_.Advance(absl::Seconds(11));
  c_->CheckLeases();
  leases_.erase("a");
  EXPECT_FALSE(Register("a", 1).empty());
}

TEST_F(CoordinatorTest, LeaseExpiryRetriesFromCheckpointThenFails) {
  auto spec = ValidTrainSpec("retry", 2);
  spec.set_max_retries(1);
  const std::string id = Submit(spec);
  const std::string lease_a = Register("a", 2);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  auto hb = Beat("a", lease_a);
  ASSERT_EQ(hb.assignments_size(), 1);
  EXPECT_EQ(hb.assignments(0).attempt(), 1);
  EXPECT_EQ(hb.assignments(0).world_size(), 2);
  mesa::v1::UpdateAttemptRequest u;
  u.set_worker_id("a");
  u.set_lease_id(lease_a);
  u.set_job_id(id);
  u.set_attempt(1);
  u.set_phase(mesa::v1::ATTEMPT_PHASE_RUNNING);
  u.set_checkpoint_path("/ckpt/step-50");
  ASSERT_TRUE(c_->UpdateAttempt(u).ok());
  EXPECT_EQ(State(id), JobState::JOB_STATE_RUNNING);

  clock_.Advance(absl::Seconds(9));
  c_->CheckLeases();
  EXPECT_EQ(State(id), JobState::JOB_STATE_RUNNING);  // lease still valid
  clock_.Advance(absl::Seconds(2));
  c_->CheckLeases();
  auto job = c_->GetJob(id);
  EXPECT_EQ(job->state(), JobState::JOB_STATE_RETRYING);
  // The lost worker must register again; a new worker takes the retry from the checkpoint.
  EXPECT_TRUE(Beat("a", lease_a).reregister());
  const std::string lease_b = Register("b", 2);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  hb = Beat("b", lease_b);
  ASSERT_EQ(hb.assignments_size(), 1);
  EXPECT_EQ(hb.assignments(0).attempt(), 2);
  // A report from the old attempt is stale.
  EXPECT_EQ(Update("a", id, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED).code(),
            absl::StatusCode::kFailedPrecondition);

  clock_.Advance(absl::Seconds(11));
  c_->CheckLeases();
  job = c_->GetJob(id);
  EXPECT_EQ(job->state(), JobState::JOB_STATE_FAILED);
  EXPECT_NE(job->failure_reason().find("worker b lost"), std::string::npos)
      << job->failure_reason();
  EXPECT_NE(job->failure_reason().find("no retries left"), std::string::npos)
      << job->failure_reason();
  bool saw_retrying = false;
  int64_t last = 0;
  for (const auto& e : Events(id)) {
    EXPECT_GT(e.sequence(), last);
    last = e.sequence();
    if (e.state() == JobState::JOB_STATE_RETRYING &&
        e.type() == mesa::v1::JOB_EVENT_TYPE_STATE_CHANGED) {
      saw_retrying = true;
      EXPECT_NE(e.message().find("worker a lost"), std::string::npos) << e.message();
    }
  }
  EXPECT_TRUE(saw_retrying);
}

// Finished jobs beyond the bound keep only their index row in memory and are read back from the
// store, complete, when asked for.
TEST_F(CoordinatorTest, FinishedJobsInMemoryAreBounded) {
  max_loaded_finished_jobs_ = 2;
  Restart();
  std::vector<std::string> ids;
  std::vector<mesa::v1::Job> finished;
  for (int i = 0; i < 6; ++i) {
    mesa::v1::JobSpec spec = ValidTrainSpec(absl::StrCat("bounded-", i), 1);
    (*spec.mutable_labels())["batch"] = i % 2 == 0 ? "even" : "odd";
    ids.push_back(Submit(spec));
    mesa::v1::CancelJobRequest cancel;
    cancel.set_id(ids.back());
    cancel.set_reason(absl::StrCat("done ", i));
    ASSERT_TRUE(c_->CancelJob(cancel).ok());
    finished.push_back(*c_->GetJob(ids.back()));
  }
  EXPECT_LE(c_->loaded_finished_jobs(), 3);  // the bound, plus the job the last call read
  for (int i = 0; i < 6; ++i) {
    auto job = c_->GetJob(ids[i]);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*job, finished[i])) << ids[i];
    EXPECT_LE(c_->loaded_finished_jobs(), 3);
  }
  // Watching a dropped job replays all its events; listing by label reads dropped jobs back.
  const std::vector<mesa::v1::JobEvent> events = Events(ids[0]);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().sequence(), finished[0].last_sequence());
  EXPECT_EQ(events.back().state(), JobState::JOB_STATE_CANCELLED);
  mesa::v1::ListJobsRequest list;
  (*list.mutable_labels())["batch"] = "odd";
  auto odd = c_->ListJobs(list);
  ASSERT_TRUE(odd.ok()) << odd.status();
  ASSERT_EQ(odd->jobs_size(), 3);
  EXPECT_EQ(odd->jobs(0).id(), ids[1]);
  EXPECT_EQ(odd->jobs(0).failure_reason(), finished[1].failure_reason());
  // The label filter read every job back; the next call trims the cache to the bound again.
  ASSERT_TRUE(c_->GetJob(ids[5]).ok());
  EXPECT_LE(c_->loaded_finished_jobs(), 3);
}

// After a restart no finished job is in memory: listing by label reads them back, at most 256 per
// call (the coordinator's lock is held meanwhile), and hands out a token to go on; what was read
// keeps its labels once dropped again, so the next listing reads only the matches.
TEST_F(CoordinatorTest, ListingFinishedJobsByLabelReadsTheStoreInBoundedCalls) {
  max_loaded_finished_jobs_ = 4;
  Restart();
  for (int i = 0; i < 600; ++i) {
    mesa::v1::JobSpec spec = ValidTrainSpec(absl::StrCat("listed-", i), 1);
    (*spec.mutable_labels())["team"] = i % 100 == 7 ? "rare" : "common";
    const std::string id = Submit(spec);
    mesa::v1::CancelJobRequest cancel;
    cancel.set_id(id);
    ASSERT_TRUE(c_->CancelJob(cancel).ok());
  }
  Restart();
  auto list_all = [&](int* calls) {
    mesa::v1::ListJobsRequest list;
    (*list.mutable_labels())["team"] = "rare";
    std::vector<std::string> ids;
    *calls = 0;
    while (true) {
      auto page = c_->ListJobs(list);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) break;
      ++*calls;
      for (const mesa::v1::Job& j : page->jobs()) ids.push_back(j.id());
      if (page->next_page_token().empty() || *calls > 100) break;
      list.set_page_token(page->next_page_token());
    }
    return ids;
  };
  int calls = 0;
  std::vector<std::string> rare = list_all(&calls);
  ASSERT_EQ(rare.size(), 6u);
  EXPECT_EQ(calls, 3);  // 600 reads in calls of at most 256
  for (const std::string& id : rare) EXPECT_EQ(c_->GetJob(id)->spec().labels().at("team"), "rare");
  EXPECT_EQ(list_all(&calls), rare);
  EXPECT_EQ(calls, 1);  // labels kept: only the six matches are read
  // Newest first: the same jobs in reverse, across pages of two.
  mesa::v1::ListJobsRequest newest;
  newest.set_newest_first(true);
  newest.set_page_size(2);
  (*newest.mutable_labels())["team"] = "rare";
  std::vector<std::string> reversed;
  for (int pages = 0; pages < 10; ++pages) {
    auto page = c_->ListJobs(newest);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const mesa::v1::Job& j : page->jobs()) reversed.push_back(j.id());
    if (page->next_page_token().empty()) break;
    newest.set_page_token(page->next_page_token());
  }
  EXPECT_EQ(reversed, std::vector<std::string>(rare.rbegin(), rare.rend()));
}

TEST_F(CoordinatorTest, WorkerInputIsBounded) {
  const std::string job = Submit(ValidTrainSpec("bounded", 1));
  Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  // Rendezvous keys per attempt.
  mesa::v1::PutRendezvousRequest put;
  put.set_worker_id("a");
  put.set_lease_id(leases_["a"]);
  put.set_job_id(job);
  put.set_attempt(1);
  put.set_value("v");
  for (int i = 0; i < 4096; ++i) {
    put.set_key(absl::StrCat("k", i));
    ASSERT_TRUE(c_->PutRendezvous(put).ok()) << i;
  }
  put.set_key("one-too-many");
  EXPECT_EQ(c_->PutRendezvous(put).code(), absl::StatusCode::kResourceExhausted);
  put.set_key("k7");  // overwriting an existing key is fine
  EXPECT_TRUE(c_->PutRendezvous(put).ok());
  // Checkpoint paths are refused past 4 KiB; failure messages are kept, truncated.
  mesa::v1::UpdateAttemptRequest r;
  r.set_worker_id("a");
  r.set_lease_id(leases_["a"]);
  r.set_job_id(job);
  r.set_attempt(1);
  r.set_phase(mesa::v1::ATTEMPT_PHASE_RUNNING);
  r.set_checkpoint_path(std::string(5000, 'p'));
  EXPECT_EQ(c_->UpdateAttempt(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.clear_checkpoint_path();
  r.set_phase(mesa::v1::ATTEMPT_PHASE_FAILED);
  r.set_failure_kind(mesa::v1::FAILURE_KIND_USER);
  r.set_message(std::string(100000, 'm'));
  ASSERT_TRUE(c_->UpdateAttempt(r).ok());
  const std::string reason = c_->GetJob(job)->failure_reason();
  EXPECT_LT(reason.size(), 17000u);
  EXPECT_TRUE(absl::EndsWith(reason, "(truncated)")) << reason.substr(reason.size() - 40);
  EXPECT_EQ(State(job), JobState::JOB_STATE_FAILED);
}

TEST_F(CoordinatorTest, WorkerCallsNeedTheWorkersCurrentLease) {
  // Issue 13: a plain client made a running job SUCCEEDED, and published rendezvous values, by
  // naming a worker of the attempt.
  const std::string id = Submit(ValidTrainSpec("leased", 1));
  const std::string lease = Register("a", 1);
  Register("b", 1);  // live, with a lease, but not a worker of this attempt
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  const std::string runner = c_->GetJob(id)->workers(0);
  const std::string other = runner == "a" ? "b" : "a";
  mesa::v1::UpdateAttemptRequest forged;
  forged.set_worker_id(runner);
  forged.set_job_id(id);
  forged.set_attempt(1);
  forged.set_phase(mesa::v1::ATTEMPT_PHASE_SUCCEEDED);
  forged.mutable_result()->set_final_loss(1e-4f);
  for (const std::string& lease_id : {std::string(), std::string("guessed"), leases_[other]}) {
    forged.set_lease_id(lease_id);
    EXPECT_EQ(c_->UpdateAttempt(forged).status().code(), absl::StatusCode::kAborted) << lease_id;
  }
  forged.set_worker_id(other);  // a live worker with its own lease, of another attempt
  forged.set_lease_id(leases_[other]);
  EXPECT_EQ(c_->UpdateAttempt(forged).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(State(id), JobState::JOB_STATE_SCHEDULED) << "nothing forged was applied";
  mesa::v1::PutRendezvousRequest put;
  put.set_job_id(id);
  put.set_attempt(1);
  put.set_key("job.1.tcp");
  put.set_value("10.0.0.66:1");
  put.set_worker_id(runner);
  EXPECT_EQ(c_->PutRendezvous(put).code(), absl::StatusCode::kAborted);
  mesa::v1::GetRendezvousRequest get;
  get.set_job_id(id);
  get.set_attempt(1);
  get.set_key("job.1.tcp");
  get.set_worker_id(runner);
  EXPECT_EQ(c_->GetRendezvous(get, nullptr).status().code(), absl::StatusCode::kAborted);
  // The real worker with its lease: accepted.
  put.set_lease_id(leases_[runner]);
  EXPECT_TRUE(c_->PutRendezvous(put).ok());
  get.set_lease_id(leases_[runner]);
  EXPECT_EQ(c_->GetRendezvous(get, nullptr)->value(), "10.0.0.66:1");
  forged.set_worker_id(runner);
  forged.set_lease_id(leases_[runner]);
  EXPECT_TRUE(c_->UpdateAttempt(forged).ok());
  (void)lease;
}

TEST_F(CoordinatorTest, AnAttemptTheWorkerNoLongerListsEndsAsInfra) {
  // Issue 13: an attempt whose reports could not be delivered stayed RUNNING with no trainer while
  // its worker kept heartbeating; once the worker stops listing it, it is lost.
  auto spec = ValidTrainSpec("vanished", 1);
  spec.set_max_retries(0);  // no retry left: FAILED, with the reason
  const std::string id = Submit(spec);
  const std::string lease = Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  auto hb = Beat("a", lease);
  ASSERT_EQ(hb.assignments_size(), 1);
  const int64_t seq = hb.delivery_seq();
  ASSERT_TRUE(Update("a", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  Beat("a", lease, {{id, 1}}, seq);
  EXPECT_EQ(State(id), JobState::JOB_STATE_RUNNING) << "listed: still running";
  Beat("a", lease, {}, seq);
  auto job = c_->GetJob(id);
  EXPECT_EQ(job->state(), JobState::JOB_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(job->failure_reason(), "worker a no longer runs attempt 1"))
      << job->failure_reason();
}

TEST_F(CoordinatorTest, FreeTextInRequestsIsBoundedAndNotEchoed) {
  // Issue 13: a 15 MiB cancel reason was stored, and every later listing failed for everyone.
  const std::string id = Submit(ValidTrainSpec("bounded-text", 1));
  mesa::v1::CancelJobRequest cancel;
  cancel.set_id(id);
  cancel.set_reason(std::string(15 << 20, 'r'));
  auto refused = c_->CancelJob(cancel);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "reason: at most 1024 bytes"));
  EXPECT_LT(refused.status().message().size(), 200u) << "the input is not echoed";
  EXPECT_EQ(State(id), JobState::JOB_STATE_QUEUED);
  cancel.set_reason("enough");
  EXPECT_TRUE(c_->CancelJob(cancel).ok());
  mesa::v1::ListJobsRequest list;
  list.set_page_token(std::string(1 << 20, '9'));
  auto listed = c_->ListJobs(list);
  EXPECT_EQ(listed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(listed.status().message().size(), 200u);
  list.set_page_token("not-a-number");
  listed = c_->ListJobs(list);
  EXPECT_EQ(listed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(absl::StrContains(listed.status().message(), "not-a-number"));
  list.clear_page_token();
  (*list.mutable_labels())[std::string(100, 'k')] = "v";
  EXPECT_EQ(c_->ListJobs(list).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, StoredTextIsValidUtf8EvenWhenReportsAreNotOrAreCut) {
  // Issue 13: a message cut inside a multi-byte character, or raw Latin-1 bytes, stored as they
  // came made every later read of the job fail to serialise.
  const std::string id = Submit(ValidTrainSpec("utf8", 1));
  const std::string lease = Register("a", 2);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  mesa::v1::UpdateAttemptRequest r;
  r.set_worker_id("a");
  r.set_lease_id(lease);
  r.set_job_id(id);
  r.set_attempt(1);
  r.set_phase(mesa::v1::ATTEMPT_PHASE_FAILED);
  r.set_failure_kind(mesa::v1::FAILURE_KIND_USER);
  // 16,383 bytes, then a 3-byte euro sign across the 16,384-byte limit, then a Latin-1 byte.
  r.set_message(std::string(16383, 'm') + "\xE2\x82\xAC caf\xE9");
  auto* log = r.add_logs();
  log->set_stream("stderr");
  log->set_text(std::string(65535, 'l') + "\xE2\x82\xAC");
  r.add_logs()->set_text("caf\xE9.bin");
  ASSERT_TRUE(c_->UpdateAttempt(r).ok());
  for (int round = 0; round < 2; ++round) {  // and after a restart, from the store
    auto job = c_->GetJob(id);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->state(), JobState::JOB_STATE_FAILED);
    EXPECT_TRUE(base::IsValidUtf8(job->failure_reason()));
    EXPECT_NE(job->failure_reason().find("(truncated)"), std::string::npos);
    std::string bytes;
    EXPECT_TRUE(job->SerializeToString(&bytes));
    mesa::v1::Job parsed;
    EXPECT_TRUE(parsed.ParseFromString(bytes));
    mesa::v1::GetJobLogsRequest logs;
    logs.set_id(id);
    int lines = 0;
    ASSERT_TRUE(c_->GetJobLogs(
                      logs,
                      [&](const mesa::v1::LogLine& line) {
                        ++lines;
                        EXPECT_TRUE(base::IsValidUtf8(line.text()));
                        EXPECT_LE(line.text().size(), 65536u);
                        return true;
                      },
                      nullptr)
                    .ok());
    EXPECT_EQ(lines, 2);
    Restart();
  }
}

TEST_F(CoordinatorTest, ReportsAreBoundedResultsAndLogVolumePerUpdateAndPerJobAcrossRestarts) {
  // Issue 13 (5): 86 MB/s of log text was accepted and stored without end.
  max_log_bytes_per_job_ = 1000;
  Restart();
  const std::string id = Submit(ValidTrainSpec("chatty", 1));
  Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  auto update = [&](int lines, size_t bytes_each) {
    mesa::v1::UpdateAttemptRequest r;
    r.set_worker_id("a");
    r.set_lease_id(leases_["a"]);
    r.set_job_id(id);
    r.set_attempt(1);
    r.set_phase(mesa::v1::ATTEMPT_PHASE_RUNNING);
    for (int i = 0; i < lines; ++i) r.add_logs()->set_text(std::string(bytes_each, 'x'));
    return c_->UpdateAttempt(r).status();
  };
  // Per call: more lines than the agent ever sends is refused, naming the limit.
  absl::Status too_many = update(kMaxLogLinesPerUpdate + 1, 1);
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("at most 1000 lines"), std::string::npos) << too_many;
  {
    // A final result is bounded too: metric count, metric names, checkpoint path.
    mesa::v1::UpdateAttemptRequest r;
    r.set_worker_id("a");
    r.set_lease_id(leases_["a"]);
    r.set_job_id(id);
    r.set_attempt(1);
    r.set_phase(mesa::v1::ATTEMPT_PHASE_RUNNING);
    for (int i = 0; i <= kMaxResultMetrics; ++i) {
      (*r.mutable_result()->mutable_metrics())[absl::StrCat("m", i)] = i;
    }
    EXPECT_EQ(c_->UpdateAttempt(r).status().code(), absl::StatusCode::kInvalidArgument);
    r.mutable_result()->clear_metrics();
    (*r.mutable_result()->mutable_metrics())[std::string(kMaxResultMetricNameBytes + 1, 'n')] = 1;
    EXPECT_EQ(c_->UpdateAttempt(r).status().code(), absl::StatusCode::kInvalidArgument);
    r.mutable_result()->clear_metrics();
    r.mutable_result()->set_checkpoint_path(std::string(1 << 20, 'p'));
    absl::Status path = c_->UpdateAttempt(r).status();
    EXPECT_EQ(path.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_LT(path.message().size(), 200u);  // the input is not echoed
  }
  ASSERT_TRUE(update(3, 300).ok());  // 900 bytes stored
  ASSERT_TRUE(update(5, 300).ok());  // over 1000: one note, then counted only
  Restart();                         // the count survives a restart (it lives in the job)
  Register("a", 1, {{id, 1}});
  ASSERT_TRUE(update(2, 300).ok());
  auto job = c_->GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->log_bytes(), 900);
  EXPECT_EQ(job->dropped_log_lines(), 7);
  std::vector<mesa::v1::LogLine> stored;
  mesa::v1::GetJobLogsRequest logs;
  logs.set_id(id);
  ASSERT_TRUE(c_->GetJobLogs(
                    logs,
                    [&](const mesa::v1::LogLine& line) {
                      stored.push_back(line);
                      return true;
                    },
                    nullptr)
                  .ok());
  ASSERT_EQ(stored.size(), 4u);
  EXPECT_NE(stored[3].text().find("reached its limit of 1000 bytes"), std::string::npos);
  for (size_t i = 0; i < stored.size(); ++i) EXPECT_EQ(stored[i].sequence(), int64_t(i + 1));
}

TEST_F(CoordinatorTest, UserFailureDoesNotRetryInfraFailureDoes) {
  auto spec = ValidTrainSpec("f", 1);
  spec.set_max_retries(3);
  const std::string user = Submit(spec);
  const std::string infra = Submit(spec);
  const std::string lease = Register("a", 2);
  ASSERT_EQ(c_->RunSchedulingPass(), 2);
  ASSERT_TRUE(
      Update("a", user, 1, mesa::v1::ATTEMPT_PHASE_FAILED, mesa::v1::FAILURE_KIND_USER).ok());
  ASSERT_TRUE(
      Update("a", infra, 1, mesa::v1::ATTEMPT_PHASE_FAILED, mesa::v1::FAILURE_KIND_INFRA).ok());
  EXPECT_EQ(State(user), JobState::JOB_STATE_FAILED);
  EXPECT_EQ(c_->GetJob(user)->failure_reason(), "boom");
  EXPECT_EQ(State(infra), JobState::JOB_STATE_RETRYING);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  EXPECT_EQ(c_->GetJob(infra)->attempts(), 2);
}

TEST_F(CoordinatorTest, RestartReloadsJobsAndReconcilesWorkers) {
  const std::string kept = Submit(ValidTrainSpec("kept", 1));
  auto orphan_spec = ValidTrainSpec("orphan", 1);
  orphan_spec.set_max_retries(2);
  const std::string orphan = Submit(orphan_spec);
  const std::string queued = Submit(ValidTrainSpec("queued", 8));
  Register("a", 1);
  Register("b", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 2);
  const std::string on_a = c_->GetJob(kept)->workers(0);
  const std::string other = on_a == "a" ? "b" : "a";
  ASSERT_TRUE(Update(on_a, kept, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  ASSERT_TRUE(Update(other, orphan, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());

  Restart();
  EXPECT_EQ(State(kept), JobState::JOB_STATE_RUNNING);
  EXPECT_EQ(State(orphan), JobState::JOB_STATE_RUNNING);
  EXPECT_EQ(State(queued), JobState::JOB_STATE_QUEUED);
  // The worker running `kept` comes back and also reports an attempt the coordinator never ran.
  mesa::v1::RegisterWorkerResponse resp;
  const std::string lease = Register(on_a, 1, {{kept, 1}, {"job-999", 1}}, 0, &resp);
  ASSERT_EQ(resp.stop_size(), 1);
  EXPECT_EQ(resp.stop(0).job_id(), "job-999");
  EXPECT_EQ(c_->RunSchedulingPass(), 0);  // its GPU is still taken by `kept`
  // The other worker never comes back: after the lease TTL its job retries.
  clock_.Advance(absl::Seconds(5));
  Beat(on_a, lease, {{kept, 1}});  // as agents do: every attempt it runs is listed
  clock_.Advance(absl::Seconds(6));
  c_->CheckLeases();
  EXPECT_EQ(State(kept), JobState::JOB_STATE_RUNNING);
  EXPECT_EQ(State(orphan), JobState::JOB_STATE_RETRYING);
  ASSERT_TRUE(Update(on_a, kept, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED).ok());
  EXPECT_EQ(State(kept), JobState::JOB_STATE_SUCCEEDED);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);  // the retry takes the freed GPU
  EXPECT_EQ(State(orphan), JobState::JOB_STATE_SCHEDULED);

  // Finished jobs come back after a restart too (loaded lazily), sequences keep increasing.
  const int64_t before = c_->GetJob(kept)->last_sequence();
  Restart();
  EXPECT_EQ(State(kept), JobState::JOB_STATE_SUCCEEDED);
  const std::string fresh = Submit(ValidTrainSpec("fresh", 1));
  EXPECT_GT(c_->GetJob(fresh)->last_sequence(), before);
  EXPECT_NE(fresh, kept);
}

TEST_F(CoordinatorTest, RestartRedeliversUnstartedAssignment) {
  const std::string id = Submit(ValidTrainSpec("j", 1));
  Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  Restart();  // the assignment was never picked up
  const std::string lease = Register("a", 1);
  auto hb = Beat("a", lease);
  ASSERT_EQ(hb.assignments_size(), 1);
  EXPECT_EQ(hb.assignments(0).job_id(), id);
}

// The agent's heartbeat deadline can pass while the coordinator waits for the commit of the
// assignments it is about to hand out; gRPC then drops the answer. Those assignments must stay
// queued for the next heartbeat, or the job stays SCHEDULED forever (the worker keeps its lease).
TEST_F(CoordinatorTest, HeartbeatCancelledByClientKeepsAssignments) {
  const std::string id = Submit(ValidTrainSpec("j", 1));
  const std::string lease = Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  mesa::v1::HeartbeatRequest r;
  r.set_worker_id("a");
  r.set_lease_id(lease);
  auto gone = c_->Heartbeat(r, [] { return true; });  // the client went away
  EXPECT_FALSE(gone.ok());
  auto hb = Beat("a", lease);
  ASSERT_EQ(hb.assignments_size(), 1);
  EXPECT_EQ(hb.assignments(0).job_id(), id);
}

// A heartbeat answer lost after gRPC sent it (connection reset, agent crash): the job would stay
// SCHEDULED forever while the worker keeps its lease. A later heartbeat that does not list the
// attempt gets it again; an agent without acks only after a grace, so one still starting it does
// not get it twice.
TEST_F(CoordinatorTest, LostAssignmentIsRedeliveredAfterGraceWithoutAcks) {
  const std::string id = Submit(ValidTrainSpec("j", 1));
  const std::string lease = Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  auto hb = Beat("a", lease);
  ASSERT_EQ(hb.assignments_size(), 1);  // ... and lost on the way
  EXPECT_EQ(hb.delivery_seq(), 1);
  EXPECT_EQ(Beat("a", lease).assignments_size(), 0);  // within the grace
  clock_.Advance(absl::Seconds(10));                  // 2 heartbeat intervals
  hb = Beat("a", lease);
  ASSERT_EQ(hb.assignments_size(), 1);
  EXPECT_EQ(hb.assignments(0).job_id(), id);
  EXPECT_EQ(hb.assignments(0).attempt(), 1);
  EXPECT_EQ(hb.delivery_seq(), 2);
  // This one arrived: the agent lists it from now on, and it is not delivered again.
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(Beat("a", lease, {{id, 1}}).assignments_size(), 0);
  clock_.Advance(absl::Seconds(30));
  EXPECT_EQ(Beat("a", lease, {{id, 1}}).assignments_size(), 0);
  EXPECT_EQ(State(id), JobState::JOB_STATE_SCHEDULED);
}

TEST_F(CoordinatorTest, LostAssignmentIsRedeliveredAtOnceToAckingAgent) {
  const std::string first = Submit(ValidTrainSpec("first", 1));
  const std::string lease = Register("a", 2);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  auto hb = Beat("a", lease);
  ASSERT_EQ(hb.assignments_size(), 1);
  ASSERT_EQ(hb.delivery_seq(), 1);
  const std::string second = Submit(ValidTrainSpec("second", 1));
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  hb = Beat("a", lease, {{first, 1}}, /*acked=*/1);
  ASSERT_EQ(hb.assignments_size(), 1);
  ASSERT_EQ(hb.assignments(0).job_id(), second);
  ASSERT_EQ(hb.delivery_seq(), 2);
  // Lost: the agent still acks only 1, so the next heartbeat gets it again without any grace.
  hb = Beat("a", lease, {{first, 1}}, /*acked=*/1);
  ASSERT_EQ(hb.assignments_size(), 1);
  EXPECT_EQ(hb.assignments(0).job_id(), second);
  EXPECT_EQ(hb.delivery_seq(), 3);
  // Received: acked, not delivered again even before the agent lists it.
  clock_.Advance(absl::Seconds(30));
  EXPECT_EQ(Beat("a", lease, {{first, 1}}, /*acked=*/3).assignments_size(), 0);
  EXPECT_EQ(Beat("a", lease, {{first, 1}, {second, 1}}, /*acked=*/3).assignments_size(), 0);
}

TEST_F(CoordinatorTest, LostAssignmentOfCancelledJobEndsCancelled) {
  const std::string id = Submit(ValidTrainSpec("j", 1));
  const std::string lease = Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  ASSERT_EQ(Beat("a", lease).assignments_size(), 1);  // lost
  mesa::v1::CancelJobRequest cancel;
  cancel.set_id(id);
  ASSERT_TRUE(c_->CancelJob(cancel).ok());
  EXPECT_EQ(State(id), JobState::JOB_STATE_SCHEDULED);  // waits for the worker to stop it
  clock_.Advance(absl::Seconds(10));
  auto hb = Beat("a", lease);
  EXPECT_EQ(hb.assignments_size(), 0);
  EXPECT_EQ(State(id), JobState::JOB_STATE_CANCELLED);
}

// Re-registration rebuilds the worker's resources from scratch: whatever the coordinator still
// places there must be accounted for exactly once, whichever order the jobs are reconciled in.
TEST_F(CoordinatorTest, ReregistrationKeepsCpuSlotAccounting) {
  auto spec = ValidTrainSpec("cpu", 0);
  spec.mutable_resources()->set_cpu_threads(2);
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(Submit(spec));
  Register("w", 0, {}, 16);
  ASSERT_EQ(c_->RunSchedulingPass(), 8);
  for (const std::string& id : ids)
    ASSERT_TRUE(Update("w", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  // The agent restarted; only half of its trainers survived.
  Register("w", 0, {{ids[0], 1}, {ids[1], 1}, {ids[2], 1}, {ids[3], 1}}, 16);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(State(ids[i]), i < 4 ? JobState::JOB_STATE_RUNNING : JobState::JOB_STATE_FAILED) << i;
  }
  mesa::v1::ExplainJobRequest x;
  x.set_id(ids[0]);
  EXPECT_EQ(c_->ExplainJob(x)->free_cpu_slots(), 8);
}

// A worker that finished its share of a multi-worker attempt and then re-registers: the share is
// released when the attempt ends, so it must be held until then, or its GPU is freed while
// another job runs on it (two jobs on one GPU).
TEST_F(CoordinatorTest, ReregistrationAfterFinishedShareDoesNotDoubleBookGpu) {
  const std::string gang = Submit(ValidTrainSpec("gang", 2));
  Register("a", 1);
  Register("b", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  ASSERT_TRUE(Update("a", gang, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  ASSERT_TRUE(Update("b", gang, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  ASSERT_TRUE(Update("a", gang, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED).ok());
  Register("a", 1);  // agent restart: nothing runs there any more
  const std::string small = Submit(ValidTrainSpec("small", 1));
  c_->RunSchedulingPass();
  ASSERT_TRUE(Update("b", gang, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED).ok());
  EXPECT_EQ(State(gang), JobState::JOB_STATE_SUCCEEDED);
  mesa::v1::ExplainJobRequest x;
  x.set_id(small);
  auto ex = c_->ExplainJob(x);
  ASSERT_TRUE(ex.ok());
  const int held =
      State(small) == JobState::JOB_STATE_SCHEDULED || State(small) == JobState::JOB_STATE_RUNNING;
  EXPECT_EQ(ex->free_gpus() + held, 2) << "free GPUs plus GPUs in use must equal the cluster's 2";
}

TEST_F(CoordinatorTest, ProgressEventsAreRateLimited) {
  const std::string id = Submit(ValidTrainSpec("p", 1));
  Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  for (int i = 0; i < 10; ++i) {
    mesa::v1::UpdateAttemptRequest u;
    u.set_worker_id("a");
    u.set_lease_id(leases_["a"]);
    u.set_job_id(id);
    u.set_attempt(1);
    u.set_phase(mesa::v1::ATTEMPT_PHASE_RUNNING);
    u.mutable_progress()->set_step(i);
    u.mutable_progress()->set_loss(5.0f - i * 0.1f);
    ASSERT_TRUE(c_->UpdateAttempt(u).ok());
    if (i == 4) clock_.Advance(absl::Seconds(1));
  }
  EXPECT_EQ(c_->GetJob(id)->progress().step(), 9);  // always current
  ASSERT_TRUE(Update("a", id, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED).ok());
  int progress_events = 0;
  for (const auto& e : Events(id)) progress_events += e.type() == mesa::v1::JOB_EVENT_TYPE_PROGRESS;
  EXPECT_EQ(progress_events, 2);
  // Per-job trainer series are the worker's; the coordinator never exports them.
  EXPECT_EQ(metrics_.Serialize().find("job_id="), std::string::npos);
}

TEST_F(CoordinatorTest, CancelQueuedAndRunning) {
  const std::string queued = Submit(ValidTrainSpec("q", 4));
  const std::string running = Submit(ValidTrainSpec("r", 1));
  const std::string lease = Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  ASSERT_EQ(Beat("a", lease).assignments_size(), 1);
  mesa::v1::CancelJobRequest cq;
  cq.set_id(queued);
  EXPECT_EQ(c_->CancelJob(cq)->state(), JobState::JOB_STATE_CANCELLED);
  EXPECT_EQ(c_->CancelJob(cq).status().code(), absl::StatusCode::kFailedPrecondition);
  mesa::v1::CancelJobRequest cr;
  cr.set_id(running);
  cr.set_reason("no longer needed");
  EXPECT_EQ(c_->CancelJob(cr)->state(),
            JobState::JOB_STATE_SCHEDULED);  // until the worker stops it
  auto hb = Beat("a", lease);
  ASSERT_EQ(hb.cancellations_size(), 1);
  EXPECT_EQ(hb.cancellations(0).job_id(), running);
  EXPECT_EQ(hb.cancellations(0).reason(), "no longer needed");
  ASSERT_TRUE(Update("a", running, 1, mesa::v1::ATTEMPT_PHASE_STOPPED).ok());
  EXPECT_EQ(State(running), JobState::JOB_STATE_CANCELLED);
  mesa::v1::CancelJobRequest missing;
  missing.set_id("job-12345");
  EXPECT_EQ(c_->CancelJob(missing).status().code(), absl::StatusCode::kNotFound);
}

// A row in a state outside the lifecycle (written by something else) is refused, not cancelled:
// cancelling it would be a transition the state machine forbids.
TEST_F(CoordinatorTest, CancelOfJobInUnknownStateIsRefused) {
  const std::string id = Submit(ValidTrainSpec("u", 1));
  c_.reset();
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE jobs SET state = 0", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  Open();
  mesa::v1::CancelJobRequest r;
  r.set_id(id);
  EXPECT_EQ(c_->CancelJob(r).status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(c_->GetJob(id).ok());
}

TEST_F(CoordinatorTest, ListingWithAStateFilterSkipsARowWhoseStateIsOutOfRange) {
  // ListJobs indexed an 8-entry table with the stored state unchecked.
  const std::string id = Submit(ValidTrainSpec("odd", 1));
  const std::string ok = Submit(ValidTrainSpec("fine", 1));
  c_.reset();
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  const std::string update = "UPDATE jobs SET state = 100000 WHERE id = '" + id + "'";
  ASSERT_EQ(sqlite3_exec(db, update.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  Open();
  mesa::v1::ListJobsRequest r;
  r.add_states(JobState::JOB_STATE_QUEUED);
  auto listed = c_->ListJobs(r);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->jobs_size(), 1);
  EXPECT_EQ(listed->jobs(0).id(), ok);
}

TEST_F(CoordinatorTest, ExplainGivesQueuePosition) {
  Register("a", 2);
  const std::string big = Submit(ValidTrainSpec("big", 2));
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  auto hi = ValidTrainSpec("hi", 2);
  hi.set_priority(5);
  const std::string first = Submit(ValidTrainSpec("first", 2));
  const std::string second = Submit(hi);
  c_->RunSchedulingPass();
  mesa::v1::ExplainJobRequest r;
  r.set_id(first);
  auto x = c_->ExplainJob(r);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->queue_position(), 2);
  EXPECT_EQ(x->pending_jobs(), 2);
  r.set_id(second);
  x = c_->ExplainJob(r);
  EXPECT_EQ(x->queue_position(), 1);
  EXPECT_NE(x->reason().find("head of the queue"), std::string::npos) << x->reason();
  r.set_id(big);
  x = c_->ExplainJob(r);
  EXPECT_EQ(x->queue_position(), 0);
  EXPECT_EQ(x->live_workers(), 1);
}

}  // namespace
}  // namespace mesa::coordinator
