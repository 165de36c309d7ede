// mesa-train: trains or evaluates a MesaNet from a job YAML (the same file `mesactl submit`
// takes). See docs/trainer.md for flags, events and exit codes.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "model/config/job_config.h"
#include "model/trainer/trainer.h"
#include "proto/spec_yaml.h"

ABSL_FLAG(std::string, config, "", "Job YAML (mesa.v1.JobSpec).");
ABSL_FLAG(std::string, device, "", "auto, cpu or cuda (overrides training.device).");
ABSL_FLAG(int, events_fd, -1, "Write JSON-lines events to this file descriptor.");
ABSL_FLAG(std::string, events_file, "", "Append JSON-lines events to this file.");
ABSL_FLAG(std::string, workdir, ".", "Working directory; checkpoints go to WORKDIR/checkpoints "
                                     "unless checkpoint.dir is set.");
ABSL_FLAG(std::string, resume, "", "Resume from this checkpoint root or step directory "
                                   "(default: the workdir's own latest checkpoint, if any).");
ABSL_FLAG(bool, eval, false, "Evaluate a checkpoint on data.val_path instead of training.");
ABSL_FLAG(int, threads, 0, "CPU threads (0 = all cores, or resources.cpu_threads).");
ABSL_FLAG(int, rank, -1, "Data-parallel rank (default: mpirun's, else $MESA_RANK, else 0).");
ABSL_FLAG(int, world_size, -1,
          "Data-parallel world size (default: mpirun's, else $MESA_WORLD_SIZE, else 1).");
ABSL_FLAG(std::string, mesa_impl, "chunked", "CPU Mesa operator: chunked or reference.");

namespace {

std::atomic<bool> g_stop{false};

void OnStopSignal(int) { g_stop.store(true); }

int EnvInt(const char* name, int fallback) {
  const char* value = getenv(name);
  return value != nullptr ? std::atoi(value) : fallback;
}

const char* FailureKind(int exit_code) {
  switch (exit_code) {
    case 2: return "user";
    case 3: return "diverged";
    default: return "infra";
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("mesa-train --config job.yaml [--device auto|cpu|cuda] "
                               "[--events_fd N] [--workdir DIR] [--resume DIR] [--eval]");
  absl::ParseCommandLine(argc, argv);
  using mesa::model::EventSink;
  EventSink events;
  if (absl::Status s = events.Open(absl::GetFlag(FLAGS_events_fd), absl::GetFlag(FLAGS_events_file));
      !s.ok()) {
    fprintf(stderr, "mesa-train: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto fail = [&](const absl::Status& status) {
    const int code = mesa::model::ExitCodeFor(status);
    events.Emit("error", {{"message", std::string(status.message())},
                          {"status", absl::StatusCodeToString(status.code())},
                          {"kind", FailureKind(code)},
                          {"exit_code", code}});
    fprintf(stderr, "mesa-train: error: %s\n", std::string(status.message()).c_str());
    return code;
  };
  if (absl::GetFlag(FLAGS_config).empty()) {
    return fail(absl::InvalidArgumentError("--config job.yaml is required"));
  }
  auto spec = mesa::LoadJobSpecFile(absl::GetFlag(FLAGS_config));
  if (!spec.ok()) {
    return fail(absl::Status(spec.status().code() == absl::StatusCode::kNotFound
                                 ? absl::StatusCode::kNotFound
                                 : absl::StatusCode::kInvalidArgument,
                             absl::StrCat(absl::GetFlag(FLAGS_config), ": ",
                                          spec.status().message())));
  }
  mesa::model::ResolveOptions resolve;
  mesa::model::TrainerOptions options;
  // Rank and world size: flags, else mpirun's or the worker agent's environment.
  auto comm_env =
      mesa::model::ReadCommEnvironment(absl::GetFlag(FLAGS_rank), absl::GetFlag(FLAGS_world_size));
  if (!comm_env.ok()) return fail(comm_env.status());
  options.comm_from_env = true;
  options.comm_env = *comm_env;
  options.rank = comm_env->rank;
  options.world_size = comm_env->world_size;
  // Flag, else the worker agent's environment, else the job spec.
  options.device = absl::GetFlag(FLAGS_device);
  if (options.device.empty() && getenv("MESA_DEVICE") != nullptr) options.device = getenv("MESA_DEVICE");
  resolve.world_size = options.world_size;
  resolve.eval_mode = absl::GetFlag(FLAGS_eval);
  resolve.device = options.device;
  auto config = mesa::model::ResolveJobConfig(*spec, resolve);
  if (!config.ok()) return fail(config.status());
  options.workdir = absl::GetFlag(FLAGS_workdir);
  options.resume = absl::GetFlag(FLAGS_resume);
  // Gradient all-reduce bucket size in MiB (fractions allowed); 0 = no overlap with the backward
  // pass (one blocking all-reduce after it), so benchmarks can compare the two.
  if (const char* mb = getenv("MESA_GRAD_BUCKET_MB"); mb != nullptr && *mb != '\0') {
    double value = 0;
    if (!absl::SimpleAtod(mb, &value) || !(value >= 0) || value > 1 << 20) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "MESA_GRAD_BUCKET_MB must be a number of MiB >= 0 (0 = no overlap), got \"", mb, "\"")));
    }
    // Any positive size means overlap, down to one float per bucket.
    options.grad_bucket_bytes =
        value > 0 ? std::max<int64_t>(4, static_cast<int64_t>(value * (1 << 20))) : 0;
  }
  options.num_threads = absl::GetFlag(FLAGS_threads) > 0     ? absl::GetFlag(FLAGS_threads)
                        : EnvInt("MESA_CPU_THREADS", 0) > 0 ? EnvInt("MESA_CPU_THREADS", 0)
                                                             : spec->resources().cpu_threads();
  if (absl::GetFlag(FLAGS_mesa_impl) == "reference") {
    options.mesa_impl = mesa::kernels::MesaImpl::kReference;
  } else if (absl::GetFlag(FLAGS_mesa_impl) != "chunked") {
    return fail(absl::InvalidArgumentError("--mesa_impl must be chunked or reference"));
  }
  options.stop_requested = &g_stop;
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  auto result = config->is_eval ? mesa::model::RunEvaluation(*config, options, events)
                                : mesa::model::RunTraining(*config, options, events);
  if (!result.ok()) return fail(result.status());
  if (config->is_eval) printf("%s\n", result->result.dump(2).c_str());
  return 0;
}
