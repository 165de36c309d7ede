#include "worker/attempt.h"

#include <signal.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "base/utf8.h"
#include "gtest/gtest.h"
#include "proto/spec_yaml.h"
#include "proto/trainer_events.h"

namespace mesa::worker {
namespace {

using mesa::v1::ATTEMPT_PHASE_FAILED;
using mesa::v1::ATTEMPT_PHASE_RUNNING;
using mesa::v1::ATTEMPT_PHASE_STOPPED;
using mesa::v1::ATTEMPT_PHASE_SUCCEEDED;
using mesa::v1::FAILURE_KIND_INFRA;
using mesa::v1::FAILURE_KIND_USER;

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// A stand-in for mesa-train: a shell script following the same contract (docs/trainer.md).
std::string WriteTrainer(const std::string& name, const std::string& body) {
  const std::string path = absl::StrCat(TempDir(), "/", name);
  std::ofstream out(path);
  out << "#!/bin/sh\n" << body;
  out.close();
  chmod(path.c_str(), 0755);
  return path;
}

// A shell line that writes `event` to the events pipe exactly as mesa-train does (the same
// encoder, proto/trainer_events.h), so the stand-in cannot drift from the real contract.
std::string EmitEvent(const mesa::v1::TrainerEvent& event) {
  std::string line = mesa::FormatEventLine(event);
  line.pop_back();  // the newline; printf adds it
  EXPECT_EQ(line.find('\''), std::string::npos) << "cannot quote for the shell: " << line;
  return absl::StrCat("printf '%s\\n' '", line, "' >&3\n");
}

mesa::v1::TrainerEvent StepEvent(int64_t step, double loss, double tokens_per_second = 0) {
  mesa::v1::TrainerEvent event;
  event.mutable_step()->set_step(step);
  event.mutable_step()->set_total_steps(10);
  event.mutable_step()->set_loss(loss);
  event.mutable_step()->set_tokens_per_second(tokens_per_second);
  return event;
}

mesa::v1::TrainerEvent CheckpointEvent(int64_t step, const std::string& path) {
  mesa::v1::TrainerEvent event;
  event.mutable_checkpoint()->set_step(step);
  event.mutable_checkpoint()->set_path(path);
  return event;
}

// Collects every update the runner sends; can fail the first N sends or ask for cancellation.
class FakeCoordinator {
 public:
  UpdateSender Sender() {
    return [this](mesa::v1::UpdateAttemptRequest& request) -> absl::StatusOr<UpdateReply> {
      absl::MutexLock lock(&mu_);
      if (fail_next_ > 0) {
        --fail_next_;
        return absl::UnavailableError("coordinator restarting");
      }
      updates_.push_back(request);
      UpdateReply reply;
      reply.cancel_requested = cancel_;
      return reply;
    };
  }
  void FailNext(int n) {
    absl::MutexLock lock(&mu_);
    fail_next_ = n;
  }
  void RequestCancel() {
    absl::MutexLock lock(&mu_);
    cancel_ = true;
  }
  std::vector<mesa::v1::UpdateAttemptRequest> updates() {
    absl::MutexLock lock(&mu_);
    return updates_;
  }
  std::vector<std::string> Logs(const std::string& stream) {
    std::vector<std::string> lines;
    for (const auto& update : updates()) {
      for (const auto& line : update.logs()) {
        if (line.stream() == stream) lines.push_back(line.text());
      }
    }
    return lines;
  }
  bool SawProgressStep(int64_t step) {
    for (const auto& update : updates()) {
      if (update.progress().step() == step) return true;
    }
    return false;
  }

