// CPU ranks started by worker agents (no mpirun): a star of TCP connections to rank 0.
//
// Rank 0 listens on an ephemeral port and publishes "host:port" through a UniqueIdExchange (the
// agent's rendezvous); every other rank connects and introduces itself. Collectives go through
// rank 0, which reduces in rank order, so every rank gets bit-identical results that do not
// depend on arrival order. This is meant for CPU jobs and tests (a few ranks, CPU-speed models):
// rank 0 moves (world_size - 1) x 2 buffers per all-reduce. GPUs use NCCL.
//
// Every receive and send is bounded by the per-collective timeout (DeadlineExceeded); a peer that
// exits closes its socket, which the others see at once (Unavailable). Either way the
// communicator is then unusable and the trainer exits with an infrastructure error, so the service
// retries the attempt from its checkpoint.
#ifndef MESANET_MODEL_COMM_TCP_COMMUNICATOR_H_
#define MESANET_MODEL_COMM_TCP_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "model/comm/communicator.h"
#include "model/comm/unique_id_exchange.h"

namespace mesa::model {

struct TcpOptions {
  absl::Duration timeout = absl::Minutes(5);          // per collective
  absl::Duration connect_timeout = absl::Minutes(5);  // all ranks connected to rank 0
  // The address rank 0 publishes; empty = this host's name. The listener binds every interface.
  std::string advertise_host;
  // Rendezvous key of the address (unique within the attempt).
  std::string key = "tcp-rank0";
};

class TcpCommunicator : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<TcpCommunicator>> Create(int rank, int world_size,
                                                                 UniqueIdExchange& exchange,
                                                                 const TcpOptions& options = {});
  ~TcpCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string name() const override { return "tcp"; }

  absl::Status AllReduce(float* data, int64_t n, ReduceOp op) override;
  absl::Status AllReduce(double* data, int64_t n, ReduceOp op) override;
  absl::Status Broadcast(float* data, int64_t n, int root) override;
  absl::Status Barrier() override;
  absl::Status BroadcastBytes(void* data, int64_t bytes, int root) override;

 private:
  TcpCommunicator(int rank, int world_size, const TcpOptions& options)
      : rank_(rank), world_size_(world_size), options_(options) {}
  template <typename T>
  absl::Status AllReduceT(T* data, int64_t n, ReduceOp op, uint32_t opcode);
  absl::Status SendMsg(int peer, uint32_t opcode, const void* data, int64_t bytes,
                       absl::Time deadline);
  absl::Status RecvMsg(int peer, uint32_t opcode, void* data, int64_t bytes, absl::Time deadline);
  absl::Status Fail(absl::Status status);

  int rank_, world_size_;
  TcpOptions options_;
  // Rank 0: fds_[r] is the connection to rank r. Others: fds_[0] is the connection to rank 0.
  std::vector<int> fds_;
  absl::Status failed_;
  std::vector<double> recv_buffer_;  // rank 0's all-reduce receive buffer (double: aligned for T)
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_COMM_TCP_COMMUNICATOR_H_
