// The gRPC services on a real loopback port, with an in-process fake agent speaking WorkerService.
#include "coordinator/service.h"

#include <thread>

#include "coordinator/test_util.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

using mesa::v1::JobState;

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(OpenTestStore(TempPath("service.db"), &store_));
    CoordinatorOptions o;
    o.progress_event_interval = absl::ZeroDuration();
    auto c = Coordinator::Create(store_.get(), RealClock::Get(), &metrics_, o);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    auto server = Server::Start("127.0.0.1:0", coordinator_.get(), &metrics_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    jobs_ = mesa::v1::JobService::NewStub(channel_);
    workers_ = mesa::v1::WorkerService::NewStub(channel_);
  }
  void TearDown() override {
    coordinator_->Shutdown();
    server_->Shutdown();
  }
  static void Deadline(grpc::ClientContext* ctx, int seconds = 10) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  }
  grpc::Status Submit(const mesa::v1::JobSpec& spec, mesa::v1::Job* job,
                      const std::string& client_id = "") {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    mesa::v1::SubmitJobRequest r;
    *r.mutable_spec() = spec;
    r.set_client_job_id(client_id);
    return jobs_->SubmitJob(&ctx, r, job);
  }
  mesa::v1::Job Get(const std::string& id) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    mesa::v1::GetJobRequest r;
    r.set_id(id);
    mesa::v1::Job j;
    EXPECT_TRUE(jobs_->GetJob(&ctx, r, &j).ok());
    return j;
  }
  // Heartbeats until an assignment or cancellation arrives (bounded).
  mesa::v1::HeartbeatResponse Poll(const std::string& worker, const std::string& lease) {
    mesa::v1::HeartbeatResponse resp;
    for (int i = 0; i < 10; ++i) {
      grpc::ClientContext ctx;
      Deadline(&ctx);
      mesa::v1::HeartbeatRequest r;
      r.set_worker_id(worker);
      r.set_lease_id(lease);
      r.set_max_wait_ms(1000);
      EXPECT_TRUE(workers_->Heartbeat(&ctx, r, &resp).ok());
      if (resp.assignments_size() > 0 || resp.cancellations_size() > 0) break;
    }
    return resp;
  }
  grpc::Status Update(const mesa::v1::UpdateAttemptRequest& r,
                      mesa::v1::UpdateAttemptResponse* resp = nullptr) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    mesa::v1::UpdateAttemptResponse ignored;
    return workers_->UpdateAttempt(&ctx, r, resp ? resp : &ignored);
  }
  std::string Register(const std::string& id, int gpus) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    mesa::v1::RegisterWorkerRequest r;
    r.set_worker_id(id);
    r.set_hostname("localhost");
    for (int i = 0; i < gpus; ++i) {
      auto* g = r.mutable_resources()->add_gpus();
      g->set_index(i);
      g->set_name("H200");
    }
    r.mutable_resources()->set_cpu_slots(4);
    mesa::v1::RegisterWorkerResponse resp;
    EXPECT_TRUE(workers_->RegisterWorker(&ctx, r, &resp).ok());
    EXPECT_GT(resp.lease_ttl_ms(), 0);
    return resp.lease_id();
  }

  Metrics metrics_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<mesa::v1::JobService::Stub> jobs_;
  std::unique_ptr<mesa::v1::WorkerService::Stub> workers_;
};