 private:
  absl::Mutex mu_;
  std::vector<mesa::v1::UpdateAttemptRequest> updates_;
  int fail_next_ = 0;
  bool cancel_ = false;
};

mesa::v1::Assignment CpuAssignment(const std::string& job_id, int attempt = 1) {
  mesa::v1::Assignment assignment;
  assignment.set_job_id(job_id);
  assignment.set_attempt(attempt);
  assignment.set_world_size(1);
  auto* rank = assignment.add_ranks();
  rank->set_rank(0);
  rank->set_gpu_index(-1);
  auto* spec = assignment.mutable_spec();
  spec->set_name("tiny");
  spec->set_type(mesa::v1::JOB_TYPE_TRAIN);
  spec->mutable_model()->set_d_model(32);
  spec->mutable_training()->set_steps(10);
  spec->mutable_resources()->set_cpu_threads(2);
  (*spec->mutable_labels())["team"] = "a";
  return assignment;
}

AttemptOptions Options(const std::string& trainer, const std::string& name) {
  AttemptOptions options;
  options.trainer = trainer;
  options.attempt_dir = absl::StrCat(TempDir(), "/", name, "/attempt");
  options.checkpoint_dir = absl::StrCat(TempDir(), "/", name, "/checkpoints");
  options.coordinator = "127.0.0.1:1";
  options.worker_id = "w1";
  options.grace = absl::Seconds(5);
  options.flush_interval = absl::Milliseconds(100);
  options.idle_update_interval = absl::Milliseconds(200);
  options.base_env = {"PATH=/usr/bin:/bin", "MESA_RANK=99", "CUDA_VISIBLE_DEVICES=0"};
  options.final_report_timeout = absl::Seconds(30);
  return options;
}

void WaitFinished(AttemptRunner& runner, absl::Duration timeout = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!runner.finished() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(runner.finished()) << "attempt did not finish in time";
  runner.Join();
}

void WaitForLog(FakeCoordinator& coordinator, const std::string& stream, const std::string& text) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    for (const auto& line : coordinator.Logs(stream)) {
      if (line == text) return;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  FAIL() << "no " << stream << " line \"" << text << "\"";
}

TEST(AttemptTest, SuccessForwardsLogsProgressCheckpointAndResult) {
  mesa::v1::TrainerEvent result;
  result.mutable_result()->set_final_loss(2.5);
  result.mutable_result()->set_step(10);
  result.mutable_result()->set_checkpoint_path("/ck/step_10");
  result.mutable_result()->mutable_eval()->set_val_loss(2.7);
  result.mutable_result()->mutable_eval()->set_val_perplexity(14.9);
  const std::string trainer = WriteTrainer(
      "ok.sh", absl::StrCat(R"(
echo "args: $*"
echo "env: rank=$MESA_RANK world=$MESA_WORLD_SIZE local=$MESA_LOCAL_RANK job=$MESA_JOB_ID attempt=$MESA_ATTEMPT device=$MESA_DEVICE cvd=[$CUDA_VISIBLE_DEVICES] omp=$OMP_NUM_THREADS"
echo "warming up" >&2
)",
                            EmitEvent(StepEvent(5, 3.5, 100)),
                            EmitEvent(CheckpointEvent(5, "/ck/step_5")), "echo 'not json' >&3\n",
                            EmitEvent(StepEvent(10, 2.5)), EmitEvent(result), "exit 0\n"));
  FakeCoordinator coordinator;
  WorkerMetrics metrics;
  AttemptOptions options = Options(trainer, "success");
  AttemptRunner runner(CpuAssignment("job-1"), options, coordinator.Sender(), &metrics);
  runner.Start();
  WaitFinished(runner);

  const auto updates = coordinator.updates();
  ASSERT_GE(updates.size(), 2u);
  EXPECT_EQ(updates.front().phase(), ATTEMPT_PHASE_RUNNING);
  const auto& last = updates.back();
  EXPECT_EQ(last.phase(), ATTEMPT_PHASE_SUCCEEDED) << last.message();
  EXPECT_EQ(last.job_id(), "job-1");
  EXPECT_EQ(last.attempt(), 1);
  EXPECT_FLOAT_EQ(last.result().val_loss(), 2.7f);
  EXPECT_FLOAT_EQ(last.result().val_perplexity(), 14.9f);
  EXPECT_EQ(last.result().checkpoint_path(), "/ck/step_10");
  EXPECT_EQ(last.checkpoint_path(), "/ck/step_5");
  EXPECT_EQ(last.progress().step(), 10);
  EXPECT_FLOAT_EQ(last.progress().loss(), 2.5f);

