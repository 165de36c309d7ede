#include "worker/attempt.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/utf8.h"
#include "google/protobuf/util/json_util.h"
#include "launch/trainer_launch.h"
#include "proto/trainer_events.h"
#include "worker/confinement.h"

namespace mesa::worker {
namespace {

constexpr size_t kStderrLinesKept = 5;
constexpr absl::Duration kLoopTick = absl::Milliseconds(50);

void SetNow(google::protobuf::Timestamp* timestamp) {
  const absl::Time now = absl::Now();
  const int64_t nanos = absl::ToUnixNanos(now);
  timestamp->set_seconds(nanos / 1000000000);
  timestamp->set_nanos(static_cast<int32_t>(nanos % 1000000000));
}

std::string KindName(const ExitOutcome& outcome) {
  switch (outcome.phase) {
    case mesa::v1::ATTEMPT_PHASE_SUCCEEDED:
      return "succeeded";
    case mesa::v1::ATTEMPT_PHASE_STOPPED:
      return "stopped";
    default:
      return outcome.failure_kind == mesa::v1::FAILURE_KIND_USER ? "user" : "infra";
  }
}

// Training writes checkpoints; evaluation and generation only read one.
// Jobs that write under their checkpoint directory: training (checkpoints) and evaluations with
// eval.items_output (per-item records, docs/evaluation.md), which must outlive the attempt.
bool WritesJobDir(const mesa::v1::JobSpec& spec) {
  if (spec.type() == mesa::v1::JOB_TYPE_EVAL) return spec.eval().items_output();
  return spec.type() != mesa::v1::JOB_TYPE_GENERATE;
}

}  // namespace

bool ShouldRetryReport(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:  // coordinator restarting or unreachable
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      // NOT_FOUND / FAILED_PRECONDITION: the coordinator no longer runs this attempt here (it was
      // retried elsewhere or the job ended); repeating the report cannot change that.
      return false;
  }
}

AttemptRunner::AttemptRunner(mesa::v1::Assignment assignment, AttemptOptions options,
                             UpdateSender sender, WorkerMetrics* metrics)
    : assignment_(std::move(assignment)),
      options_(std::move(options)),
      sender_(std::move(sender)),
      metrics_(metrics) {
  for (const auto& rank : assignment_.ranks()) {
    if (rank.rank() == 0) has_rank0_ = true;
  }
}

AttemptRunner::~AttemptRunner() {
  {
    absl::MutexLock lock(&mu_);
    abandoned_ = true;
    if (!stop_requested_) RequestStop("worker shutting down", "");
  }
  Join();
  absl::MutexLock lock(&mu_);
  for (Rank& rank : ranks_) {
    if (rank.log_file != nullptr) fclose(rank.log_file);
    rank.log_file = nullptr;
  }
}

void AttemptRunner::Start() { thread_ = std::thread(&AttemptRunner::Run, this); }

void AttemptRunner::Join() {
  if (thread_.joinable()) thread_.join();
}

bool AttemptRunner::Stop(const std::string& reason, absl::Duration grace) {
  absl::MutexLock lock(&mu_);
  if (stop_requested_) return false;
  const absl::Duration wait = grace > absl::ZeroDuration() ? grace : options_.grace;
  RequestStop(reason, absl::StrCat("stopping trainers (", reason, "); SIGKILL after ",
                                   absl::FormatDuration(wait)));
  kill_deadline_ = absl::Now() + wait;
  return true;
}

void AttemptRunner::RequestStop(const std::string& reason, const std::string& log_text) {
  stop_requested_ = true;
  stop_reason_ = reason;
  kill_deadline_ = absl::Now() + options_.grace;
  if (!log_text.empty()) AddAgentLog(log_text);
  SignalAll(SIGTERM, true);
}

void AttemptRunner::Abandon() {
  absl::MutexLock lock(&mu_);
  abandoned_ = true;
}

bool AttemptRunner::finished() const {
  absl::MutexLock lock(&mu_);
  return finished_;
}

bool AttemptRunner::trainers_running() const {
  absl::MutexLock lock(&mu_);
  return trainers_running_;
}