TEST_F(ServiceTest, SubmitGetListIdempotencyAndErrors) {
  mesa::v1::Job a, again, b;
  ASSERT_TRUE(Submit(ValidTrainSpec("a", 1), &a, "client-1").ok());
  EXPECT_EQ(a.state(), JobState::JOB_STATE_QUEUED);
  EXPECT_GT(a.last_sequence(), 0);
  ASSERT_TRUE(Submit(ValidTrainSpec("a", 1), &again, "client-1").ok());
  EXPECT_EQ(again.id(), a.id());
  EXPECT_EQ(Submit(ValidTrainSpec("other", 1), &b, "client-1").error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  auto bad = ValidTrainSpec("bad", -3);
  grpc::Status s = Submit(bad, &b);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec.resources.gpus"), std::string::npos) << s.error_message();

  auto labelled = ValidTrainSpec("b", 1);
  (*labelled.mutable_labels())["team"] = "lm";
  labelled.set_queue("research");
  ASSERT_TRUE(Submit(labelled, &b).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Submit(ValidTrainSpec("c", 1), &again).ok());

  EXPECT_EQ(Get(b.id()).spec().labels().at("team"), "lm");
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    mesa::v1::GetJobRequest r;
    r.set_id("job-424242");
    mesa::v1::Job j;
    EXPECT_EQ(jobs_->GetJob(&ctx, r, &j).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    mesa::v1::ListJobsRequest r;
    (*r.mutable_labels())["team"] = "lm";
    mesa::v1::ListJobsResponse resp;
    ASSERT_TRUE(jobs_->ListJobs(&ctx, r, &resp).ok());
    ASSERT_EQ(resp.jobs_size(), 1);
    EXPECT_EQ(resp.jobs(0).id(), b.id());
  }
  {
    // Paging through all 5 jobs, 2 at a time, with a queue and state filter on the way.
    std::vector<std::string> seen;
    std::string token;
    do {
      grpc::ClientContext ctx;
      Deadline(&ctx);
      mesa::v1::ListJobsRequest r;
      r.set_page_size(2);
      r.set_page_token(token);
      r.add_states(JobState::JOB_STATE_QUEUED);
      mesa::v1::ListJobsResponse resp;
      ASSERT_TRUE(jobs_->ListJobs(&ctx, r, &resp).ok());
      for (const auto& j : resp.jobs()) seen.push_back(j.id());
      token = resp.next_page_token();
    } while (!token.empty() && seen.size() < 10);
    EXPECT_EQ(seen.size(), 5u);
    grpc::ClientContext ctx;
    Deadline(&ctx);
    mesa::v1::ListJobsRequest r;
    r.set_queue("research");
    mesa::v1::ListJobsResponse resp;
    ASSERT_TRUE(jobs_->ListJobs(&ctx, r, &resp).ok());
    EXPECT_EQ(resp.jobs_size(), 1);
  }
  const std::string text = metrics_.Serialize();
  EXPECT_NE(text.find("mesa_coordinator_submissions_total{code=\"ALREADY_EXISTS\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("mesa_coordinator_rpcs_total{code=\"NOT_FOUND\",method=\"GetJob\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("mesa_coordinator_jobs{state=\"queued\"} 5"), std::string::npos);
}

TEST_F(ServiceTest, OpenWatchAndLogStreamsAreCapped) {
  // Regression: every watch/log stream held a server thread without bound (3,020 threads for
  // 3,000 streams).
  auto capped = Server::Start("127.0.0.1:0", coordinator_.get(), &metrics_,
                              {.max_open_streams = 2, .max_streams_per_connection = 0});
  ASSERT_TRUE(capped.ok()) << capped.status();
  auto stub = mesa::v1::JobService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*capped)->port()), grpc::InsecureChannelCredentials()));
  mesa::v1::Job job;
  ASSERT_TRUE(Submit(ValidTrainSpec("watched", 1), &job).ok());  // stays PENDING: streams follow
  grpc::ClientContext watch_ctx, logs_ctx;
  Deadline(&watch_ctx);
  Deadline(&logs_ctx);
  mesa::v1::WatchJobRequest watch;
  watch.set_id(job.id());
  auto watcher = stub->WatchJob(&watch_ctx, watch);
  mesa::v1::JobEvent event;
  ASSERT_TRUE(watcher->Read(&event));  // the replayed SUBMITTED event: the stream is open
  mesa::v1::GetJobLogsRequest logs;
  logs.set_id(job.id());
  logs.set_follow(true);
  auto follower = stub->GetJobLogs(&logs_ctx, logs);
  // The third stream is refused, with the limit named; unary calls still work.
  auto third = [&]() {
    grpc::ClientContext ctx;
    Deadline(&ctx, 2);
    auto reader = stub->WatchJob(&ctx, watch);
    mesa::v1::JobEvent e;
    bool got_event = reader->Read(&e);
    if (got_event) ctx.TryCancel();
    return reader->Finish();
  };
  // The log follower sends nothing until a line exists; wait until the server counts it.
  grpc::Status refused;
  for (int i = 0; i < 100; ++i) {
    refused = third();
    if (refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) break;
  }
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("at most 2 watch and log streams"), std::string::npos);
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    mesa::v1::GetJobRequest get;
    get.set_id(job.id());
    mesa::v1::Job got;
    EXPECT_TRUE(stub->GetJob(&ctx, get, &got).ok());
  }
  // Closing one frees its place.
  watch_ctx.TryCancel();
  watcher->Finish();
  grpc::Status reopened;
  for (int i = 0; i < 100; ++i) {
    reopened = third();
    if (reopened.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(reopened.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << reopened.error_message();
  logs_ctx.TryCancel();
  follower->Finish();
  (*capped)->Shutdown();
}

// A channel with its own TCP connection: gRPC shares one connection between channels to the same
// address with the same arguments (its global subchannel pool) unless told not to.
std::shared_ptr<grpc::Channel> OwnConnection(int port) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

// An open WatchJob stream (its first event read), or the status it was refused with.
struct Watch {
  std::unique_ptr<grpc::ClientContext> ctx = std::make_unique<grpc::ClientContext>();
  std::unique_ptr<grpc::ClientReader<mesa::v1::JobEvent>> reader;
  grpc::Status refused;
  bool open() const { return refused.ok(); }
  ~Watch() {
    if (reader == nullptr || !open()) return;
    ctx->TryCancel();
    reader->Finish();
  }
};

std::unique_ptr<Watch> OpenWatch(mesa::v1::JobService::Stub* stub, const std::string& job) {
  auto w = std::make_unique<Watch>();
  w->ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  mesa::v1::WatchJobRequest request;
  request.set_id(job);
  w->reader = stub->WatchJob(w->ctx.get(), request);
  mesa::v1::JobEvent event;
  if (!w->reader->Read(&event)) {  // the replayed SUBMITTED event: the server holds the stream
    w->refused = w->reader->Finish();
    if (w->refused.ok()) w->refused = grpc::Status(grpc::StatusCode::INTERNAL, "ended at once");
  }
  return w;
}

TEST_F(ServiceTest, StreamsArePerConnectionCappedOnARealServer) {
  // "Per connection: max concurrent streams". Several watches multiplexed on one
  // channel (one TCP connection) stop at the per-connection cap; another connection still gets
  // its own, below the server-wide cap.
  auto server = Server::Start("127.0.0.1:0", coordinator_.get(), &metrics_,
                              {.max_open_streams = 10, .max_streams_per_connection = 2});
  ASSERT_TRUE(server.ok()) << server.status();
  mesa::v1::Job job;
  ASSERT_TRUE(Submit(ValidTrainSpec("watched", 1), &job).ok());  // stays queued: watches stay open
  auto one = mesa::v1::JobService::NewStub(OwnConnection((*server)->port()));
  auto two = mesa::v1::JobService::NewStub(OwnConnection((*server)->port()));
  std::vector<std::unique_ptr<Watch>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(OpenWatch(one.get(), job.id()));
    ASSERT_TRUE(held.back()->open()) << held.back()->refused.error_message();
  }
  std::unique_ptr<Watch> third = OpenWatch(one.get(), job.id());
  ASSERT_EQ(third->refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << third->refused.error_message();
  EXPECT_NE(third->refused.error_message().find("max_streams_per_connection"), std::string::npos)
      << third->refused.error_message();
  EXPECT_NE(third->refused.error_message().find("at most 2 "), std::string::npos);
  // The same three watches spread over two connections are all served.
  for (int i = 0; i < 2; ++i) {
    held.push_back(OpenWatch(two.get(), job.id()));
    EXPECT_TRUE(held.back()->open()) << held.back()->refused.error_message();
  }
  // Closing a stream frees its connection's slot (the server notices the cancellation soon).
  held.erase(held.begin());
  bool reopened = false;
  for (int i = 0; i < 100 && !reopened; ++i) {
    std::unique_ptr<Watch> again = OpenWatch(one.get(), job.id());
    reopened = again->open();
    if (!reopened) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(reopened);
  held.clear();
  (*server)->Shutdown();
}

TEST_F(ServiceTest, FakeAgentRunsAJobEndToEnd) {
  const std::string lease = Register("node-1", 2);
  mesa::v1::Job job;
  ASSERT_TRUE(Submit(ValidTrainSpec("e2e", 2), &job).ok());

  // Watch from the start in the background; the stream must end by itself when the job ends.
  std::vector<mesa::v1::JobEvent> events;
  std::thread watcher([&] {
    grpc::ClientContext ctx;
    Deadline(&ctx, 20);
    mesa::v1::WatchJobRequest r;
    r.set_id(job.id());
    auto reader = jobs_->WatchJob(&ctx, r);
    mesa::v1::JobEvent e;
    while (reader->Read(&e)) events.push_back(e);
    EXPECT_TRUE(reader->Finish().ok());
  });

  auto hb = Poll("node-1", lease);
  ASSERT_EQ(hb.assignments_size(), 1);
  const auto& a = hb.assignments(0);
  EXPECT_EQ(a.job_id(), job.id());
  EXPECT_EQ(a.world_size(), 2);
  ASSERT_EQ(a.ranks_size(), 2);
  EXPECT_EQ(a.ranks(1).rank(), 1);
  EXPECT_EQ(a.spec().name(), "e2e");

  // Rendezvous: rank 1 waits for rank 0's NCCL id.
  std::string got;
  std::thread rank1([&] {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    mesa::v1::GetRendezvousRequest r;
    r.set_worker_id("node-1");
    r.set_lease_id(lease);
    r.set_job_id(job.id());
    r.set_attempt(a.attempt());
    r.set_key("nccl-id");
    r.set_wait_ms(5000);
    mesa::v1::GetRendezvousResponse resp;
    EXPECT_TRUE(workers_->GetRendezvous(&ctx, r, &resp).ok());
    got = resp.value();
  });
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    mesa::v1::PutRendezvousRequest r;
    r.set_worker_id("node-1");
    r.set_lease_id(lease);
    r.set_job_id(job.id());
    r.set_attempt(a.attempt());
    r.set_key("nccl-id");
    r.set_value("\x01\x02unique");
    mesa::v1::PutRendezvousResponse resp;
    ASSERT_TRUE(workers_->PutRendezvous(&ctx, r, &resp).ok());
  }
  rank1.join();
  EXPECT_EQ(got, "\x01\x02unique");
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    mesa::v1::GetRendezvousRequest r;
    r.set_worker_id("node-1");
    r.set_lease_id(lease);
    r.set_job_id(job.id());
    r.set_attempt(a.attempt());
    r.set_key("missing");
    r.set_wait_ms(50);
    mesa::v1::GetRendezvousResponse resp;
    EXPECT_EQ(workers_->GetRendezvous(&ctx, r, &resp).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }

  mesa::v1::UpdateAttemptRequest u;
  u.set_worker_id("node-1");
  u.set_lease_id(lease);
  u.set_job_id(job.id());
  u.set_attempt(a.attempt());
  u.set_phase(mesa::v1::ATTEMPT_PHASE_RUNNING);
  u.mutable_progress()->set_step(10);
  u.mutable_progress()->set_loss(3.5f);
  u.mutable_progress()->set_tokens_per_second(1234);
  u.set_checkpoint_path("/ckpt/step-10");
  for (int i = 0; i < 3; ++i) {
    auto* l = u.add_logs();
    l->set_stream("stdout");
    l->set_text(absl::StrCat("step ", i));
  }
  ASSERT_TRUE(Update(u).ok());
  EXPECT_EQ(Get(job.id()).state(), JobState::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(job.id()).latest_checkpoint(), "/ckpt/step-10");
  mesa::v1::UpdateAttemptRequest stale = u;
  stale.set_attempt(a.attempt() + 1);
  EXPECT_EQ(Update(stale).error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  mesa::v1::UpdateAttemptRequest done;
  done.set_worker_id("node-1");
  done.set_lease_id(lease);
  done.set_job_id(job.id());
  done.set_attempt(a.attempt());
  done.set_phase(mesa::v1::ATTEMPT_PHASE_SUCCEEDED);
  done.mutable_result()->set_final_loss(2.5f);
  ASSERT_TRUE(Update(done).ok());
  watcher.join();

  mesa::v1::Job final_job = Get(job.id());
  EXPECT_EQ(final_job.state(), JobState::JOB_STATE_SUCCEEDED);
  EXPECT_FLOAT_EQ(final_job.result().final_loss(), 2.5f);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state(), JobState::JOB_STATE_SUCCEEDED);
  std::vector<JobState> states;
  bool saw_progress = false, saw_checkpoint = false, saw_result = false;
  for (size_t i = 0; i < events.size(); ++i) {
    if (i > 0) {
      EXPECT_GT(events[i].sequence(), events[i - 1].sequence());
    }
    if (events[i].type() == mesa::v1::JOB_EVENT_TYPE_STATE_CHANGED)
      states.push_back(events[i].state());
    saw_progress |= events[i].type() == mesa::v1::JOB_EVENT_TYPE_PROGRESS;
    saw_checkpoint |= events[i].type() == mesa::v1::JOB_EVENT_TYPE_CHECKPOINT;
    saw_result |= events[i].type() == mesa::v1::JOB_EVENT_TYPE_RESULT;
  }
  EXPECT_EQ(states,
            (std::vector<JobState>{JobState::JOB_STATE_QUEUED, JobState::JOB_STATE_SCHEDULED,
                                   JobState::JOB_STATE_RUNNING, JobState::JOB_STATE_SUCCEEDED}));
  EXPECT_TRUE(saw_progress && saw_checkpoint && saw_result);

  // Replay from a sequence: only later events.
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    mesa::v1::WatchJobRequest r;
    r.set_id(job.id());
    r.set_from_sequence(events[1].sequence());
    auto reader = jobs_->WatchJob(&ctx, r);
    mesa::v1::JobEvent e;
    int n = 0;
    while (reader->Read(&e)) {
      EXPECT_GT(e.sequence(), events[1].sequence());
      ++n;
    }
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_EQ(n, static_cast<int>(events.size()) - 2);
  }
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    mesa::v1::GetJobLogsRequest r;
    r.set_id(job.id());
    r.set_from_sequence(1);
    auto reader = jobs_->GetJobLogs(&ctx, r);
    std::vector<std::string> lines;
    mesa::v1::LogLine l;
    while (reader->Read(&l)) lines.push_back(l.text());
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_EQ(lines, (std::vector<std::string>{"step 1", "step 2"}));
  }
}

