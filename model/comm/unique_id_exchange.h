// How ranks agree on a small bootstrap value (a NCCL unique id, the TCP address of rank 0) before
// they can talk to each other. Rank `root` creates the value; every other rank receives it.
//
//   CommunicatorIdExchange  over an existing communicator's BroadcastBytes: MPI under mpirun.
//   FileIdExchange          through files in a directory: root writes DIR/KEY atomically (temp
//                           file DIR/KEY+tmp.PID.RAND + rename), the others create an empty
//                           DIR/KEY+want marker and poll for DIR/KEY. On one node the directory is
//                           all it takes; across nodes the worker agent bridges it to the
//                           coordinator's per-attempt rendezvous (PutRendezvous/GetRendezvous):
//                           it publishes what its rank 0 wrote and writes what it fetched, so
//                           mesa-train itself never links gRPC (docs/distributed.md).
//   CallbackIdExchange      publish/lookup functions, for embedders and tests.
// Every wait is bounded by a timeout and ends in DeadlineExceeded.
#ifndef MESANET_MODEL_COMM_UNIQUE_ID_EXCHANGE_H_
#define MESANET_MODEL_COMM_UNIQUE_ID_EXCHANGE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "model/comm/communicator.h"

namespace mesa::model {

class UniqueIdExchange {
 public:
  virtual ~UniqueIdExchange() = default;
  // On `root`, publishes *value under `key`; elsewhere, waits for it and stores it in *value.
  // Keys are [A-Za-z0-9._-]+ and name a value within one attempt of one job.
  virtual absl::Status Exchange(absl::string_view key, int root, std::string* value) = 0;
};

class CommunicatorIdExchange : public UniqueIdExchange {
 public:
  explicit CommunicatorIdExchange(Communicator* comm) : comm_(comm) {}
  absl::Status Exchange(absl::string_view key, int root, std::string* value) override;

 private:
  Communicator* comm_;
};

class FileIdExchange : public UniqueIdExchange {
 public:
  FileIdExchange(std::string dir, int rank, absl::Duration timeout)
      : dir_(std::move(dir)), rank_(rank), timeout_(timeout) {}
  absl::Status Exchange(absl::string_view key, int root, std::string* value) override;

  // The file that holds `key` (for the agent's bridge and for tests).
  std::string PathFor(absl::string_view key) const;

 private:
  std::string dir_;
  int rank_;
  absl::Duration timeout_;
};

class CallbackIdExchange : public UniqueIdExchange {
 public:
  using Publish = std::function<absl::Status(absl::string_view key, const std::string& value)>;
  // Blocks until the value exists or the deadline passes (DeadlineExceeded).
  using Lookup =
      std::function<absl::StatusOr<std::string>(absl::string_view key, absl::Time deadline)>;
  CallbackIdExchange(int rank, absl::Duration timeout, Publish publish, Lookup lookup)
      : rank_(rank), timeout_(timeout), publish_(std::move(publish)), lookup_(std::move(lookup)) {}
  absl::Status Exchange(absl::string_view key, int root, std::string* value) override;

 private:
  int rank_;
  absl::Duration timeout_;
  Publish publish_;
  Lookup lookup_;
};

// MESA_RENDEZVOUS: "file:DIR" or a plain directory path → FileIdExchange. Other schemes are
// InvalidArgument (the coordinator is reached through the agent's file bridge, not directly).
absl::StatusOr<std::unique_ptr<UniqueIdExchange>> ExchangeFromSpec(const std::string& spec,
                                                                   int rank,
                                                                   absl::Duration timeout);

}  // namespace mesa::model

#endif  // MESANET_MODEL_COMM_UNIQUE_ID_EXCHANGE_H_