  const auto out = coordinator.Logs("stdout");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], absl::StrCat("args: --config ", options.attempt_dir,
                                 "/job.yaml --events_fd 3 "
                                 "--workdir ",
                                 options.attempt_dir));
  EXPECT_EQ(out[1], "env: rank=0 world=1 local=0 job=job-1 attempt=1 device=cpu cvd=[] omp=2");
  EXPECT_EQ(coordinator.Logs("stderr"), std::vector<std::string>{"warming up"});
  bool saw_bad_event = false;
  for (const auto& line : coordinator.Logs("agent")) {
    saw_bad_event |= absl::StrContains(line, "ignored event line");
  }
  EXPECT_TRUE(saw_bad_event);

  // The spec the trainer read parses as a job file, with the checkpoint directory filled in.
  auto spec = mesa::LoadJobSpecFile(options.attempt_dir + "/job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint().dir(), options.checkpoint_dir);
  EXPECT_EQ(spec->training().steps(), 10);
  EXPECT_EQ(spec->labels().at("team"), "a");
  EXPECT_TRUE(std::filesystem::is_directory(options.checkpoint_dir));
  // Logs are also kept in the working directory.
  std::ifstream log(options.attempt_dir + "/rank-0.log");
  std::stringstream content;
  content << log.rdbuf();
  EXPECT_TRUE(absl::StrContains(content.str(), "warming up"));
}