mesa::v1::UpdateAttemptRequest AttemptRunner::final_report() const {
  absl::MutexLock lock(&mu_);
  return final_report_;
}

std::vector<std::string> AttemptRunner::TrainerArgv(const std::string& config_path) const {
  std::vector<std::string> argv = launch::TrainerArgv(
      options_.trainer, {.config_path = config_path, .workdir = options_.attempt_dir});
  argv.insert(argv.end(), options_.extra_args.begin(), options_.extra_args.end());
  return argv;
}

std::vector<std::string> AttemptRunner::TrainerEnv(const mesa::v1::RankAssignment& rank,
                                                   int local_rank) const {
  launch::TrainerEnvironment env;
  env.job_id = assignment_.job_id();
  env.attempt = assignment_.attempt();
  env.rank = rank.rank();
  env.world_size = std::max(1, assignment_.world_size());
  env.local_rank = local_rank;
  env.coordinator = options_.coordinator;
  env.worker_id = options_.worker_id;
  env.workers.assign(assignment_.workers().begin(), assignment_.workers().end());
  env.checkpoint_dir = options_.checkpoint_dir;
  env.collective_timeout_s = static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Seconds(options_.collective_timeout), 1, 1 << 30));
  if (const std::string dir = RendezvousDir(); !dir.empty()) env.rendezvous = "file:" + dir;
  env.tcp_host = options_.advertise_host;
  env.gpu_index = rank.gpu_index();
  env.cpu_threads = std::max(1, assignment_.spec().resources().cpu_threads());
  return launch::EncodeTrainerEnvironment(env, options_.base_env);
}

std::string AttemptRunner::RendezvousDir() const {
  if (assignment_.world_size() <= 1 || !options_.rendezvous_stub) return "";
  return options_.attempt_dir + "/rendezvous";
}

absl::StatusOr<std::string> AttemptRunner::Prepare() {
  std::error_code error;
  std::filesystem::create_directories(options_.attempt_dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create ", options_.attempt_dir, ": ", error.message()));
  }
  mesa::v1::JobSpec spec = assignment_.spec();
  if (WritesJobDir(spec) && !options_.checkpoint_dir.empty()) {
    // (Created by Run, below its root.) The job's checkpoint root, the same for every attempt: the
    // trainer resumes from the newest valid checkpoint there (docs/launch.md), so no attempt
    // decides where a retry starts.
    spec.mutable_checkpoint()->set_dir(options_.checkpoint_dir);
  }
  // JSON is YAML, and mesa-train reads job files through protobuf's JSON mapping.
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.add_whitespace = true;
  if (auto status = google::protobuf::util::MessageToJsonString(spec, &json, print); !status.ok()) {
    return absl::InternalError(absl::StrCat("cannot encode the job spec: ", status.ToString()));
  }
  const std::string config_path = absl::StrCat(options_.attempt_dir, "/", launch::kJobFileName);
  if (absl::Status written = base::WriteFileAtomically(config_path, json + "\n"); !written.ok()) {
    return written;
  }
  return config_path;
}

void AttemptRunner::AddAgentLog(const std::string& text) {
  mesa::v1::LogLine line;
  SetNow(line.mutable_time());
  line.set_attempt(assignment_.attempt());
  line.set_rank(-1);
  line.set_stream("agent");
  line.set_text(base::SanitizeUtf8(text));
  logs_.push_back(std::move(line));
}

