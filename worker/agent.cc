#include "worker/agent.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/grpc_target.h"
#include "launch/trainer_launch.h"
#include "proto/worker_api_limits.h"

namespace mesa::worker {
namespace {

// A call to the coordinator gives up `timeout` from now.
void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
}

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace

void LogLine(const std::string& text) {
  const std::string now =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3S", absl::Now(), absl::LocalTimeZone());
  std::fprintf(stderr, "%s mesa-worker: %s\n", now.c_str(), text.c_str());
  std::fflush(stderr);
}

Agent::Agent(AgentOptions options, WorkerMetrics* metrics)
    : options_(std::move(options)), metrics_(metrics) {
  ResetChannel();
  if (metrics_ != nullptr) {
    metrics_->SetGpusTotal(static_cast<int>(options_.resources.gpus.size()));
    std::map<int, std::string> uuids;
    for (const GpuDevice& gpu : options_.resources.gpus) uuids[gpu.index] = gpu.uuid;
    metrics_->SetGpuUuids(std::move(uuids));
  }
}

Agent::~Agent() { Shutdown(); }

void Agent::ResetChannel() {
  grpc::ChannelArguments args;
  base::SetCoordinatorClientArgs(args, options_.coordinator);
  // Its own subchannel: otherwise a new channel shares the old one's backoff state.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Several replicated coordinators' addresses: one channel over all (main checked the list).
  const absl::StatusOr<std::string> target = base::CoordinatorTarget(options_.coordinator);
  auto channel = grpc::CreateCustomChannel(
      target.ok() ? *target : options_.coordinator,
      options_.credentials != nullptr ? options_.credentials : grpc::InsecureChannelCredentials(),
      args);
  std::shared_ptr<mesa::v1::WorkerService::Stub> stub = mesa::v1::WorkerService::NewStub(channel);
  absl::MutexLock lock(&stub_mu_);
  stub_ = std::move(stub);
}

std::shared_ptr<mesa::v1::WorkerService::Stub> Agent::stub() {
  absl::MutexLock lock(&stub_mu_);
  return stub_;
}

bool Agent::shutting_down() {
  absl::MutexLock lock(&mu_);
  return shutdown_;
}

void Agent::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  if (poll_context_ != nullptr) poll_context_->TryCancel();
}

std::string Agent::CheckpointDirFor(const mesa::v1::Assignment& assignment) const {
  // The coordinator's choice when it made one (the same for every attempt of the job).
  if (!assignment.checkpoint_dir().empty()) return assignment.checkpoint_dir();
  return launch::JobCheckpointDir(assignment.spec().checkpoint().dir(), options_.checkpoint_root,
                                  assignment.job_id());
}

std::vector<mesa::v1::RunningAttempt> Agent::Running() {
  absl::MutexLock lock(&mu_);
  std::vector<mesa::v1::RunningAttempt> running;
  for (const auto& [key, runner] : runners_) {
    // Until its final report is delivered, an attempt counts as running here: the coordinator
    // must neither restart it elsewhere nor forget it.
    if (runner->finished() || orphans_.count(key) > 0) continue;
    mesa::v1::RunningAttempt attempt;
    attempt.set_job_id(key.first);
    attempt.set_attempt(key.second);
    running.push_back(std::move(attempt));
  }
  return running;
}