TEST(AttemptTest, ARetryNamesOnlyTheCheckpointRootAndReportsWhereTheTrainerResumed) {
  // Where a retry resumes is the trainer's decision (the newest valid checkpoint under the root):
  // the agent passes the job's checkpoint root, never a step directory, and reports what the
  // trainer chose.
  mesa::v1::TrainerEvent resumed;
  resumed.mutable_resumed()->set_step(20);
  resumed.mutable_resumed()->set_checkpoint("/ck/step_00000020");
  resumed.mutable_resumed()->add_skipped("/ck/step_00000030: checksum mismatch");
  const std::string trainer = WriteTrainer(
      "resume.sh",
      absl::StrCat("echo \"args: $*\"\necho \"root: $MESA_CHECKPOINT_DIR\"\n", EmitEvent(resumed)));
  FakeCoordinator coordinator;
  AttemptOptions options = Options(trainer, "resume");
  AttemptRunner runner(CpuAssignment("job-r", 2), options, coordinator.Sender(), nullptr);
  runner.Start();
  WaitFinished(runner);
  const auto out = coordinator.Logs("stdout");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_FALSE(absl::StrContains(out[0], "--resume")) << out[0];
  EXPECT_EQ(out[1], "root: " + options.checkpoint_dir);
  auto spec = mesa::LoadJobSpecFile(options.attempt_dir + "/job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint().dir(), options.checkpoint_dir);
  bool logged = false;
  for (const auto& line : coordinator.Logs("agent")) {
    logged |= absl::StrContains(line, "resumed from /ck/step_00000020 at step 20") &&
              absl::StrContains(line, "checksum mismatch");
  }
  EXPECT_TRUE(logged);
  EXPECT_EQ(coordinator.updates().back().checkpoint_path(), "/ck/step_00000020");
}

TEST(AttemptTest, UserErrorFailsWithTheTrainersReason) {
  mesa::v1::TrainerEvent error;
  error.mutable_error()->set_message("data.train_path: no file matches /nope/*.bin");
  error.mutable_error()->set_exit_code(mesa::v1::TRAINER_EXIT_USER_ERROR);
  const std::string trainer = WriteTrainer(
      "user.sh",
      absl::StrCat("echo \"mesa-train: data.train_path: no file matches /nope/*.bin\" >&2\n",
                   EmitEvent(error), "exit 2\n"));
  FakeCoordinator coordinator;
  WorkerMetrics metrics;
  AttemptRunner runner(CpuAssignment("job-u"), Options(trainer, "user"), coordinator.Sender(),
                       &metrics);
  runner.Start();
  WaitFinished(runner);
  const auto last = coordinator.updates().back();
  EXPECT_EQ(last.phase(), ATTEMPT_PHASE_FAILED);
  EXPECT_EQ(last.failure_kind(), FAILURE_KIND_USER);
  EXPECT_TRUE(absl::StrContains(last.message(), "data.train_path: no file matches /nope/*.bin"))
      << last.message();
  EXPECT_TRUE(absl::StrContains(last.message(), "exit code 2")) << last.message();
}

TEST(AttemptTest, OutputThatIsNotUtf8ReachesTheCoordinatorAsValidText) {
  // A Latin-1 file name in an error: every update must stay serialisable, and the
  // failure message keeps the reason with the bad byte replaced.
  const std::string trainer = WriteTrainer("latin1.sh", R"(
printf 'reading caf\351.bin\n'
printf 'mesa-train: cannot open caf\351.bin\n' >&2
printf 'not json \377\n' >&3
exit 1
)");
  FakeCoordinator coordinator;
  AttemptRunner runner(CpuAssignment("job-utf8"), Options(trainer, "utf8"), coordinator.Sender(),
                       nullptr);
  runner.Start();
  WaitFinished(runner);
  const auto updates = coordinator.updates();
  ASSERT_FALSE(updates.empty());
  for (const auto& update : updates) {
    EXPECT_TRUE(base::IsValidUtf8(update.message())) << update.message();
    for (const auto& line : update.logs())
      EXPECT_TRUE(base::IsValidUtf8(line.text())) << line.text();
    std::string bytes;
    ASSERT_TRUE(update.SerializeToString(&bytes));
    mesa::v1::UpdateAttemptRequest parsed;
    EXPECT_TRUE(parsed.ParseFromString(bytes)) << "the coordinator could not read this update";
  }
  const auto& last = updates.back();
  EXPECT_EQ(last.phase(), ATTEMPT_PHASE_FAILED);
  EXPECT_TRUE(absl::StrContains(last.message(), "cannot open caf\xEF\xBF\xBD.bin"))
      << last.message();
  EXPECT_EQ(coordinator.Logs("stdout"), std::vector<std::string>{"reading caf\xEF\xBF\xBD.bin"});
}

TEST(AttemptTest, CrashIsInfraWithLastStderrLine) {
  const std::string trainer = WriteTrainer("crash.sh", R"(
echo "about to fault" >&2
kill -SEGV $$
)");
  FakeCoordinator coordinator;
  AttemptRunner runner(CpuAssignment("job-c"), Options(trainer, "crash"), coordinator.Sender(),
                       nullptr);
  runner.Start();
  WaitFinished(runner);
  const auto last = coordinator.updates().back();
  EXPECT_EQ(last.phase(), ATTEMPT_PHASE_FAILED);
  EXPECT_EQ(last.failure_kind(), FAILURE_KIND_INFRA);
  EXPECT_TRUE(absl::StrContains(last.message(), "SIGSEGV")) << last.message();
  EXPECT_TRUE(absl::StrContains(last.message(), "about to fault")) << last.message();
}

// Checkpoints and reports `stopped` on SIGTERM, as mesa-train does.
const std::string kStoppableTrainer = [] {
  mesa::v1::TrainerEvent stopped;
  stopped.mutable_stopped()->set_step(3);
  stopped.mutable_stopped()->set_checkpoint("/ck/step_3");
  std::string emit = EmitEvent(stopped);
  emit.pop_back();
  return absl::StrCat("trap \"", absl::StrReplaceAll(emit, {{"\"", "\\\""}}),
                      "; exit 0\" TERM\necho ready\nwhile true; do sleep 0.05; done\n");
}();

TEST(AttemptTest, StopSendsSigtermAndReportsStopped) {
  const std::string trainer = WriteTrainer("stoppable.sh", kStoppableTrainer);
  FakeCoordinator coordinator;
  AttemptRunner runner(CpuAssignment("job-s"), Options(trainer, "stop"), coordinator.Sender(),
                       nullptr);
  runner.Start();
  WaitForLog(coordinator, "stdout", "ready");
  runner.Stop("job cancelled");
  WaitFinished(runner);
  const auto last = coordinator.updates().back();
  EXPECT_EQ(last.phase(), ATTEMPT_PHASE_STOPPED) << last.message();
  EXPECT_EQ(last.checkpoint_path(), "/ck/step_3");
}

TEST(AttemptTest, CancelRequestedByCoordinatorStops) {
  const std::string trainer = WriteTrainer("stoppable2.sh", kStoppableTrainer);
  FakeCoordinator coordinator;
  AttemptRunner runner(CpuAssignment("job-k"), Options(trainer, "cancel"), coordinator.Sender(),
                       nullptr);
  runner.Start();
  WaitForLog(coordinator, "stdout", "ready");
  coordinator.RequestCancel();
  WaitFinished(runner);
  EXPECT_EQ(coordinator.updates().back().phase(), ATTEMPT_PHASE_STOPPED);
}

TEST(AttemptTest, SigkillAfterGraceWhenTheTrainerIgnoresSigterm) {
  const std::string trainer =
      WriteTrainer("stubborn.sh", "trap '' TERM\necho ready\nwhile true; do sleep 0.05; done\n");
  FakeCoordinator coordinator;
  AttemptOptions options = Options(trainer, "stubborn");
  options.grace = absl::Milliseconds(500);
  AttemptRunner runner(CpuAssignment("job-g"), options, coordinator.Sender(), nullptr);
  runner.Start();
  WaitForLog(coordinator, "stdout", "ready");
  const absl::Time start = absl::Now();
  runner.Stop("job cancelled");
  WaitFinished(runner);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(450));
  const auto last = coordinator.updates().back();
  EXPECT_EQ(last.phase(), ATTEMPT_PHASE_STOPPED);
  EXPECT_TRUE(absl::StrContains(last.message(), "SIGKILL")) << last.message();
}