void AttemptRunner::OnLine(int rank_index, Stream stream, std::string line) {
  if (stream == Stream::kEvents) {
    auto event = mesa::ParseEventLine(line);
    absl::MutexLock lock(&mu_);
    last_output_ = absl::Now();
    if (!event.ok()) {
      AddAgentLog(absl::StrCat("ignored event line from rank ",
                               ranks_[rank_index].assignment.rank(), ": ",
                               event.status().message()));
      return;
    }
    OnEvent(rank_index, *event);
    return;
  }
  absl::MutexLock lock(&mu_);
  last_output_ = absl::Now();
  Rank& rank = ranks_[rank_index];
  if (rank.log_file != nullptr) {
    fprintf(rank.log_file, "%s\n", line.c_str());
    fflush(rank.log_file);
  }
  // The rank's log file keeps the bytes; what goes to the coordinator must be UTF-8, or no
  // later update of this attempt could be serialised (a Latin-1 file name in an error, a line
  // split inside a multi-byte character).
  line = base::SanitizeUtf8(line);
  if (stream == Stream::kStderr && !line.empty()) {
    rank.last_stderr.push_back(line);
    if (rank.last_stderr.size() > kStderrLinesKept) rank.last_stderr.pop_front();
  }
  mesa::v1::LogLine log;
  SetNow(log.mutable_time());
  log.set_attempt(assignment_.attempt());
  log.set_rank(rank.assignment.rank());
  log.set_stream(StreamName(stream));
  log.set_text(std::move(line));
  logs_.push_back(std::move(log));
  while (logs_.size() > options_.max_buffered_log_lines) {
    logs_.pop_front();
    ++dropped_logs_;
  }
}

void AttemptRunner::OnEvent(int rank_index, const mesa::v1::TrainerEvent& event) {
  Rank& rank = ranks_[rank_index];
  using Event = mesa::v1::TrainerEvent;
  if (event.has_error()) {
    if (rank.error_message.empty()) rank.error_message = event.error().message();
    return;
  }
  if (event.has_stopped()) stopped_event_ = true;
  if (rank.assignment.rank() != 0) return;  // Rank 0 speaks for the job; the others train alike.
  auto set_checkpoint = [this](const std::string& path, int64_t step) {
    if (!path.empty()) {
      checkpoint_path_ = path;
      checkpoint_dirty_ = true;  // Reported at once: the job's latest checkpoint.
    }
    progress_.set_step(step);
  };
  switch (event.event_case()) {
    case Event::kStep:
      ApplyStep(event.step(), progress_);
      if (metrics_ != nullptr) metrics_->SetJobProgress(assignment_.job_id(), progress_);
      break;
    case Event::kEval:
      ApplyEval(event.eval(), progress_, result_);
      break;
    case Event::kCheckpoint:
      set_checkpoint(event.checkpoint().path(), event.checkpoint().step());
      return;
    case Event::kStopped:
      set_checkpoint(event.stopped().checkpoint(), event.stopped().step());
      return;
    case Event::kResumed:
      AddAgentLog(absl::StrCat("rank 0 resumed from ", event.resumed().checkpoint(), " at step ",
                               event.resumed().step(),
                               event.resumed().skipped_size() == 0
                                   ? ""
                                   : absl::StrCat("; passed over corrupt checkpoints: ",
                                                  absl::StrJoin(event.resumed().skipped(), "; "))));
      set_checkpoint(event.resumed().checkpoint(), event.resumed().step());
      resumed_.emplace();
      resumed_->set_step(event.resumed().step());
      resumed_->set_checkpoint(event.resumed().checkpoint());
      checkpoint_dirty_ = true;  // reported at once, for `mesactl watch`
      return;
    case Event::kResult:
      ApplyResult(event.result(), result_);
      have_result_ = true;
      return;
    default:
      return;  // start, warning, and event types newer than this agent
  }
  // Step and eval events: progress changed.
  SetNow(progress_.mutable_update_time());
  progress_dirty_ = true;
  have_progress_ = true;
}

void AttemptRunner::SignalAll(int sig, bool mark_stop) {
  for (Rank& rank : ranks_) {
    if (rank.process == nullptr || rank.process->exit_status().has_value()) continue;
    rank.process->Signal(sig);
    if (mark_stop) rank.stop_sent = true;
  }
}

