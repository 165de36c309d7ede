// Picks and builds the Communicator of a trainer process from its environment
// (the contract is documented in docs/distributed.md):
//
//   under mpirun (OMPI_COMM_WORLD_SIZE set)   rank/world/local rank from OpenMPI; CPU → MPI; CUDA →
//                                             NCCL with its unique id broadcast over MPI;
//   started by a worker agent (MESA_WORLD_SIZE > 1)
//                                             rank/world/local rank from MESA_RANK,
//                                             MESA_WORLD_SIZE, MESA_LOCAL_RANK; bootstrap values
//                                             through MESA_RENDEZVOUS (default: a directory under
//                                             MESA_CHECKPOINT_DIR); CPU → TCP; CUDA → NCCL;
//   otherwise                                 one process, LocalCommunicator.
// MESA_COLLECTIVE_TIMEOUT_S bounds every collective and the rendezvous (default 300 s).
//
// The CUDA communicator lives in a separate library (nccl_communicator) that registers itself
// here when linked, so CPU-only binaries neither link nor load NCCL.
#ifndef MESANET_MODEL_COMM_COMMUNICATOR_FACTORY_H_
#define MESANET_MODEL_COMM_COMMUNICATOR_FACTORY_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "launch/trainer_launch.h"
#include "model/comm/communicator.h"
#include "model/comm/unique_id_exchange.h"

namespace mesa::model {

enum class Launcher { kSingle, kMpirun, kAgent };

struct CommEnvironment {
  Launcher launcher = Launcher::kSingle;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;          // rank among this node's processes: picks the GPU under mpirun
  std::string rendezvous;      // "file:DIR" (agent launcher, world_size > 1)
  std::string key_prefix;      // "<job>.<attempt>": rendezvous keys of this attempt
  std::string advertise_host;  // MESA_TCP_HOST: the address rank 0 publishes for TCP
  absl::Duration timeout = absl::Seconds(300);
  // MESA_NCCL_STREAM_PRIORITY=high|normal: the CUDA priority of the NCCL stream, so that when a
  // gradient bucket's collective is queued during the backward its blocks are scheduled before the
  // compute stream's next ones (docs/distributed.md).
  bool comm_stream_high_priority = false;
};

// getenv, or a stand-in for tests.
using EnvLookup = launch::EnvLookup;

// Reads the environment. `flag_rank`/`flag_world_size` (>= 0 / > 0) override MESA_RANK and
// MESA_WORLD_SIZE; under mpirun they must agree with MPI's. InvalidArgument names the variable.
absl::StatusOr<CommEnvironment> ReadCommEnvironment(int flag_rank = -1, int flag_world_size = -1,
                                                    const EnvLookup& lookup = nullptr);

// `device` is "cpu" or "cuda". Errors: FailedPrecondition when `cuda` is asked for in a binary
// without the NCCL library; DeadlineExceeded/Unavailable when peers do not show up in time.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicatorFromEnv(const CommEnvironment& env,
                                                                        absl::string_view device);

// The rendezvous of this attempt (MPI broadcast under mpirun, files for the agent launcher).
// `bootstrap` is the MPI communicator under mpirun (may be null otherwise).
absl::StatusOr<std::unique_ptr<UniqueIdExchange>> MakeExchange(const CommEnvironment& env,
                                                               Communicator* bootstrap);

// A device communicator maker, registered by the library that implements it. `bootstrap` is the
// MPI communicator under mpirun (null otherwise); the result takes ownership of it.
using DeviceCommunicatorMaker = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
    const CommEnvironment& env, std::unique_ptr<Communicator> bootstrap,
    UniqueIdExchange& exchange)>;
// Returns true, so it can initialise a static in the registering library.
bool RegisterDeviceCommunicator(const std::string& device, DeviceCommunicatorMaker maker);

}  // namespace mesa::model

#endif  // MESANET_MODEL_COMM_COMMUNICATOR_FACTORY_H_
