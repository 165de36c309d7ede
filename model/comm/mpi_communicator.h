// MPI (OpenMPI) communicator for CPU ranks launched by `mpirun -np N mesa-train ...`, and the
// bootstrap channel of NCCL under mpirun (the unique id is broadcast over MPI).
//
// Every collective is issued non-blocking (MPI_Iallreduce, ...) and completed by polling MPI_Test
// against a deadline, so a peer that hangs or died makes the call return DeadlineExceeded after
// `timeout` instead of blocking forever. After a failure the communicator refuses further calls and
// its destructor skips MPI_Finalize (which would wait on the dead peer): the process exits, and
// mpirun then tears down the remaining ranks.
#ifndef MESANET_MODEL_COMM_MPI_COMMUNICATOR_H_
#define MESANET_MODEL_COMM_MPI_COMMUNICATOR_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "model/comm/communicator.h"

namespace mesa::model {

struct MpiOptions {
  // Bound on every collective, from its start until it completes on this rank.
  absl::Duration timeout = absl::Minutes(5);
};

class MpiCommunicator : public Communicator {
 public:
  // Calls MPI_Init_thread(MPI_THREAD_FUNNELED) unless MPI is already initialised (then it is not
  // finalised by us either) and duplicates MPI_COMM_WORLD with errors returned, not fatal.
  // Only the thread that created the communicator may call it.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Create(const MpiOptions& options = {});
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string name() const override { return "mpi"; }

  absl::Status AllReduce(float* data, int64_t n, ReduceOp op) override;
  absl::Status AllReduce(double* data, int64_t n, ReduceOp op) override;
  absl::Status Broadcast(float* data, int64_t n, int root) override;
  absl::Status Barrier() override;
  absl::Status BroadcastBytes(void* data, int64_t bytes, int root) override;
  absl::Status ReduceScatter(float* data, const ShardLayout& layout, ReduceOp op) override;
  absl::Status AllGather(float* data, const ShardLayout& layout) override;
  absl::Status AllReduceAsync(float* data, int64_t n, ReduceOp op) override;
  absl::Status WaitAll() override;
  absl::Status Send(const float* data, int64_t n, int peer) override;
  absl::Status Recv(float* data, int64_t n, int peer) override;
  bool has_point_to_point() const override { return true; }

 private:
  struct Impl;
  MpiCommunicator(std::unique_ptr<Impl> impl, const MpiOptions& options);
  // Starts in-place sum all-reduces of `data` (chunks of at most 2^30 elements); an average is
  // scaled by WaitAll once they complete. T is float or double.
  template <typename T>
  absl::Status StartAllReduce(T* data, int64_t n, ReduceOp op);
  // Polls the outstanding collectives (or, with `point_to_point`, the send or receive in flight,
  // leaving collectives to progress) to completion against the timeout; a failure poisons.
  absl::Status Poll(bool point_to_point);
  absl::Status PointToPoint(float* data, int64_t n, int peer, bool send);

  std::unique_ptr<Impl> impl_;
  MpiOptions options_;
  int rank_ = 0, world_size_ = 1;
  absl::Status failed_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_COMM_MPI_COMMUNICATOR_H_