mesa::v1::UpdateAttemptRequest AttemptRunner::TakeUpdate(size_t max_logs) {
  mesa::v1::UpdateAttemptRequest update;
  update.set_job_id(assignment_.job_id());
  update.set_attempt(assignment_.attempt());
  update.set_phase(mesa::v1::ATTEMPT_PHASE_RUNNING);
  if (has_rank0_ && have_progress_) *update.mutable_progress() = progress_;
  if (!checkpoint_path_.empty()) update.set_checkpoint_path(checkpoint_path_);
  if (resumed_.has_value()) {
    *update.mutable_resumed() = *resumed_;
    resumed_.reset();
  }
  if (dropped_logs_ > 0) {
    AddAgentLog(absl::StrCat(dropped_logs_,
                             " log lines dropped (trainer output faster than the "
                             "coordinator accepted it)"));
    dropped_logs_ = 0;
  }
  while (!logs_.empty() && static_cast<size_t>(update.logs_size()) < max_logs) {
    *update.add_logs() = std::move(logs_.front());
    logs_.pop_front();
  }
  progress_dirty_ = false;
  checkpoint_dirty_ = false;
  return update;
}

void AttemptRunner::ReturnLogs(const mesa::v1::UpdateAttemptRequest& update) {
  // Undelivered lines go back to the front, in order; the buffer bound still holds.
  for (int i = update.logs_size() - 1; i >= 0; --i) logs_.push_front(update.logs(i));
  if (update.has_resumed() && !resumed_.has_value()) resumed_ = update.resumed();
  while (logs_.size() > options_.max_buffered_log_lines) {
    logs_.pop_back();
    ++dropped_logs_;
  }
  progress_dirty_ = true;
}

void AttemptRunner::FlushProgress() {
  mesa::v1::UpdateAttemptRequest update;
  {
    absl::MutexLock lock(&mu_);
    update = TakeUpdate(options_.max_log_lines_per_update);
  }
  auto reply = sender_(update);
  absl::MutexLock lock(&mu_);
  if (!reply.ok()) {
    ReturnLogs(update);
    if (!ShouldRetryReport(reply.status()) && !stop_requested_) {
      // The coordinator moved on (the attempt was retried elsewhere): this copy must not train on.
      const std::string reason = absl::StrCat("the coordinator no longer runs this attempt here: ",
                                              reply.status().message());
      RequestStop(reason, reason);
    }
    return;
  }
  if (reply->cancel_requested && !stop_requested_) {
    RequestStop("job cancelled", absl::StrCat("job cancelled: stopping trainers; SIGKILL after ",
                                              absl::FormatDuration(options_.grace)));
  }
}

ExitOutcome AttemptRunner::Outcome() {
  // In exit order: CombineOutcomes takes the first failure of a kind, and the rank that failed
  // first (killed, crashed) is the cause; its peers then fail on the broken connection.
  std::vector<const Rank*> by_exit;
  for (const Rank& rank : ranks_) by_exit.push_back(&rank);
  std::stable_sort(by_exit.begin(), by_exit.end(), [](const Rank* a, const Rank* b) {
    return static_cast<unsigned>(a->exit_order) < static_cast<unsigned>(b->exit_order);
  });
  std::vector<ExitOutcome> outcomes;
  for (const Rank* rank_ptr : by_exit) {
    const Rank& rank = *rank_ptr;
    ExitContext context;
    context.stop_requested = rank.stop_sent;
    context.stopped_event = stopped_event_;
    context.user_error_codes = options_.user_error_codes;
    const int status = rank.process->exit_status().value_or(0);
    ExitOutcome outcome = ClassifyExit(status, context);
    if (outcome.phase == mesa::v1::ATTEMPT_PHASE_FAILED) {
      const std::string last_line = rank.last_stderr.empty() ? "" : rank.last_stderr.back();
      if (WIFSIGNALED(status)) {
        // The signal is the reason; its last output (an assertion, a progress line) is context.
        outcome.message = absl::StrCat(outcome.message, " (rank ", rank.assignment.rank(), ")",
                                       last_line.empty() ? "" : "; last output: ", last_line);
      } else {
        // The trainer said why (an "error" event) or at least printed it last on stderr.
        const std::string reason = rank.error_message.empty() ? last_line : rank.error_message;
        if (!reason.empty()) {
          outcome.message = absl::StrCat(reason, " (rank ", rank.assignment.rank(), ": ",
                                         DescribeWaitStatus(status), ")");
        }
      }
    }
    outcomes.push_back(std::move(outcome));
  }
  ExitOutcome combined = CombineOutcomes(outcomes);
  if (stalled_ && combined.phase != mesa::v1::ATTEMPT_PHASE_SUCCEEDED) {
    combined.phase = mesa::v1::ATTEMPT_PHASE_FAILED;
    combined.failure_kind = mesa::v1::FAILURE_KIND_INFRA;
    combined.message = absl::StrCat(
        "the trainer printed nothing for ", absl::FormatDuration(options_.stall_timeout),
        " and was stopped as hung by worker ", options_.worker_id, ": ", combined.message);
  }
  if (combined.phase == mesa::v1::ATTEMPT_PHASE_STOPPED && !stop_reason_.empty()) {
    combined.message = absl::StrCat(stop_reason_, ": ", combined.message);
  }
  return combined;
}