absl::Status Agent::Register() {
  mesa::v1::RegisterWorkerRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_hostname(options_.hostname);
  for (const GpuDevice& gpu : options_.resources.gpus) {
    auto* info = request.mutable_resources()->add_gpus();
    info->set_index(gpu.index);
    info->set_name(gpu.name);
    info->set_memory_bytes(gpu.memory_bytes);
  }
  request.mutable_resources()->set_cpu_slots(options_.resources.cpu_slots);
  // Measured once at start: the same figure on every re-registration, while trainers run too.
  request.mutable_resources()->set_memory_bytes(options_.resources.memory_bytes);
  for (auto& running : Running()) *request.add_running() = std::move(running);
  {
    absl::MutexLock lock(&mu_);
    request.set_lease_id(lease_id_);  // proves a re-registration comes from the lease's holder
  }

  grpc::ClientContext context;
  SetDeadline(context, options_.rpc_timeout);
  mesa::v1::RegisterWorkerResponse response;
  grpc::Status status = stub()->RegisterWorker(&context, request, &response);
  if (!status.ok()) return FromGrpc(status);
  {
    absl::MutexLock lock(&mu_);
    lease_id_ = response.lease_id();
    acked_delivery_ = 0;  // delivery sequences are per lease
    if (response.heartbeat_interval_ms() > 0) {
      heartbeat_interval_ms_ = response.heartbeat_interval_ms();
    }
    // Poll for at most a third of the lease so one slow answer cannot let it lapse.
    if (response.lease_ttl_ms() > 0) {
      heartbeat_interval_ms_ = std::min(heartbeat_interval_ms_, response.lease_ttl_ms() / 3);
    }
  }
  LogLine(absl::StrCat("registered as ", options_.worker_id, " with ", options_.coordinator, " (",
                       options_.resources.gpus.size(), " GPUs, ", options_.resources.cpu_slots,
                       " CPU slots, ", options_.resources.memory_bytes >> 20, " MiB memory, ",
                       request.running_size(), " running attempts)"));
  for (const auto& stop : response.stop()) {
    StopAttempt(stop.job_id(), stop.attempt(), "the coordinator does not run this attempt here",
                /*orphan=*/true);
  }
  return absl::OkStatus();
}

absl::Status Agent::HeartbeatOnce() {
  mesa::v1::HeartbeatRequest request;
  int64_t wait_ms;
  {
    absl::MutexLock lock(&mu_);
    request.set_lease_id(lease_id_);
    request.set_acked_delivery(acked_delivery_);
    wait_ms = heartbeat_interval_ms_;
  }
  request.set_worker_id(options_.worker_id);
  request.set_max_wait_ms(wait_ms);
  for (auto& running : Running()) *request.add_running() = std::move(running);

  grpc::ClientContext context;
  SetDeadline(context, absl::Milliseconds(wait_ms) + options_.rpc_timeout);
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::CancelledError("shutting down");
    poll_context_ = &context;
  }
  mesa::v1::HeartbeatResponse response;
  grpc::Status status = stub()->Heartbeat(&context, request, &response);
  {
    absl::MutexLock lock(&mu_);
    poll_context_ = nullptr;
  }
  if (!status.ok()) return FromGrpc(status);
  if (response.reregister())
    return absl::FailedPreconditionError("coordinator asks to re-register");
  for (const auto& cancellation : response.cancellations()) {
    StopAttempt(
        cancellation.job_id(), cancellation.attempt(),
        cancellation.reason().empty() ? "cancelled" : cancellation.reason(),
        /*orphan=*/false,
        absl::Seconds(std::clamp<int64_t>(cancellation.grace_seconds(), 0, kMaxStopGraceSeconds)));
  }
  for (const auto& assignment : response.assignments()) StartAttempt(assignment);
  // Only now: the next heartbeat lists these attempts as running, or acks them if they already
  // ended, so the coordinator does not deliver them again.
  absl::MutexLock lock(&mu_);
  acked_delivery_ = std::max(acked_delivery_, response.delivery_seq());
  return absl::OkStatus();
}

absl::StatusOr<UpdateReply> Agent::SendUpdate(mesa::v1::UpdateAttemptRequest& request) {
  request.set_worker_id(options_.worker_id);
  {
    absl::MutexLock lock(&mu_);
    request.set_lease_id(lease_id_);
  }
  grpc::ClientContext context;
  SetDeadline(context, options_.rpc_timeout);
  mesa::v1::UpdateAttemptResponse response;
  grpc::Status status = stub()->UpdateAttempt(&context, request, &response);
  if (!status.ok()) {
    if (request.phase() != mesa::v1::ATTEMPT_PHASE_RUNNING) {
      LogLine(absl::StrCat("reporting ", request.job_id(), " attempt ", request.attempt(),
                           " failed: ", status.error_message()));
    }
    return FromGrpc(status);
  }
  UpdateReply reply;
  reply.cancel_requested = response.cancel_requested();
  return reply;
}

