#include "launch/trainer_launch.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "spec/device.h"

namespace mesa::launch {
namespace {

constexpr const char* kTuningVariables[] = {kEnvGradBucketMb, kEnvNcclStreamPriority,
                                            kEnvPeakFlops};

absl::StatusOr<double> DoubleVariable(const EnvLookup& lookup, const char* name, double fallback,
                                      double lo, double hi) {
  const char* value = lookup(name);
  if (value == nullptr || *value == '\0') return fallback;
  double out = 0;
  if (!absl::SimpleAtod(value, &out) || !std::isfinite(out) || out < lo || out > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=\"", value, "\": expected a number in [", lo, ", ", hi, "]"));
  }
  return out;
}

std::string StringVariable(const EnvLookup& lookup, const char* name) {
  const char* value = lookup(name);
  return value != nullptr ? std::string(value) : std::string();
}

}  // namespace

bool IsAgentOwnedVariable(absl::string_view entry) {
  if (absl::StartsWith(entry, "MESA_")) {
    for (const char* tuning : kTuningVariables) {
      if (absl::StartsWith(entry, absl::StrCat(tuning, "="))) return false;
    }
    return true;
  }
  return absl::StartsWith(entry, "CUDA_VISIBLE_DEVICES=") ||
         absl::StartsWith(entry, "OMP_NUM_THREADS=") ||
         absl::StartsWith(entry, "OPENBLAS_NUM_THREADS=");
}

std::vector<std::string> EncodeTrainerEnvironment(const TrainerEnvironment& env,
                                                  const std::vector<std::string>& inherited) {
  std::vector<std::string> out;
  for (const std::string& entry : inherited) {
    if (!IsAgentOwnedVariable(entry)) out.push_back(entry);
  }
  auto set = [&out](const char* name, const auto& value) {
    out.push_back(absl::StrCat(name, "=", value));
  };
  set(kEnvJobId, env.job_id);
  set(kEnvAttempt, env.attempt);
  set(kEnvRank, env.rank);
  set(kEnvWorldSize, std::max(1, env.world_size));
  set(kEnvLocalRank, env.local_rank);
  set(kEnvCoordinator, env.coordinator);
  set(kEnvWorkerId, env.worker_id);
  set(kEnvWorkers, absl::StrJoin(env.workers, ","));
  set(kEnvCheckpointDir, env.checkpoint_dir);
  set(kEnvCollectiveTimeoutS, std::max(1, env.collective_timeout_s));
  if (!env.rendezvous.empty()) set(kEnvRendezvous, env.rendezvous);
  if (!env.tcp_host.empty()) set(kEnvTcpHost, env.tcp_host);
  if (env.gpu_index >= 0) {
    // The trainer sees exactly its GPU, as device 0.
    set("CUDA_VISIBLE_DEVICES", env.gpu_index);
    set(kEnvDevice, "cuda");
    set(kEnvGpuIndex, env.gpu_index);
  } else {
    // A CPU rank must not pick up a GPU of the node through device "auto".
    set("CUDA_VISIBLE_DEVICES", "");
    set(kEnvDevice, "cpu");
  }
  const int threads = std::max(1, env.cpu_threads);
  set(kEnvCpuThreads, threads);
  set("OMP_NUM_THREADS", threads);
  set("OPENBLAS_NUM_THREADS", threads);
  return out;
}

absl::StatusOr<int> IntVariable(const EnvLookup& lookup, const char* name, int fallback) {
  const char* value = lookup(name);
  if (value == nullptr || *value == '\0') return fallback;
  int out = 0;
  if (!absl::SimpleAtoi(value, &out)) {
    return absl::InvalidArgumentError(absl::StrCat(name, "=\"", value, "\" is not an integer"));
  }
  return out;
}

absl::StatusOr<TrainerEnvironment> DecodeTrainerEnvironment(const EnvLookup& lookup_in) {
  const EnvLookup lookup = lookup_in ? lookup_in : [](const char* n) { return getenv(n); };
  TrainerEnvironment env;
  auto integer = [&](const char* name, int* field, int lo) -> absl::Status {
    auto value = IntVariable(lookup, name, *field);
    if (!value.ok()) return value.status();
    if (*value != *field && *value < lo) {  // defaults (gpu_index -1) are not checked
      return absl::InvalidArgumentError(absl::StrCat(name, "=", *value, ": must be at least ", lo));
    }
    *field = *value;
    return absl::OkStatus();
  };
  for (auto [name, field, lo] :
       {std::tuple{kEnvAttempt, &env.attempt, 0}, std::tuple{kEnvRank, &env.rank, 0},
        std::tuple{kEnvWorldSize, &env.world_size, 1},
        std::tuple{kEnvLocalRank, &env.local_rank, 0},
        std::tuple{kEnvCollectiveTimeoutS, &env.collective_timeout_s, 1},
        std::tuple{kEnvGpuIndex, &env.gpu_index, 0},
        std::tuple{kEnvCpuThreads, &env.cpu_threads, 0}}) {
    if (absl::Status status = integer(name, field, lo); !status.ok()) return status;
  }
  env.job_id = StringVariable(lookup, kEnvJobId);
  env.coordinator = StringVariable(lookup, kEnvCoordinator);
  env.worker_id = StringVariable(lookup, kEnvWorkerId);
  const std::string workers = StringVariable(lookup, kEnvWorkers);
  env.workers = absl::StrSplit(workers, ',', absl::SkipEmpty());
  env.checkpoint_dir = StringVariable(lookup, kEnvCheckpointDir);
  env.rendezvous = StringVariable(lookup, kEnvRendezvous);
  env.tcp_host = StringVariable(lookup, kEnvTcpHost);
  env.device = StringVariable(lookup, kEnvDevice);
  if (!env.device.empty()) {  // empty: the spec decides
    if (auto device = spec::ParseDevice(env.device); !device.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(kEnvDevice, ": ", device.status().message()));
    }
  }
  auto bucket = DoubleVariable(lookup, kEnvGradBucketMb, -1, 0, 1 << 20);
  if (!bucket.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(bucket.status().message(), " (MiB per gradient bucket; 0 = no overlap)"));
  }
  env.grad_bucket_mb = *bucket;
  env.nccl_stream_priority = StringVariable(lookup, kEnvNcclStreamPriority);
  if (!env.nccl_stream_priority.empty() && env.nccl_stream_priority != "high" &&
      env.nccl_stream_priority != "normal") {
    return absl::InvalidArgumentError(absl::StrCat(kEnvNcclStreamPriority,
                                                   " must be \"high\" or \"normal\", got \"",
                                                   env.nccl_stream_priority, "\""));
  }
  auto peak = DoubleVariable(lookup, kEnvPeakFlops, 0, 1, 1e20);
  if (!peak.ok()) return peak.status();
  env.peak_flops = *peak;
  return env;
}

std::vector<std::string> TrainerArgv(const std::string& trainer_binary, const TrainerArgs& args) {
  return {
      trainer_binary, "--config",  args.config_path, "--events_fd", absl::StrCat(args.events_fd),
      "--workdir",    args.workdir};
}

std::string JobCheckpointDir(absl::string_view spec_dir, absl::string_view root,
                             absl::string_view job_id) {
  if (!spec_dir.empty()) return std::string(spec_dir);
  return absl::StrCat(root, "/", job_id);
}

}  // namespace mesa::launch