TEST_F(ServiceTest, CancelRunningJobThroughTheAgent) {
  const std::string lease = Register("node-1", 1);
  mesa::v1::Job job;
  ASSERT_TRUE(Submit(ValidTrainSpec("cancel-me", 1), &job).ok());
  auto hb = Poll("node-1", lease);
  ASSERT_EQ(hb.assignments_size(), 1);
  mesa::v1::UpdateAttemptRequest u;
  u.set_worker_id("node-1");
  u.set_lease_id(lease);
  u.set_job_id(job.id());
  u.set_attempt(1);
  u.set_phase(mesa::v1::ATTEMPT_PHASE_RUNNING);
  ASSERT_TRUE(Update(u).ok());
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    mesa::v1::CancelJobRequest r;
    r.set_id(job.id());
    mesa::v1::Job j;
    ASSERT_TRUE(jobs_->CancelJob(&ctx, r, &j).ok());
    EXPECT_EQ(j.state(), JobState::JOB_STATE_RUNNING);
  }
  hb = Poll("node-1", lease);
  ASSERT_EQ(hb.cancellations_size(), 1);
  mesa::v1::UpdateAttemptResponse resp;
  ASSERT_TRUE(Update(u, &resp).ok());
  EXPECT_TRUE(resp.cancel_requested());
  u.set_phase(mesa::v1::ATTEMPT_PHASE_STOPPED);
  ASSERT_TRUE(Update(u).ok());
  EXPECT_EQ(Get(job.id()).state(), JobState::JOB_STATE_CANCELLED);
  grpc::ClientContext ctx;
  Deadline(&ctx);
  mesa::v1::CancelJobRequest r;
  r.set_id(job.id());
  mesa::v1::Job j;
  EXPECT_EQ(jobs_->CancelJob(&ctx, r, &j).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

// grpc.health.v1.Health/Check with an empty request over `channel`: the response's bytes
// ("\x08\x01" is SERVING), or the call's error.
absl::StatusOr<std::string> HealthCheck(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub generic(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      std::lock_guard<std::mutex> l(mu);
                      status = s;
                      done = true;
                      cv.notify_all();
                    });
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done; });
  }
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::InternalError("unreadable health response");
  std::string bytes;
  for (auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

TEST_F(ServiceTest, HealthAndExplainAnswer) {
  absl::StatusOr<std::string> health = HealthCheck(channel_);
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, std::string("\x08\x01", 2));

  mesa::v1::Job job;
  ASSERT_TRUE(Submit(ValidTrainSpec("waits", 1), &job).ok());
  grpc::ClientContext ectx;
  Deadline(&ectx);
  mesa::v1::ExplainJobRequest er;
  er.set_id(job.id());
  mesa::v1::ExplainJobResponse resp;
  ASSERT_TRUE(jobs_->ExplainJob(&ectx, er, &resp).ok());
  EXPECT_EQ(resp.queue_position(), 1);
  EXPECT_NE(resp.reason().find("no live workers"), std::string::npos) << resp.reason();
}

// --health_listen: the kubelet's probe reaches grpc.health.v1 in plaintext on a port of its own
// (the service port needs TLS in a cluster); that port serves no job RPC and stops answering at
// shutdown.
TEST_F(ServiceTest, HealthPortServesHealthOnly) {
  auto server = Server::Start("127.0.0.1:0", coordinator_.get(), &metrics_, {}, {}, "127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NE((*server)->health_port(), 0);
  ASSERT_NE((*server)->health_port(), (*server)->port());
  auto health_channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->health_port()),
                                            grpc::InsecureChannelCredentials());
  absl::StatusOr<std::string> health = HealthCheck(health_channel);
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, std::string("\x08\x01", 2));
  auto jobs = mesa::v1::JobService::NewStub(health_channel);
  grpc::ClientContext ctx;
  Deadline(&ctx);
  mesa::v1::ListJobsRequest req;
  mesa::v1::ListJobsResponse resp;
  EXPECT_EQ(jobs->ListJobs(&ctx, req, &resp).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  (*server)->Shutdown();
  EXPECT_FALSE(HealthCheck(health_channel).ok());
}

}  // namespace
}  // namespace mesa::coordinator