absl::Status Agent::CheckAssignment(const mesa::v1::Assignment& assignment) {
  const std::string& id = assignment.job_id();
  bool safe = !id.empty() && id.size() <= 128 && id != "." && id != "..";
  for (char c : id) {
    safe &= absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  }
  if (!safe) {
    return absl::InvalidArgumentError(
        absl::StrCat("job id \"", absl::CHexEscape(id.substr(0, 128)),
                     "\" cannot name a directory (1 to 128 of [A-Za-z0-9._-])"));
  }
  if (assignment.attempt() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("attempt ", assignment.attempt(), " of ", id));
  }
  if (!assignment.checkpoint_dir().empty() && assignment.checkpoint_dir()[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint root \"",
                                                   assignment.checkpoint_dir().substr(0, 256),
                                                   "\" of ", id, " is not an absolute path"));
  }
  return absl::OkStatus();
}

void Agent::StartAttempt(const mesa::v1::Assignment& assignment) {
  if (absl::Status safe = CheckAssignment(assignment); !safe.ok()) {
    // Nothing is created or started from such an assignment (paths outside the roots).
    LogLine(absl::StrCat("refused an assignment: ", safe.message()));
    return;
  }
  const Key key(assignment.job_id(), assignment.attempt());
  AttemptOptions attempt;
  attempt.trainer = options_.trainer;
  attempt.attempt_dir = absl::StrCat(options_.workdir, "/jobs/", assignment.job_id(), "/attempt-",
                                     assignment.attempt());
  attempt.checkpoint_dir = CheckpointDirFor(assignment);
  attempt.coordinator = options_.coordinator;
  attempt.worker_id = options_.worker_id;
  attempt.rendezvous_stub = [this] { return stub(); };
  attempt.identity = [this] {
    absl::MutexLock lock(&mu_);
    return std::make_pair(options_.worker_id, lease_id_);
  };
  attempt.advertise_host = options_.advertise_host;
  attempt.collective_timeout = options_.collective_timeout;
  attempt.stall_timeout = options_.stall_timeout;
  attempt.grace = options_.grace;
  attempt.flush_interval = options_.flush_interval;
  attempt.base_env = options_.base_env;
  attempt.extra_args = options_.trainer_extra_args;
  std::vector<std::string> ranks;
  for (const auto& rank : assignment.ranks()) {
    ranks.push_back(rank.gpu_index() >= 0 ? absl::StrCat(rank.rank(), "@gpu", rank.gpu_index())
                                          : absl::StrCat(rank.rank(), "@cpu"));
  }
  absl::MutexLock lock(&mu_);
  if (shutdown_) return;
  // Delivered again (re-registration, or an answer the coordinator took for lost): already ours.
  if (runners_.count(key) > 0 || done_.count(key) > 0) return;
  LogLine(absl::StrCat("starting ", assignment.job_id(), " attempt ", assignment.attempt(),
                       " ranks [", absl::StrJoin(ranks, ","), "] of ", assignment.world_size(),
                       "; checkpoints in ", attempt.checkpoint_dir));
  if (metrics_ != nullptr) metrics_->CountAssignment();
  auto runner = std::make_unique<AttemptRunner>(
      assignment, std::move(attempt),
      [this](mesa::v1::UpdateAttemptRequest& request) { return SendUpdate(request); }, metrics_);
  runner->Start();
  runners_[key] = std::move(runner);
}

void Agent::StopAttempt(const std::string& job_id, int attempt, const std::string& reason,
                        bool orphan, absl::Duration grace) {
  absl::MutexLock lock(&mu_);
  const Key key(job_id, attempt);
  auto it = runners_.find(key);
  if (it == runners_.end()) return;
  if (it->second->Stop(reason, grace)) {
    LogLine(absl::StrCat("stopping ", job_id, " attempt ", attempt, ": ", reason));
  }
  if (orphan) {
    // Its final report would be refused: do not keep retrying it, nor report it as running.
    orphans_.insert(key);
    it->second->Abandon();
  }
}