void AttemptRunner::Run() {
  // Confined paths, resolved on this file system before anything is created, then the checkpoint
  // directory made below its root and checked again where it really is (a user error either way).
  const bool writes = WritesJobDir(assignment_.spec());
  absl::Status confined = CheckConfinedPaths(assignment_, writes ? options_.checkpoint_dir : "");
  absl::Status started = confined;
  if (started.ok() && writes && !options_.checkpoint_dir.empty()) {
    started = CreateCheckpointDir(assignment_, options_.checkpoint_dir);
    if (started.code() == absl::StatusCode::kPermissionDenied) confined = started;
  }
  absl::StatusOr<std::string> config_path =
      started.ok() ? Prepare() : absl::StatusOr<std::string>(started);
  started = config_path.status();
  if (started.ok()) started = StartBridge();
  if (started.ok()) started = StartTrainers(*config_path);
  if (started.ok()) Supervise();
  if (bridge_ != nullptr) bridge_->Stop();  // Without mu_: its threads log through it.
  std::string kind;
  mesa::v1::UpdateAttemptRequest final_update = FinalUpdate(started, !confined.ok(), &kind);
  if (metrics_ != nullptr) {
    metrics_->CountExit(kind);
    metrics_->RemoveJob(assignment_.job_id());
  }
  ReportFinal(std::move(final_update));
}

absl::Status AttemptRunner::StartBridge() {
  if (RendezvousDir().empty()) return absl::OkStatus();
  // Before the trainers start, so a value rank 0 writes is published at once.
  RendezvousBridgeOptions bridge;
  bridge.dir = RendezvousDir();
  bridge.job_id = assignment_.job_id();
  bridge.attempt = assignment_.attempt();
  bridge.republish_for = options_.collective_timeout;
  bridge.log = [this](const std::string& text) {
    absl::MutexLock lock(&mu_);
    AddAgentLog(text);
  };
  bridge.identity = options_.identity;
  bridge_ = std::make_unique<RendezvousBridge>(std::move(bridge), options_.rendezvous_stub);
  return bridge_->Start();
}

void AttemptRunner::AddRank(const mesa::v1::RankAssignment& assigned, int local_rank) {
  Rank rank;
  rank.assignment = assigned;
  rank.local_rank = local_rank;
  const std::string log_path =
      absl::StrCat(options_.attempt_dir, "/rank-", assigned.rank(), ".log");
  rank.log_file = fopen(log_path.c_str(), "a");
  if (assigned.rank() == 0) has_rank0_ = true;
  ranks_.push_back(std::move(rank));
}

void AttemptRunner::CountTrainerExit(Rank& rank) {
  if (rank.exit_counted) return;
  rank.exit_counted = true;
  if (metrics_ == nullptr) return;
  metrics_->AddTrainerProcesses(-1);
  if (rank.assignment.gpu_index() >= 0) metrics_->AddGpusAllocated(-1);
}

