// mesa-train: trains or evaluates a MesaNet from a job YAML (the same file `mesactl submit`
// takes). See docs/trainer.md for flags, events and exit codes.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "base/cli_flags.h"
#include "google/protobuf/util/json_util.h"
#include "launch/trainer_launch.h"
#include "model/config/job_config.h"
#include "model/trainer/events.h"
#include "model/trainer/trainer.h"
#include "proto/spec_yaml.h"
#include "spec/device.h"

ABSL_FLAG(std::string, config, "", "Job YAML (mesa.v1.JobSpec).");
ABSL_FLAG(std::string, device, "", "auto, cpu or cuda (overrides training.device).");
ABSL_FLAG(int, events_fd, -1, "Write JSON-lines events to this file descriptor.");
ABSL_FLAG(std::string, events_file, "", "Append JSON-lines events to this file.");
ABSL_FLAG(std::string, workdir, ".",
          "Working directory; checkpoints go to WORKDIR/checkpoints "
          "unless checkpoint.dir is set.");
ABSL_FLAG(std::string, resume, "",
          "Resume from this checkpoint root or step directory "
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

}  // namespace

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(argc, argv,
                               "mesa-train --config job.yaml [--device auto|cpu|cuda] "
                               "[--events_fd N] [--workdir DIR] [--resume DIR] [--eval]");
  using mesa::model::EventSink;
  EventSink events;
  if (absl::Status s =
          events.Open(absl::GetFlag(FLAGS_events_fd), absl::GetFlag(FLAGS_events_file));
      !s.ok()) {
    fprintf(stderr, "mesa-train: %s\n", std::string(s.message()).c_str());
    return mesa::v1::TRAINER_EXIT_USER_ERROR;
  }
  auto fail = [&](const absl::Status& status) {
    const mesa::v1::TrainerExitCode code = mesa::model::ExitCodeFor(status);
    mesa::v1::TrainerEvent event;
    event.mutable_error()->set_message(std::string(status.message()));
    event.mutable_error()->set_status(absl::StatusCodeToString(status.code()));
    event.mutable_error()->set_exit_code(code);
    events.Emit(std::move(event));
    fprintf(stderr, "mesa-train: error: %s\n", std::string(status.message()).c_str());
    return static_cast<int>(code);
  };
  if (absl::GetFlag(FLAGS_config).empty()) {
    return fail(absl::InvalidArgumentError("--config job.yaml is required"));
  }
  auto spec = mesa::LoadJobSpecFile(absl::GetFlag(FLAGS_config));
  if (!spec.ok()) {
    return fail(absl::Status(spec.status().code() == absl::StatusCode::kNotFound
                                 ? absl::StatusCode::kNotFound
                                 : absl::StatusCode::kInvalidArgument,
                             spec.status().message()));  // names the file already
  }
  // What a worker agent (or the user) set in the environment (launch/trainer_launch.h).
  auto launch_env = mesa::launch::DecodeTrainerEnvironment();
  if (!launch_env.ok()) return fail(launch_env.status());
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
  events.set_rank(comm_env->rank);
  // Flag, else the worker agent's environment, else the job spec.
  options.device = absl::GetFlag(FLAGS_device);
  if (!options.device.empty()) {
    // Checked like MESA_DEVICE and training.device: an unknown name must not act as "auto".
    if (auto device = mesa::spec::ParseDevice(options.device); !device.ok()) {
      return fail(
          absl::InvalidArgumentError(absl::StrCat("--device: ", device.status().message())));
    }
  }
  if (options.device.empty()) options.device = launch_env->device;
  resolve.world_size = options.world_size;
  resolve.eval_mode = absl::GetFlag(FLAGS_eval);
  resolve.device = options.device;
  auto config = mesa::model::ResolveJobConfig(*spec, resolve);
  if (!config.ok()) return fail(config.status());
  options.workdir = absl::GetFlag(FLAGS_workdir);
  options.resume = absl::GetFlag(FLAGS_resume);
  options.run_id = launch_env->job_id;  // the job id under the worker agent, else empty
  // Gradient all-reduce bucket size in MiB (fractions allowed); 0 = no overlap with the backward
  // pass (one blocking all-reduce after it), so benchmarks can compare the two.
  if (const double mb = launch_env->grad_bucket_mb; mb >= 0) {
    // Any positive size means overlap, down to one float per bucket.
    options.grad_bucket_bytes =
        mb > 0 ? std::max<int64_t>(4, static_cast<int64_t>(mb * (1 << 20))) : 0;
  }
  options.peak_flops = launch_env->peak_flops;
  if (absl::Status s = mesa::base::CheckThreadsFlag(absl::GetFlag(FLAGS_threads),
                                                    "all cores, or resources.cpu_threads");
      !s.ok()) {
    return fail(s);
  }
  options.num_threads = absl::GetFlag(FLAGS_threads) > 0 ? absl::GetFlag(FLAGS_threads)
                        : launch_env->cpu_threads > 0    ? launch_env->cpu_threads
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

  auto result = config->is_generate ? mesa::model::RunGeneration(*config, options, events)
                : config->is_eval   ? mesa::model::RunEvaluation(*config, options, events)
                                    : mesa::model::RunTraining(*config, options, events);
  if (!result.ok()) return fail(result.status());
  if ((config->is_eval || config->is_generate) && absl::GetFlag(FLAGS_events_fd) >= 0) {
    // Under the worker agent the result travels as the event; stdout is the job's log, which
    // gets one line, not megabytes of numbers.
    printf("%s\n", mesa::model::ResultSummaryLine(result->result).c_str());
  } else if (config->is_eval || config->is_generate) {
    // Run by hand: the whole result as JSON on stdout (mesa.v1.ResultEvent), for scripts.
    std::string json;
    google::protobuf::util::JsonPrintOptions print;
    print.preserve_proto_field_names = true;
    print.add_whitespace = true;
    (void)google::protobuf::util::MessageToJsonString(result->result, &json, print);
    printf("%s", json.c_str());
  }
  return 0;
}