int Agent::PruneAttemptDirs() {
  namespace fs = std::filesystem;
  if (options_.attempt_retention <= absl::ZeroDuration()) return 0;
  const auto cutoff =
      fs::file_time_type::clock::now() - absl::ToChronoNanoseconds(options_.attempt_retention);
  std::error_code error;
  int removed = 0;
  for (const fs::directory_entry& job : fs::directory_iterator(options_.workdir + "/jobs", error)) {
    if (!job.is_directory(error)) continue;
    for (const fs::directory_entry& dir : fs::directory_iterator(job.path(), error)) {
      int attempt = 0;
      const std::string name = dir.path().filename().string();
      if (!dir.is_directory(error) || !absl::StartsWith(name, "attempt-") ||
          !absl::SimpleAtoi(name.substr(8), &attempt)) {
        continue;
      }
      {
        absl::MutexLock lock(&mu_);
        if (runners_.count({job.path().filename().string(), attempt}) > 0) continue;
      }
      // The newest write inside says when the attempt was last active.
      auto newest = fs::last_write_time(dir.path(), error);
      for (const fs::directory_entry& file : fs::recursive_directory_iterator(dir.path(), error)) {
        newest = std::max(newest, fs::last_write_time(file.path(), error));
      }
      if (newest >= cutoff) continue;
      if (fs::remove_all(dir.path(), error) != static_cast<std::uintmax_t>(-1) && !error) {
        ++removed;
      }
    }
    if (fs::is_empty(job.path(), error) && !error) fs::remove(job.path(), error);
  }
  if (removed > 0) {
    LogLine(absl::StrCat("removed ", removed, " attempt directories older than ",
                         absl::FormatDuration(options_.attempt_retention),
                         " (--attempt_retention)"));
  }
  return removed;
}

