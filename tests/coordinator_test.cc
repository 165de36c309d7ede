// Integration tests: the real mesa-coordinator binary on loopback, spoken to over real gRPC.

#include <signal.h>
#include <sqlite3.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "cli/client.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "grpcpp/impl/codegen/sync_stream.h"
#include "gtest/gtest.h"
#include "tests/coordinator_harness.h"
#include "tests/grpc_probe.pb.h"

namespace mesa::testing {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::mesa::v1::Job;
using ::mesa::v1::JobEvent;
using ::mesa::v1::JobSpec;
using ::mesa::v1::JobState;

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir("coordinator_test");
    db_ = dir_ + "/mesa.db";
    StartCoordinator();
  }

  void StartCoordinator() {
    auto c = CoordinatorProcess::Start(db_);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    jobs_ = coordinator_->JobStub();
  }

  // Each call returns the gRPC status so tests can check codes; results go to `out`.
  grpc::Status Submit(const JobSpec& spec, const std::string& client_job_id, Job* out) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    request.set_client_job_id(client_job_id);
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    return jobs_->SubmitJob(&context, request, out);
  }

  Job MustSubmit(const JobSpec& spec, const std::string& client_job_id = "") {
    Job job;
    grpc::Status s = Submit(spec, client_job_id, &job);
    EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
    return job;
  }

  grpc::Status Get(const std::string& id, Job* out) {
    v1::GetJobRequest request;
    request.set_id(id);
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    return jobs_->GetJob(&context, request, out);
  }

  grpc::Status Cancel(const std::string& id, Job* out, const std::string& reason = "test") {
    v1::CancelJobRequest request;
    request.set_id(id);
    request.set_reason(reason);
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    return jobs_->CancelJob(&context, request, out);
  }

  // Every job matching `request`, following page tokens (bounded).
  std::vector<Job> ListAll(v1::ListJobsRequest request) {
    std::vector<Job> jobs;
    for (int page = 0; page < 10000; ++page) {
      v1::ListJobsResponse response;
      grpc::ClientContext context;
      SetDeadline(context, absl::Seconds(10));
      grpc::Status s = jobs_->ListJobs(&context, request, &response);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) break;
      jobs.insert(jobs.end(), response.jobs().begin(), response.jobs().end());
      if (response.next_page_token().empty()) break;
      request.set_page_token(response.next_page_token());
    }
    return jobs;
  }

  static std::set<std::string> Ids(const std::vector<Job>& jobs) {
    std::set<std::string> ids;
    for (const Job& j : jobs) ids.insert(j.id());
    return ids;
  }

  // Reads the job's events from `from_sequence` until the server ends the stream (bounded).
  grpc::Status WatchAll(const std::string& id, int64_t from_sequence, std::vector<JobEvent>* events,
                        absl::Duration timeout = absl::Seconds(10)) {
    v1::WatchJobRequest request;
    request.set_id(id);
    request.set_from_sequence(from_sequence);
    grpc::ClientContext context;
    SetDeadline(context, timeout);
    auto reader = jobs_->WatchJob(&context, request);
    JobEvent event;
    while (reader->Read(&event)) events->push_back(event);
    return reader->Finish();
  }

  // Runs `job_id` to SUCCEEDED as a fake worker; returns the assignment.
  v1::Assignment RunToSuccess(FakeWorker& worker, const std::string& job_id) {
    absl::StatusOr<v1::Assignment> a = worker.WaitForAssignment(absl::Seconds(10));
    EXPECT_TRUE(a.ok()) << a.status();
    if (!a.ok()) return {};
    EXPECT_EQ(a->job_id(), job_id);
    v1::Progress progress;
    progress.set_step(100);
    progress.set_total_steps(200);
    progress.set_loss(3.5f);
    EXPECT_TRUE(worker.Running(*a, progress).ok());
    v1::JobResult result;
    result.set_final_loss(2.25f);
    absl::Status s = worker.Succeed(*a, result);
    EXPECT_TRUE(s.ok()) << s;
    return *a;
  }

  std::string dir_;
  std::string db_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
};

