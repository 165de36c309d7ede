#include "model/comm/communicator_factory.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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

// Parses an integer variable; absent → `fallback`.
absl::StatusOr<int> IntVar(const EnvLookup& lookup, const char* name, int fallback) {
  const char* value = lookup(name);
  if (value == nullptr || *value == '\0') return fallback;
  int out = 0;
  if (!absl::SimpleAtoi(value, &out)) {
    return absl::InvalidArgumentError(absl::StrCat(name, "=\"", value, "\" is not an integer"));
  }
  return out;
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
  CommEnvironment env;
  auto timeout_s = IntVar(lookup, "MESA_COLLECTIVE_TIMEOUT_S", 300);
  if (!timeout_s.ok()) return timeout_s.status();
  if (*timeout_s <= 0) {
    return absl::InvalidArgumentError("MESA_COLLECTIVE_TIMEOUT_S must be positive");
  }
  env.timeout = absl::Seconds(*timeout_s);
  if (const char* prio = lookup("MESA_NCCL_STREAM_PRIORITY"); prio != nullptr && *prio != '\0') {
    if (absl::string_view(prio) != "high" && absl::string_view(prio) != "normal") {
      return absl::InvalidArgumentError(absl::StrCat(
          "MESA_NCCL_STREAM_PRIORITY must be \"high\" or \"normal\", got \"", prio, "\""));
    }
    env.comm_stream_high_priority = absl::string_view(prio) == "high";
  }
  if (const char* host = lookup("MESA_TCP_HOST"); host != nullptr) env.advertise_host = host;
  const char* job = lookup("MESA_JOB_ID");
  const char* attempt = lookup("MESA_ATTEMPT");
  env.key_prefix = Sanitize(absl::StrCat(job != nullptr && *job ? job : "job", ".",
                                         attempt != nullptr && *attempt ? attempt : "0"));

  auto mesa_rank = IntVar(lookup, "MESA_RANK", 0);
  auto mesa_world = IntVar(lookup, "MESA_WORLD_SIZE", 1);
  auto mesa_local = IntVar(lookup, "MESA_LOCAL_RANK", 0);
  if (!mesa_rank.ok()) return mesa_rank.status();
  if (!mesa_world.ok()) return mesa_world.status();
  if (!mesa_local.ok()) return mesa_local.status();

  const char* ompi_size = lookup("OMPI_COMM_WORLD_SIZE");
  if (ompi_size != nullptr && *ompi_size != '\0') {
    auto rank = IntVar(lookup, "OMPI_COMM_WORLD_RANK", -1);
    auto world = IntVar(lookup, "OMPI_COMM_WORLD_SIZE", -1);
    auto local = IntVar(lookup, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
    if (!rank.ok()) return rank.status();
    if (!world.ok()) return world.status();
    if (!local.ok()) return local.status();
    if (*world < 1 || *rank < 0 || *rank >= *world) {
      return absl::InvalidArgumentError(absl::StrCat("OMPI_COMM_WORLD_RANK=", *rank,
                                                     " OMPI_COMM_WORLD_SIZE=", *world));
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

  env.rank = flag_rank >= 0 ? flag_rank : *mesa_rank;
  env.world_size = flag_world_size > 0 ? flag_world_size : *mesa_world;
  env.local_rank = *mesa_local;
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", env.rank, " is not in [0, ",
                                                   env.world_size, ") (MESA_RANK/--rank, "
                                                   "MESA_WORLD_SIZE/--world_size)"));
  }
  if (env.world_size == 1) return env;
  env.launcher = Launcher::kAgent;
  if (const char* rv = lookup("MESA_RENDEZVOUS"); rv != nullptr && *rv != '\0') {
    env.rendezvous = rv;
  } else if (const char* ckpt = lookup("MESA_CHECKPOINT_DIR"); ckpt != nullptr && *ckpt != '\0') {
    // Checkpoints are on storage every rank of the job shares (docs/worker.md), so its directory
    // works as a rendezvous on one node and across nodes alike.
    env.rendezvous = absl::StrCat("file:", ckpt, "/.rendezvous");
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "world size ", env.world_size, " without mpirun needs MESA_RENDEZVOUS=file:DIR (a "
        "directory every rank can reach) or MESA_CHECKPOINT_DIR"));
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

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicatorFromEnv(
    const CommEnvironment& env, absl::string_view device) {
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