void Agent::ReapFinished() {
  std::vector<std::unique_ptr<AttemptRunner>> done;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = runners_.begin(); it != runners_.end();) {
      if (it->second->finished()) {
        const auto report = it->second->final_report();
        LogLine(absl::StrCat(
            it->first.first, " attempt ", it->first.second,
            " ended: ", mesa::v1::AttemptPhase_Name(report.phase()),
            report.message().empty() ? "" : absl::StrCat(" (", report.message(), ")")));
        done.push_back(std::move(it->second));
        orphans_.erase(it->first);
        if (done_.insert(it->first).second) done_order_.push_back(it->first);
        if (done_order_.size() > kDoneMemory) {
          done_.erase(done_order_.front());
          done_order_.pop_front();
        }
        it = runners_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Joined outside the lock: a runner's thread may be calling SendUpdate, which takes it.
  for (auto& runner : done) runner->Join();
}

void Agent::Run() {
  bool registered = false;
  absl::Duration backoff = absl::Milliseconds(100);
  absl::Time next_prune = absl::InfinitePast();
  std::string last_error;
  while (!shutting_down()) {
    ReapFinished();
    if (absl::Now() >= next_prune) {
      PruneAttemptDirs();
      next_prune = absl::Now() + absl::Hours(1);
    }
    const absl::Time started = absl::Now();
    absl::Status status = registered ? HeartbeatOnce() : Register();
    if (status.ok()) {
      registered = true;
      backoff = absl::Milliseconds(100);
      last_error.clear();
      // A poll answered at once (a cancellation for an attempt that is still stopping) must not
      // turn into a busy loop.
      const absl::Duration spent = absl::Now() - started;
      if (spent < absl::Milliseconds(200)) absl::SleepFor(absl::Milliseconds(200) - spent);
      continue;
    }
    if (shutting_down()) break;
    // UNAUTHENTICATED from RegisterWorker itself is this node's credentials (no or a wrong client
    // certificate): retried with backoff below, not in a tight loop.
    if (status.code() == absl::StatusCode::kFailedPrecondition ||
        status.code() == absl::StatusCode::kNotFound ||
        (registered && status.code() == absl::StatusCode::kUnauthenticated)) {
      registered = false;  // Lease unknown: the coordinator restarted or declared us lost.
      LogLine(absl::StrCat("re-registering: ", status.message()));
      continue;
    }
    const std::string error = std::string(status.message());
    if (error != last_error) {
      LogLine(absl::StrCat(registered ? "heartbeat" : "register", " failed (",
                           absl::StatusCodeToString(status.code()), "): ", error,
                           "; retrying with backoff"));
      last_error = error;
    }
    // A later success re-registers if the coordinator lost our lease meanwhile (it says so).
    if (status.code() == absl::StatusCode::kUnavailable ||
        status.code() == absl::StatusCode::kDeadlineExceeded) {
      ResetChannel();
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }

  // Shutdown: drain this worker with eviction first, so that the attempts stopped below are
  // rescheduled without using a retry and nothing new comes; then stop trainers (they
  // checkpoint), report, and give up on reports after the grace period plus a little, so the
  // agent always exits.
  if (absl::Status s = DrainSelf(); !s.ok()) {
    LogLine(absl::StrCat("self-drain failed (", s.ToString(),
                         "); the attempts stopped now are retried as failures"));
  }
  LogLine("shutting down: stopping trainers");
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, runner] : runners_) runner->Stop("worker shutting down");
  }
  const absl::Time deadline = absl::Now() + options_.grace + absl::Seconds(10);
  while (true) {
    ReapFinished();
    {
      absl::MutexLock lock(&mu_);
      if (runners_.empty()) break;
      if (absl::Now() >= deadline) {
        for (auto& [key, runner] : runners_) runner->Abandon();
      }
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  // A clean goodbye: the coordinator forgets this worker now instead of counting it lost when
  // its lease runs out (MesaWorkersLost alerts on lease expiries only).
  if (absl::Status s = Deregister(); !s.ok()) {
    LogLine(absl::StrCat("deregistration failed (", s.ToString(),
                         "); the coordinator counts this worker lost when its lease runs out"));
  }
  LogLine("stopped");
}

absl::Status Agent::DrainSelf() {
  mesa::v1::DrainSelfRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_reason(mesa::v1::DRAIN_REASON_AGENT_STOPPING);
  {
    absl::MutexLock lock(&mu_);
    if (lease_id_.empty() || runners_.empty()) return absl::OkStatus();  // nothing to evict
    request.set_lease_id(lease_id_);
  }
  grpc::ClientContext context;
  SetDeadline(context, options_.rpc_timeout);
  mesa::v1::DrainSelfResponse response;
  return FromGrpc(stub()->DrainSelf(&context, request, &response));
}

absl::Status Agent::FollowNodeCordon(bool cordoned) {
  std::string lease;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("the agent is stopping");
    if (lease_id_.empty()) return absl::UnavailableError("not registered yet");
    if (node_cordon_lease_ == lease_id_ && node_cordon_applied_ == cordoned) {
      return absl::OkStatus();
    }
    lease = lease_id_;
  }
  grpc::ClientContext context;
  SetDeadline(context, options_.rpc_timeout);
  mesa::v1::WorkerInfo worker;
  grpc::Status status;
  if (cordoned) {
    mesa::v1::DrainSelfRequest request;
    request.set_worker_id(options_.worker_id);
    request.set_lease_id(lease);
    request.set_reason(mesa::v1::DRAIN_REASON_NODE_CORDONED);
    mesa::v1::DrainSelfResponse response;
    status = stub()->DrainSelf(&context, request, &response);
    worker = response.worker();
  } else {
    mesa::v1::UncordonSelfRequest request;
    request.set_worker_id(options_.worker_id);
    request.set_lease_id(lease);
    mesa::v1::UncordonSelfResponse response;
    status = stub()->UncordonSelf(&context, request, &response);
    worker = response.worker();
  }
  if (!status.ok()) return FromGrpc(status);
  {
    absl::MutexLock lock(&mu_);
    node_cordon_lease_ = lease;
    node_cordon_applied_ = cordoned;
  }
  if (cordoned) {
    LogLine("node cordoned: draining (no new jobs; running ones continue)");
  } else if (worker.draining()) {
    LogLine(absl::StrCat("node uncordoned; still draining: ",
                         mesa::v1::DrainReason_Name(worker.drain_reason())));
  } else {
    LogLine("node schedulable: taking jobs");
  }
  return absl::OkStatus();
}

absl::Status Agent::Deregister() {
  mesa::v1::DeregisterWorkerRequest request;
  request.set_worker_id(options_.worker_id);
  {
    absl::MutexLock lock(&mu_);
    if (lease_id_.empty()) return absl::OkStatus();  // never registered
    request.set_lease_id(lease_id_);
  }
  absl::Status status;
  for (int attempt = 0; attempt < 3; ++attempt) {
    grpc::ClientContext context;
    SetDeadline(context, options_.rpc_timeout);
    mesa::v1::DeregisterWorkerResponse response;
    status = FromGrpc(stub()->DeregisterWorker(&context, request, &response));
    if (status.code() != absl::StatusCode::kUnavailable) return status;
    absl::SleepFor(absl::Milliseconds(200));
  }
  return status;
}

}  // namespace mesa::worker