TEST(AttemptTest, WatchdogStopsATrainerThatHangsAndFailsTheAttemptAsInfra) {
  // Regression: a SIGSTOPped single-rank trainer kept its job RUNNING forever.
  const std::string trainer = WriteTrainer("hangs.sh", "echo ready\nkill -STOP $$\n");
  FakeCoordinator coordinator;
  AttemptOptions options = Options(trainer, "hangs");
  options.stall_timeout = absl::Seconds(1);
  options.grace = absl::Milliseconds(300);
  AttemptRunner runner(CpuAssignment("job-h"), options, coordinator.Sender(), nullptr);
  runner.Start();
  WaitFinished(runner);
  const auto last = coordinator.updates().back();
  EXPECT_EQ(last.phase(), ATTEMPT_PHASE_FAILED) << last.message();
  EXPECT_EQ(last.failure_kind(), FAILURE_KIND_INFRA);
  EXPECT_TRUE(absl::StrContains(last.message(), "printed nothing for 1s")) << last.message();
}

TEST(AttemptTest, WatchdogLeavesATrainerThatKeepsPrinting) {
  const std::string trainer = WriteTrainer(
      "slow_but_alive.sh", "for i in 1 2 3 4 5 6 7 8; do echo step $i; sleep 0.25; done\n");
  FakeCoordinator coordinator;
  AttemptOptions options = Options(trainer, "alive");
  options.stall_timeout = absl::Seconds(1);  // less than the run, more than any gap
  AttemptRunner runner(CpuAssignment("job-a"), options, coordinator.Sender(), nullptr);
  runner.Start();
  WaitFinished(runner);
  EXPECT_EQ(coordinator.updates().back().phase(), ATTEMPT_PHASE_SUCCEEDED)
      << coordinator.updates().back().message();
}

TEST(AttemptTest, FinalReportIsRetriedUntilDelivered) {
  const std::string trainer = WriteTrainer("quick.sh", "echo done\nexit 0\n");
  FakeCoordinator coordinator;
  coordinator.FailNext(4);  // The initial RUNNING update and the first final tries fail.
  AttemptRunner runner(CpuAssignment("job-f"), Options(trainer, "retry"), coordinator.Sender(),
                       nullptr);
  runner.Start();
  WaitFinished(runner);
  const auto updates = coordinator.updates();
  ASSERT_FALSE(updates.empty());
  EXPECT_EQ(updates.back().phase(), ATTEMPT_PHASE_SUCCEEDED);
  EXPECT_EQ(coordinator.Logs("stdout"), std::vector<std::string>{"done"});  // Not lost, not twice.
}

TEST(AttemptTest, MissingTrainerIsAnInfraFailure) {
  FakeCoordinator coordinator;
  AttemptRunner runner(CpuAssignment("job-m"), Options("/nonexistent/mesa-train", "missing"),
                       coordinator.Sender(), nullptr);
  runner.Start();
  WaitFinished(runner);
  const auto last = coordinator.updates().back();
  EXPECT_EQ(last.phase(), ATTEMPT_PHASE_FAILED);
  EXPECT_EQ(last.failure_kind(), FAILURE_KIND_INFRA);
  EXPECT_TRUE(absl::StrContains(last.message(), "could not start the trainer")) << last.message();
}

