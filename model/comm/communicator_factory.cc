#include "model/comm/communicator_factory.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "launch/rendezvous_files.h"
#include "launch/trainer_launch.h"
#include "model/comm/mpi_communicator.h"
#include "model/comm/tcp_communicator.h"

namespace mesa::model {
namespace {

std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, DeviceCommunicatorMaker>& Registry() {
  static auto* registry = new std::map<std::string, DeviceCommunicatorMaker>();
  return *registry;
}

std::string Sanitize(absl::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '-';
  }
  return out;
}

}  // namespace

absl::StatusOr<CommEnvironment> ReadCommEnvironment(int flag_rank, int flag_world_size,
                                                    const EnvLookup& lookup_in) {
  const EnvLookup lookup = lookup_in ? lookup_in : [](const char* n) { return getenv(n); };
  // What a worker agent set (every variable checked there); absent ones are the defaults.
  auto agent = launch::DecodeTrainerEnvironment(lookup);
  if (!agent.ok()) return agent.status();
  CommEnvironment env;
  env.timeout = absl::Seconds(agent->collective_timeout_s);
  env.comm_stream_high_priority = agent->nccl_stream_priority == "high";
  env.advertise_host = agent->tcp_host;
  env.key_prefix =
      Sanitize(absl::StrCat(agent->job_id.empty() ? "job" : agent->job_id, ".", agent->attempt));

  const char* ompi_size = lookup("OMPI_COMM_WORLD_SIZE");
  if (ompi_size != nullptr && *ompi_size != '\0') {
    auto rank = launch::IntVariable(lookup, "OMPI_COMM_WORLD_RANK", -1);
    auto world = launch::IntVariable(lookup, "OMPI_COMM_WORLD_SIZE", -1);
    auto local = launch::IntVariable(lookup, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
    if (!rank.ok()) return rank.status();
    if (!world.ok()) return world.status();
    if (!local.ok()) return local.status();
    if (*world < 1 || *rank < 0 || *rank >= *world) {
      return absl::InvalidArgumentError(
          absl::StrCat("OMPI_COMM_WORLD_RANK=", *rank, " OMPI_COMM_WORLD_SIZE=", *world));
    }
    if ((flag_rank >= 0 && flag_rank != *rank) ||
        (flag_world_size > 0 && flag_world_size != *world)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--rank/--world_size (", flag_rank, "/", flag_world_size, ") disagree with mpirun's (",
          *rank, "/", *world, "); leave them out under mpirun"));
    }
    env.launcher = Launcher::kMpirun;
    env.rank = *rank;
    env.world_size = *world;
    env.local_rank = *local;
    return env;
  }

  env.rank = flag_rank >= 0 ? flag_rank : agent->rank;
  env.world_size = flag_world_size > 0 ? flag_world_size : agent->world_size;
  env.local_rank = agent->local_rank;
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", env.rank, " is not in [0, ",
                                                   env.world_size,
                                                   ") (MESA_RANK/--rank, "
                                                   "MESA_WORLD_SIZE/--world_size)"));
  }
  if (env.world_size == 1) return env;
  env.launcher = Launcher::kAgent;
  if (!agent->rendezvous.empty()) {
    env.rendezvous = agent->rendezvous;
  } else if (!agent->checkpoint_dir.empty()) {
    // Checkpoints are on storage every rank of the job shares (docs/worker.md), so its directory
    // works as a rendezvous on one node and across nodes alike.
    env.rendezvous =
        absl::StrCat("file:", agent->checkpoint_dir, "/", launch::kCheckpointRendezvousDir);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "world size ", env.world_size, " without mpirun needs ", launch::kEnvRendezvous,
        "=file:DIR (a directory every rank can reach) or ", launch::kEnvCheckpointDir));
  }
  return env;
}

absl::StatusOr<std::unique_ptr<UniqueIdExchange>> MakeExchange(const CommEnvironment& env,
                                                               Communicator* bootstrap) {
  if (env.launcher == Launcher::kMpirun) {
    if (bootstrap == nullptr) return absl::InternalError("mpirun exchange without MPI");
    return std::make_unique<CommunicatorIdExchange>(bootstrap);
  }
  return ExchangeFromSpec(env.rendezvous, env.rank, env.timeout);
}

bool RegisterDeviceCommunicator(const std::string& device, DeviceCommunicatorMaker maker) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry()[device] = std::move(maker);
  return true;
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicatorFromEnv(const CommEnvironment& env,
                                                                        absl::string_view device) {
  if (device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("communicator for device \"", device, "\""));
  }
  DeviceCommunicatorMaker device_maker;
  if (device == "cuda") {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto it = Registry().find("cuda");
    if (it == Registry().end()) {
      if (env.world_size == 1) return std::make_unique<LocalCommunicator>();
      return absl::FailedPreconditionError(
          "data parallelism on CUDA needs NCCL, which this binary was built without "
          "(link //model/comm:nccl_communicator)");
    }
    device_maker = it->second;
  }
  std::unique_ptr<Communicator> bootstrap;
  if (env.launcher == Launcher::kMpirun) {
    MpiOptions options;
    options.timeout = env.timeout;
    auto mpi = MpiCommunicator::Create(options);
    if (!mpi.ok()) return mpi.status();
    if ((*mpi)->rank() != env.rank || (*mpi)->world_size() != env.world_size) {
      return absl::InternalError("MPI rank/size disagree with OMPI_COMM_WORLD_*");
    }
    bootstrap = *std::move(mpi);
    if (device == "cpu") return bootstrap;
  } else if (env.world_size == 1) {
    return std::make_unique<LocalCommunicator>();
  }
  auto made = MakeExchange(env, bootstrap.get());
  if (!made.ok()) return made.status();
  std::unique_ptr<UniqueIdExchange> exchange = *std::move(made);
  if (device_maker) return device_maker(env, std::move(bootstrap), *exchange);
  TcpOptions options;
  options.timeout = env.timeout;
  options.connect_timeout = env.timeout;
  options.advertise_host = env.advertise_host;
  options.key = absl::StrCat(env.key_prefix, ".tcp");
  auto tcp = TcpCommunicator::Create(env.rank, env.world_size, *exchange, options);
  if (!tcp.ok()) return tcp.status();
  return std::unique_ptr<Communicator>(*std::move(tcp));
}

}  // namespace mesa::model