absl::Status AttemptRunner::StartTrainers(const std::string& config_path) {
  absl::MutexLock lock(&mu_);
  last_output_ = absl::Now();
  int local_rank = 0;
  for (const auto& assigned : assignment_.ranks()) AddRank(assigned, local_rank++);
  if (ranks_.empty()) {
    // A CPU job assigned without explicit ranks: one process, rank 0.
    mesa::v1::RankAssignment only;
    only.set_rank(0);
    only.set_gpu_index(-1);
    AddRank(only, 0);
  }
  AddAgentLog(absl::StrCat("starting ", ranks_.size(), " trainer process(es) on worker ",
                           options_.worker_id, " in ", options_.attempt_dir));
  absl::Status started;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    SpawnOptions spawn;
    spawn.argv = TrainerArgv(config_path);
    spawn.env = TrainerEnv(ranks_[i].assignment, ranks_[i].local_rank);
    spawn.cwd = options_.attempt_dir;
    spawn.events_fd = launch::kEventsFd;
    spawn.max_event_line_bytes = mesa::kMaxEventLineBytes;
    // Spawned from this thread, which lives until the trainers are reaped (PDEATHSIG).
    auto process = Subprocess::Spawn(spawn, [this, i](Stream stream, std::string line) {
      OnLine(static_cast<int>(i), stream, std::move(line));
    });
    if (!process.ok()) {
      started = process.status();
      break;
    }
    ranks_[i].process = std::move(*process);
    if (metrics_ != nullptr) {
      metrics_->AddTrainerProcesses(1);
      if (ranks_[i].assignment.gpu_index() >= 0) {
        metrics_->AddGpusAllocated(1);
        metrics_->AddJobGpu(assignment_.job_id(), ranks_[i].assignment.gpu_index());
      }
      if (assignment_.attempt() > 1) metrics_->CountRestart();
    }
  }
  trainers_running_ = true;
  if (!started.ok()) {
    // Do not leave a partial gang running. Supervise() does not run on this path, so the ranks
    // that did start are taken off the gauges here.
    SignalAll(SIGKILL, false);
    for (Rank& rank : ranks_) {
      if (rank.process != nullptr) CountTrainerExit(rank);
    }
  } else if (stop_requested_) {
    SignalAll(SIGTERM, true);  // Stop() came before the processes existed.
  }
  return started;
}

bool AttemptRunner::CheckRanks() {
  bool all_exited = true, any_failed = false;
  for (Rank& rank : ranks_) {
    auto status = rank.process->exit_status();
    if (!status.has_value()) {
      all_exited = false;
      continue;
    }
    if (!rank.exit_counted) {
      rank.exit_order = exits_seen_++;
      CountTrainerExit(rank);
    }
    if (*status != 0 && !rank.stop_sent) any_failed = true;
  }
  if (all_exited) return true;
  if (options_.stall_timeout > absl::ZeroDuration() && !stalled_ &&
      kill_deadline_ == absl::InfiniteFuture() &&
      absl::Now() - last_output_ >= options_.stall_timeout) {
    // SIGTERM first (a trainer that is merely slow checkpoints); a stopped one takes the SIGKILL.
    stalled_ = true;
    AddAgentLog(absl::StrCat("the trainers printed nothing for ",
                             absl::FormatDuration(options_.stall_timeout),
                             " (--stall_timeout); stopping them as hung"));
    kill_deadline_ = absl::Now() + options_.grace;
    SignalAll(SIGTERM, true);
  }
  if (any_failed && kill_deadline_ == absl::InfiniteFuture()) {
    // One rank failed: the others cannot make progress without it (gang).
    AddAgentLog("a trainer rank failed; stopping the other ranks");
    kill_deadline_ = absl::Now() + options_.grace;
    SignalAll(SIGTERM, true);
  }
  if (absl::Now() >= kill_deadline_) SignalAll(SIGKILL, true);
  return false;
}

void AttemptRunner::Supervise() {
  FlushProgress();  // RUNNING at once, so the job leaves SCHEDULED without waiting a period.
  absl::Time next_flush = absl::Now() + options_.flush_interval;
  absl::Time last_sent = absl::Now();
  while (true) {
    bool urgent;
    {
      absl::MutexLock lock(&mu_);
      if (CheckRanks()) return;
      urgent = checkpoint_dirty_;  // a new checkpoint is reported at once
    }
    if (urgent || absl::Now() >= next_flush) {
      bool dirty;
      {
        absl::MutexLock lock(&mu_);
        dirty = progress_dirty_ || checkpoint_dirty_ || !logs_.empty() || dropped_logs_ > 0;
      }
      if (dirty || absl::Now() - last_sent >= options_.idle_update_interval) {
        FlushProgress();
        last_sent = absl::Now();
      }
      next_flush = absl::Now() + options_.flush_interval;
    }
    absl::SleepFor(kLoopTick);
  }
}