TEST(AttemptTest, GpuRankEnvironment) {
  mesa::v1::Assignment assignment = CpuAssignment("job-gpu");
  assignment.set_world_size(4);
  assignment.mutable_ranks(0)->set_rank(2);
  assignment.mutable_ranks(0)->set_gpu_index(3);
  AttemptRunner runner(assignment, Options("/bin/true", "gpuenv"), nullptr, nullptr);
  const auto env = runner.TrainerEnv(assignment.ranks(0), 0);
  auto has = [&](const std::string& entry) {
    return std::find(env.begin(), env.end(), entry) != env.end();
  };
  EXPECT_TRUE(has("CUDA_VISIBLE_DEVICES=3"));
  EXPECT_TRUE(has("MESA_DEVICE=cuda"));
  EXPECT_TRUE(has("MESA_RANK=2"));
  EXPECT_TRUE(has("MESA_WORLD_SIZE=4"));
  EXPECT_TRUE(has("MESA_LOCAL_RANK=0"));
  EXPECT_FALSE(has("MESA_RANK=99"));  // Inherited values are replaced.
  EXPECT_FALSE(has("CUDA_VISIBLE_DEVICES=0"));
}

TEST(AttemptTest, MultiRankEnvironmentPointsAtTheBridgedRendezvous) {
  mesa::v1::Assignment assignment = CpuAssignment("job-dp");
  assignment.set_world_size(2);
  AttemptOptions options = Options("/bin/true", "dpenv");
  options.rendezvous_stub = [] { return std::shared_ptr<mesa::v1::WorkerService::Stub>(); };
  options.advertise_host = "10.1.2.3";
  options.collective_timeout = absl::Seconds(42);
  options.base_env.push_back("MESA_RENDEZVOUS=file:/shared/elsewhere");
  AttemptRunner runner(assignment, options, nullptr, nullptr);
  const auto env = runner.TrainerEnv(assignment.ranks(0), 0);
  auto has = [&](const std::string& entry) {
    return std::find(env.begin(), env.end(), entry) != env.end();
  };
  EXPECT_EQ(runner.RendezvousDir(), options.attempt_dir + "/rendezvous");
  EXPECT_TRUE(has("MESA_RENDEZVOUS=file:" + options.attempt_dir + "/rendezvous"));
  EXPECT_FALSE(has("MESA_RENDEZVOUS=file:/shared/elsewhere"));
  EXPECT_TRUE(has("MESA_TCP_HOST=10.1.2.3"));
  EXPECT_TRUE(has("MESA_COLLECTIVE_TIMEOUT_S=42"));
  EXPECT_TRUE(has("MESA_CHECKPOINT_DIR=" + options.checkpoint_dir));

  // One rank needs no rendezvous: no bridge, no directory.
  assignment.set_world_size(1);
  AttemptRunner single(assignment, options, nullptr, nullptr);
  EXPECT_EQ(single.RendezvousDir(), "");
  const auto single_env = single.TrainerEnv(assignment.ranks(0), 0);
  for (const std::string& entry : single_env) {
    EXPECT_FALSE(absl::StartsWith(entry, "MESA_RENDEZVOUS=")) << entry;
  }
}

TEST(AttemptTest, TwoRanksOneFailsStopsTheOther) {
  const std::string trainer = WriteTrainer("ranks.sh", R"(
trap 'exit 0' TERM
if [ "$MESA_RANK" = "1" ]; then sleep 0.3; echo "rank 1 lost its device" >&2; exit 1; fi
while true; do sleep 0.05; done
)");
  mesa::v1::Assignment assignment = CpuAssignment("job-2r");
  assignment.set_world_size(2);
  auto* second = assignment.add_ranks();
  second->set_rank(1);
  second->set_gpu_index(-1);
  FakeCoordinator coordinator;
  AttemptRunner runner(assignment, Options(trainer, "ranks"), coordinator.Sender(), nullptr);
  runner.Start();
  WaitFinished(runner);
  const auto last = coordinator.updates().back();
  EXPECT_EQ(last.phase(), ATTEMPT_PHASE_FAILED);
  EXPECT_EQ(last.failure_kind(), FAILURE_KIND_INFRA);
  EXPECT_TRUE(absl::StrContains(last.message(), "rank 1")) << last.message();
}

}  // namespace
}  // namespace mesa::worker