TEST_F(CoordinatorTest, SubmitGetAndList) {
  JobSpec spec = TinyTrainSpec("first-job");
  (*spec.mutable_labels())["team"] = "nlp";
  Job submitted = MustSubmit(spec, "cid-first");
  ASSERT_FALSE(submitted.id().empty());
  EXPECT_EQ(submitted.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(submitted.client_job_id(), "cid-first");
  EXPECT_GT(submitted.create_time().seconds(), 0);
  EXPECT_TRUE(MessageDifferencer::Equals(submitted.spec(), spec)) << submitted.spec().DebugString();

  Job got;
  ASSERT_TRUE(Get(submitted.id(), &got).ok());
  EXPECT_EQ(got.id(), submitted.id());
  EXPECT_EQ(got.state(), v1::JOB_STATE_QUEUED);
  EXPECT_TRUE(MessageDifferencer::Equals(got.spec(), spec));

  Job second = MustSubmit(TinyTrainSpec("second-job"));
  EXPECT_NE(second.id(), submitted.id());
  std::vector<Job> all = ListAll({});
  EXPECT_EQ(Ids(all), (std::set<std::string>{submitted.id(), second.id()}));
}

TEST_F(CoordinatorTest, ListFiltersAndPages) {
  JobSpec a = TinyTrainSpec("in-queue-a");
  a.set_queue("alpha");
  (*a.mutable_labels())["team"] = "nlp";
  JobSpec b = TinyTrainSpec("in-queue-b");
  b.set_queue("beta");
  (*b.mutable_labels())["team"] = "vision";
  Job ja = MustSubmit(a);
  Job jb = MustSubmit(b);
  Job jc = MustSubmit(TinyTrainSpec("to-cancel"));
  Job cancelled;
  ASSERT_TRUE(Cancel(jc.id(), &cancelled).ok());

  v1::ListJobsRequest by_queue;
  by_queue.set_queue("beta");
  EXPECT_EQ(Ids(ListAll(by_queue)), std::set<std::string>{jb.id()});

  v1::ListJobsRequest by_label;
  (*by_label.mutable_labels())["team"] = "nlp";
  EXPECT_EQ(Ids(ListAll(by_label)), std::set<std::string>{ja.id()});

  v1::ListJobsRequest by_state;
  by_state.add_states(v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(Ids(ListAll(by_state)), std::set<std::string>{jc.id()});
  by_state.add_states(v1::JOB_STATE_QUEUED);
  EXPECT_EQ(ListAll(by_state).size(), 3u);

  // One job per page: the pages together hold each job exactly once.
  v1::ListJobsRequest paged;
  paged.set_page_size(1);
  std::vector<Job> pages = ListAll(paged);
  EXPECT_EQ(pages.size(), 3u);
  EXPECT_EQ(Ids(pages), (std::set<std::string>{ja.id(), jb.id(), jc.id()}));
}

TEST_F(CoordinatorTest, IdempotentResubmission) {
  JobSpec spec = TinyTrainSpec("idempotent");
  Job first = MustSubmit(spec, "same-key");
  Job again = MustSubmit(spec, "same-key");
  EXPECT_EQ(again.id(), first.id());
  EXPECT_EQ(ListAll({}).size(), 1u);

  JobSpec different = spec;
  different.mutable_training()->set_steps(300);
  Job ignored;
  grpc::Status s = Submit(different, "same-key", &ignored);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << s.error_message();
  EXPECT_EQ(ListAll({}).size(), 1u);

  // Without a client_job_id every submission is a new job.
  Job x = MustSubmit(spec);
  Job y = MustSubmit(spec);
  EXPECT_NE(x.id(), y.id());
}

TEST_F(CoordinatorTest, InvalidSpecsAreRejectedNamingTheField) {
  struct Case {
    std::string field;
    std::function<void(JobSpec&)> mutate;
  };
  std::vector<Case> cases = {
      {"spec.name", [](JobSpec& s) { s.set_name(""); }},
      {"spec.name", [](JobSpec& s) { s.set_name("Bad_Name"); }},
      {"spec.type", [](JobSpec& s) { s.set_type(v1::JOB_TYPE_UNSPECIFIED); }},
      {"spec.priority", [](JobSpec& s) { s.set_priority(5000); }},
      {"spec.max_retries", [](JobSpec& s) { s.set_max_retries(-1); }},
      {"spec.resources.gpus", [](JobSpec& s) { s.mutable_resources()->set_gpus(-2); }},
      {"spec.model.d_model", [](JobSpec& s) { s.mutable_model()->set_d_model(0); }},
      {"spec.data.tokenizer", [](JobSpec& s) { s.mutable_data()->set_tokenizer("sentencepiece"); }},
      {"spec.training.steps", [](JobSpec& s) { s.mutable_training()->set_steps(0); }},
      {"spec.optimizer.lr", [](JobSpec& s) { s.mutable_optimizer()->set_lr(-1); }},
  };
  for (const Case& c : cases) {
    JobSpec spec = TinyTrainSpec("valid-name");
    c.mutate(spec);
    Job job;
    grpc::Status s = Submit(spec, "", &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    // The field may be named in the message or in google.rpc.BadRequest details.
    std::string text(cli::FromGrpcStatus(s).message());
    EXPECT_TRUE(absl::StrContains(text, c.field)) << c.field << " not in: " << text;
  }
  // A bad client_job_id is named too.
  Job job;
  grpc::Status s = Submit(TinyTrainSpec("valid-name"), "has spaces!", &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(cli::FromGrpcStatus(s).message(), "client_job_id"))
      << s.error_message();
  // Nothing was stored.
  EXPECT_TRUE(ListAll({}).empty());
}

TEST_F(CoordinatorTest, UnknownIdIsNotFound) {
  const std::string id = "no-such-job";
  Job job;
  EXPECT_EQ(Get(id, &job).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Cancel(id, &job).error_code(), grpc::StatusCode::NOT_FOUND);
  std::vector<JobEvent> events;
  EXPECT_EQ(WatchAll(id, 0, &events).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(events.empty());
  {
    v1::ExplainJobRequest request;
    request.set_id(id);
    v1::ExplainJobResponse response;
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    EXPECT_EQ(jobs_->ExplainJob(&context, request, &response).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  {
    v1::GetJobLogsRequest request;
    request.set_id(id);
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    auto reader = jobs_->GetJobLogs(&context, request);
    v1::LogLine line;
    while (reader->Read(&line)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

TEST_F(CoordinatorTest, CancelQueuedJobThenCancelAgainFails) {
  Job job = MustSubmit(TinyTrainSpec("cancel-me"));
  Job cancelled;
  grpc::Status s = Cancel(job.id(), &cancelled, "not needed");
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(cancelled.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_GT(cancelled.end_time().seconds(), 0);
  Job got;
  ASSERT_TRUE(Get(job.id(), &got).ok());
  EXPECT_EQ(got.state(), v1::JOB_STATE_CANCELLED);
  Job again;
  EXPECT_EQ(Cancel(job.id(), &again).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(CoordinatorTest, FakeWorkerRunsJobToSuccessAndEventsReplay) {
  JobSpec spec = TinyTrainSpec("worker-run");
  Job job = MustSubmit(spec);
  FakeWorker worker(coordinator_->channel(), "fake-worker-1", /*cpu_slots=*/4);
  ASSERT_TRUE(worker.Register().ok());

  absl::StatusOr<v1::Assignment> a = worker.WaitForAssignment(absl::Seconds(10));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->job_id(), job.id());
  EXPECT_EQ(a->attempt(), 1);
  EXPECT_EQ(a->world_size(), 1);
  EXPECT_TRUE(MessageDifferencer::Equals(a->spec(), spec));

  v1::UpdateAttemptRequest running;
  running.set_job_id(a->job_id());
  running.set_attempt(a->attempt());
  running.set_phase(v1::ATTEMPT_PHASE_RUNNING);
  running.mutable_progress()->set_step(50);
  running.mutable_progress()->set_total_steps(200);
  running.mutable_progress()->set_loss(4.5f);
  v1::LogLine* log = running.add_logs();
  log->set_stream("stdout");
  log->set_text("step 50 loss 4.5");
  ASSERT_TRUE(worker.Update(running).ok());

  Job got;
  ASSERT_TRUE(Get(job.id(), &got).ok());
  EXPECT_EQ(got.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(got.progress().step(), 50);
  EXPECT_EQ(got.attempts(), 1);
  Job cannot_cancel_later;

  v1::JobResult result;
  result.set_final_loss(2.25f);
  ASSERT_TRUE(worker.Succeed(*a, result).ok());
  ASSERT_TRUE(Get(job.id(), &got).ok());
  EXPECT_EQ(got.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_FLOAT_EQ(got.result().final_loss(), 2.25f);
  EXPECT_GT(got.end_time().seconds(), 0);

  // A finished job cannot be cancelled.
  EXPECT_EQ(Cancel(job.id(), &cannot_cancel_later).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  // The full history replays, in order, and the stream ends because the job has ended.
  std::vector<JobEvent> events;
  grpc::Status s = WatchAll(job.id(), 0, &events);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  ASSERT_GE(events.size(), 3u);
  std::vector<JobState> states;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].job_id(), job.id());
    if (i > 0) {
      EXPECT_GT(events[i].sequence(), events[i - 1].sequence());
    }
    if (events[i].type() == v1::JOB_EVENT_TYPE_STATE_CHANGED) states.push_back(events[i].state());
  }
  ASSERT_FALSE(states.empty());
  EXPECT_EQ(states.back(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_NE(std::find(states.begin(), states.end(), v1::JOB_STATE_RUNNING), states.end());
  EXPECT_EQ(events.back().sequence(), got.last_sequence());

  // from_sequence skips what the caller has already seen.
  const int64_t cut = events[events.size() / 2].sequence();
  std::vector<JobEvent> tail;
  ASSERT_TRUE(WatchAll(job.id(), cut, &tail).ok());
  ASSERT_FALSE(tail.empty());
  EXPECT_GT(tail.front().sequence(), cut);
  EXPECT_EQ(tail.back().sequence(), events.back().sequence());
  size_t expected_tail = 0;
  for (const JobEvent& e : events) expected_tail += e.sequence() > cut;
  EXPECT_EQ(tail.size(), expected_tail);

  // The log line the worker sent is stored.
  v1::GetJobLogsRequest logs_request;
  logs_request.set_id(job.id());
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(10));
  auto reader = jobs_->GetJobLogs(&context, logs_request);
  std::vector<std::string> lines;
  v1::LogLine line;
  while (reader->Read(&line)) lines.push_back(line.text());
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_NE(std::find(lines.begin(), lines.end(), "step 50 loss 4.5"), lines.end());
}

TEST_F(CoordinatorTest, WatchFollowsLiveUntilTheJobEnds) {
  Job job = MustSubmit(TinyTrainSpec("watch-live"));
  std::vector<JobEvent> events;
  grpc::Status watch_status;
  absl::Notification first_event, done;
  std::mutex mu;
  std::thread watcher([&] {
    v1::WatchJobRequest request;
    request.set_id(job.id());
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(15));
    auto reader = jobs_->WatchJob(&context, request);
    JobEvent event;
    while (reader->Read(&event)) {
      {
        std::lock_guard<std::mutex> lock(mu);
        events.push_back(event);
      }
      if (!first_event.HasBeenNotified()) first_event.Notify();
    }
    watch_status = reader->Finish();
    done.Notify();
  });
  // The submission's own event is replayed, then the stream stays open while the job is queued.
  bool replayed = first_event.WaitForNotificationWithTimeout(absl::Seconds(10));
  EXPECT_TRUE(replayed) << "no replayed event";
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(300)))
      << "stream ended while the job was still queued";

  Job cancelled;
  ASSERT_TRUE(Cancel(job.id(), &cancelled).ok());
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "stream did not end after the job ended";
  watcher.join();
  EXPECT_TRUE(watch_status.ok()) << watch_status.error_code() << " "
                                 << watch_status.error_message();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().type(), v1::JOB_EVENT_TYPE_STATE_CHANGED);
  EXPECT_EQ(events.back().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(events.back().previous_state(), v1::JOB_STATE_QUEUED);
}

TEST_F(CoordinatorTest, ExplainReportsQueuePositionInPriorityOrder) {
  Job first = MustSubmit(TinyTrainSpec("explain-first"));
  Job second = MustSubmit(TinyTrainSpec("explain-second"));
  JobSpec urgent_spec = TinyTrainSpec("explain-urgent");
  urgent_spec.set_priority(10);
  Job urgent = MustSubmit(urgent_spec);

  auto explain = [&](const std::string& id) {
    v1::ExplainJobRequest request;
    request.set_id(id);
    v1::ExplainJobResponse response;
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    grpc::Status s = jobs_->ExplainJob(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  };
  v1::ExplainJobResponse x = explain(urgent.id());
  EXPECT_EQ(x.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(x.queue_position(), 1);  // strict priority: ahead of older, lower-priority jobs
  EXPECT_EQ(x.pending_jobs(), 3);
  EXPECT_EQ(x.live_workers(), 0);
  EXPECT_FALSE(x.reason().empty());
  EXPECT_EQ(explain(first.id()).queue_position(), 2);  // FIFO within a level
  EXPECT_EQ(explain(second.id()).queue_position(), 3);
}

TEST_F(CoordinatorTest, HealthIsServing) {
  grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check",
                                   grpc::internal::RpcMethod::NORMAL_RPC);
  probe::HealthCheckRequest request;  // "" = the whole server
  probe::HealthCheckResponse response;
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(5));
  grpc::Status s = grpc::internal::BlockingUnaryCall(coordinator_->channel().get(), method,
                                                     &context, request, &response);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_EQ(response.status(), probe::HealthCheckResponse::SERVING);
}

TEST_F(CoordinatorTest, ReflectionListsServicesAndDescribesThem) {
  grpc::internal::RpcMethod method("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                   grpc::internal::RpcMethod::BIDI_STREAMING);
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(5));
  std::unique_ptr<
      grpc::ClientReaderWriter<probe::ServerReflectionRequest, probe::ServerReflectionResponse>>
      stream(grpc::internal::ClientReaderWriterFactory<
             probe::ServerReflectionRequest,
             probe::ServerReflectionResponse>::Create(coordinator_->channel().get(), method,
                                                      &context));
  probe::ServerReflectionRequest list;
  list.set_list_services("");
  ASSERT_TRUE(stream->Write(list));
  probe::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  std::set<std::string> services;
  for (const auto& s : response.list_services_response().service()) services.insert(s.name());
  EXPECT_TRUE(services.count("mesa.v1.JobService")) << response.DebugString();
  EXPECT_TRUE(services.count("mesa.v1.WorkerService")) << response.DebugString();

  probe::ServerReflectionRequest symbol;
  symbol.set_file_containing_symbol("mesa.v1.JobService");
  ASSERT_TRUE(stream->Write(symbol));
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_GT(response.file_descriptor_response().file_descriptor_proto_size(), 0)
      << response.DebugString();
  std::set<std::string> files;
  for (const std::string& bytes : response.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    files.insert(file.name());
  }
  EXPECT_TRUE(files.count("mesa/v1/job_service.proto"));
  stream->WritesDone();
  grpc::Status s = stream->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// A failed commit (here another process holds the database's write lock past the store's 10 s
// busy timeout) must not leave the coordinator serving state the store no longer follows: the
// write is refused, the coordinator exits, and a restart serves exactly what was committed.
TEST_F(CoordinatorTest, FailedCommitStopsTheCoordinatorAndRestartServesCommittedState) {
  Job kept = MustSubmit(TinyTrainSpec("before-failure"));
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN EXCLUSIVE;", nullptr, nullptr, nullptr), SQLITE_OK);
  Job refused;
  v1::SubmitJobRequest request;
  *request.mutable_spec() = TinyTrainSpec("during-failure");
  request.set_client_job_id("refused-1");
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(30));
  grpc::Status s = jobs_->SubmitJob(&context, request, &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  sqlite3_exec(db, "ROLLBACK;", nullptr, nullptr, nullptr);
  sqlite3_close(db);

  absl::StatusOr<int> exit_code = coordinator_->process().Wait(absl::Seconds(30));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 1);
  EXPECT_TRUE(absl::StrContains(coordinator_->process().Stderr(), "job store commit failed"))
      << coordinator_->process().Stderr();

  StartCoordinator();
  const std::vector<Job> jobs = ListAll(v1::ListJobsRequest());
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].id(), kept.id());
  // The refused submission was never acknowledged; its key is free for the retry.
  Job retried = MustSubmit(TinyTrainSpec("during-failure"), "refused-1");
  EXPECT_NE(retried.id(), kept.id());
}

TEST_F(CoordinatorTest, StatePersistsAcrossRestart) {
  Job queued = MustSubmit(TinyTrainSpec("persist-queued"), "persist-1");
  Job cancelled = MustSubmit(TinyTrainSpec("persist-cancelled"));
  Job ignored;
  ASSERT_TRUE(Cancel(cancelled.id(), &ignored).ok());
  std::vector<JobEvent> before;
  ASSERT_TRUE(WatchAll(cancelled.id(), 0, &before).ok());

  absl::Time stop_start = absl::Now();
  absl::StatusOr<int> stopped = coordinator_->process().Terminate(absl::Seconds(10));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, 0) << "SIGTERM should be a clean shutdown";
  std::cerr << "graceful shutdown took " << absl::Now() - stop_start << "\n";
  StartCoordinator();

  Job got;
  ASSERT_TRUE(Get(queued.id(), &got).ok());
  EXPECT_EQ(got.state(), v1::JOB_STATE_QUEUED);
  ASSERT_TRUE(Get(cancelled.id(), &got).ok());
  EXPECT_EQ(got.state(), v1::JOB_STATE_CANCELLED);
  std::vector<JobEvent> after;
  ASSERT_TRUE(WatchAll(cancelled.id(), 0, &after).ok());
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].sequence(), before[i].sequence());
  // New events continue the sequence rather than restarting it.
  Job fresh = MustSubmit(TinyTrainSpec("persist-fresh"));
  ASSERT_TRUE(Get(fresh.id(), &got).ok());
  EXPECT_GT(got.last_sequence(), before.back().sequence());
  EXPECT_EQ(MustSubmit(TinyTrainSpec("persist-queued"), "persist-1").id(), queued.id());
}

TEST_F(CoordinatorTest, SigkillDuringSubmissionBurstLosesNoAcknowledgedJob) {
  constexpr int kThreads = 6;
  constexpr int kPerThread = 100000;  // far more than fit before the kill
  std::mutex mu;
  std::map<std::string, std::string> acked;  // client_job_id -> job id
  std::set<std::string> attempted;
  std::atomic<int> acked_count{0};
  std::vector<std::thread> threads;
  auto spec_for = [](const std::string& cid) {
    JobSpec spec = TinyTrainSpec("burst");
    (*spec.mutable_labels())["cid"] = cid;
    return spec;
  };
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Own channel per thread: concurrent streams over several connections.
      auto channel =
          grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials());
      auto stub = v1::JobService::NewStub(channel);
      for (int i = 0; i < kPerThread; ++i) {
        std::string cid = absl::StrCat("burst-", t, "-", i);
        {
          std::lock_guard<std::mutex> lock(mu);
          attempted.insert(cid);
        }
        v1::SubmitJobRequest request;
        *request.mutable_spec() = spec_for(cid);
        request.set_client_job_id(cid);
        grpc::ClientContext context;
        SetDeadline(context, absl::Seconds(5));
        Job job;
        grpc::Status s = stub->SubmitJob(&context, request, &job);
        if (!s.ok()) return;  // the coordinator is gone
        std::lock_guard<std::mutex> lock(mu);
        acked[cid] = job.id();
        ++acked_count;
      }
    });
  }
  // A different kill point each run, so repeated runs hit different phases of group commit.
  const int kill_after = 100 + static_cast<int>(std::random_device()() % 1400);
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (acked_count < kill_after && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::StatusOr<int> killed = coordinator_->process().Kill();
  for (auto& t : threads) t.join();
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, -SIGKILL);
  ASSERT_GE(acked_count.load(), kill_after) << "the burst was too slow to reach the kill point";
  const size_t unacked = attempted.size() - acked.size();
  std::cerr << "acknowledged " << acked.size() << " jobs, " << unacked << " in flight at SIGKILL\n";

  StartCoordinator();
  // Every acknowledged job is back, with its client_job_id and spec.
  for (const auto& [cid, id] : acked) {
    Job got;
    grpc::Status s = Get(id, &got);
    ASSERT_TRUE(s.ok()) << "acknowledged job " << id << " (" << cid
                        << ") lost: " << s.error_message();
    EXPECT_EQ(got.client_job_id(), cid);
    EXPECT_EQ(got.spec().labels().at("cid"), cid);
  }
  // Resubmitting everything that was attempted returns the acknowledged jobs unchanged and
  // creates the unacknowledged ones once.
  for (const std::string& cid : attempted) {
    Job job;
    grpc::Status s = Submit(spec_for(cid), cid, &job);
    ASSERT_TRUE(s.ok()) << cid << ": " << s.error_message();
    auto it = acked.find(cid);
    if (it != acked.end()) {
      EXPECT_EQ(job.id(), it->second) << cid;
    }
  }
  v1::ListJobsRequest all;
  all.set_page_size(1000);
  std::vector<Job> jobs = ListAll(all);
  std::map<std::string, int> per_cid;
  for (const Job& j : jobs) ++per_cid[j.client_job_id()];
  EXPECT_EQ(jobs.size(), attempted.size()) << "duplicates or missing jobs";
  for (const std::string& cid : attempted) EXPECT_EQ(per_cid[cid], 1) << cid;
}

}  // namespace
}  // namespace mesa::testing