mesa::v1::UpdateAttemptRequest AttemptRunner::FinalUpdate(const absl::Status& started, bool refused,
                                                          std::string* kind) {
  absl::MutexLock lock(&mu_);
  trainers_running_ = false;
  ExitOutcome outcome;
  if (!started.ok()) {
    outcome.phase = mesa::v1::ATTEMPT_PHASE_FAILED;
    // A path outside the roots fails the same way everywhere: no retry.
    outcome.failure_kind = refused ? mesa::v1::FAILURE_KIND_USER : mesa::v1::FAILURE_KIND_INFRA;
    outcome.message =
        refused
            ? absl::StrCat("worker ", options_.worker_id,
                           " refused to start the trainer (confined paths): ", started.message())
            : absl::StrCat("worker ", options_.worker_id,
                           " could not start the trainer: ", started.message());
    AddAgentLog(outcome.message);
  } else {
    outcome = Outcome();
  }
  *kind = KindName(outcome);
  AddAgentLog(absl::StrCat("attempt ended: ", *kind,
                           outcome.message.empty() ? "" : absl::StrCat(": ", outcome.message)));
  mesa::v1::UpdateAttemptRequest final_update;
  final_update.set_phase(outcome.phase);
  final_update.set_failure_kind(outcome.failure_kind);
  final_update.set_message(outcome.message);
  if (outcome.phase == mesa::v1::ATTEMPT_PHASE_SUCCEEDED && has_rank0_) {
    mesa::v1::JobResult result = result_;
    if (result.checkpoint_path().empty() && !checkpoint_path_.empty()) {
      result.set_checkpoint_path(checkpoint_path_);
    }
    if (result.final_loss() == 0 && progress_.loss() != 0) result.set_final_loss(progress_.loss());
    *final_update.mutable_result() = result;
  } else if (have_result_ && has_rank0_) {
    *final_update.mutable_result() = result_;
  }
  return final_update;
}

void AttemptRunner::ReportFinal(mesa::v1::UpdateAttemptRequest final_update) {
  const absl::Time give_up = absl::Now() + options_.final_report_timeout;
  absl::Duration backoff = absl::Milliseconds(100);
  // Leftover log lines beyond one batch go first (RUNNING updates); the terminal update carries
  // the last batch, so the coordinator has every line before it sees the end.
  while (true) {
    mesa::v1::UpdateAttemptRequest update;
    bool is_final;
    {
      absl::MutexLock lock(&mu_);
      is_final = logs_.size() <= options_.max_log_lines_per_update;
      update = TakeUpdate(options_.max_log_lines_per_update);
      if (is_final) {
        update.set_phase(final_update.phase());
        update.set_failure_kind(final_update.failure_kind());
        update.set_message(final_update.message());
        if (final_update.has_result()) *update.mutable_result() = final_update.result();
      }
    }
    auto reply = sender_(update);
    if (reply.ok()) {
      backoff = absl::Milliseconds(100);
      if (is_final) {
        final_update = std::move(update);
        break;
      }
      continue;
    }
    bool give_up_now;
    {
      absl::MutexLock lock(&mu_);
      ReturnLogs(update);
      give_up_now = !ShouldRetryReport(reply.status()) || abandoned_ || absl::Now() >= give_up;
      if (give_up_now) logs_.clear();
    }
    if (give_up_now) {
      std::fprintf(stderr, "mesa-worker: giving up reporting %s attempt %d: %s\n",
                   assignment_.job_id().c_str(), assignment_.attempt(),
                   std::string(reply.status().message()).c_str());
      break;
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
  absl::MutexLock lock(&mu_);
  final_report_ = std::move(final_update);
  finished_ = true;
}

}  // namespace mesa::worker
