// NCCL communicator for CUDA ranks: every pointer is a device pointer; collectives run on the
// communicator's own stream, ordered after the work queued so far on the compute stream.
//
// Bootstrap: rank 0 calls ncclGetUniqueId and hands the id to the others through a
// UniqueIdExchange: an MPI broadcast under mpirun, the file/agent rendezvous when worker agents
// started the ranks (unique_id_exchange.h). The communicator is created non-blocking
// (ncclCommInitRankConfig with blocking = 0) so that initialisation is bounded too.
//
// Timeouts: every blocking call polls the stream and ncclCommGetAsyncError against a deadline,
// and a watchdog thread does the same for collectives still in flight while the caller is stuck
// elsewhere (e.g. synchronising the compute stream that waits on them). On an asynchronous NCCL
// error or a timeout the communicator is aborted (ncclCommAbort, which also unblocks kernels
// stuck in the collective) and every call returns the error: DeadlineExceeded ("a peer rank has
// died or hangs") or Unavailable/Internal with NCCL's own message. The trainer then exits with an
// infrastructure error and the service retries the attempt from its last checkpoint.
#ifndef MESANET_MODEL_COMM_NCCL_COMMUNICATOR_H_
#define MESANET_MODEL_COMM_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "model/comm/communicator.h"
#include "model/comm/unique_id_exchange.h"

namespace mesa::model {

struct NcclOptions {
  int rank = 0;
  int world_size = 1;
  int device = 0;                             // CUDA device index of this rank
  absl::Duration timeout = absl::Minutes(5);  // init and every collective
  std::string key = "nccl";                   // rendezvous key of the unique id
  bool high_priority_stream = false;          // the collectives' stream at the greatest priority
};

class NcclCommunicator : public Communicator {
 public:
  // `bootstrap` (may be null) is kept alive as long as this communicator: under mpirun it is the
  // MPI communicator `exchange` broadcasts over, and MPI must outlive NCCL's use of it.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      const NcclOptions& options, UniqueIdExchange& exchange,
      std::unique_ptr<Communicator> bootstrap = nullptr);
  ~NcclCommunicator() override;

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  std::string name() const override { return "nccl"; }

  // Collectives queued on the compute stream before the call are complete before the collective
  // reads its input (cudaStreamWaitEvent); the default compute stream is the legacy stream 0.
  void SetComputeStream(void* stream) override {
    compute_stream_ = static_cast<cudaStream_t>(stream);
  }
  cudaStream_t stream() const { return stream_; }

  absl::Status AllReduce(float* data, int64_t n, ReduceOp op) override;
  absl::Status AllReduce(double* data, int64_t n, ReduceOp op) override;
  absl::Status Broadcast(float* data, int64_t n, int root) override;
  absl::Status Barrier() override;
  // Host memory, staged through a device buffer.
  absl::Status BroadcastBytes(void* data, int64_t bytes, int root) override;
  absl::Status ReduceScatter(float* data, const ShardLayout& layout, ReduceOp op) override;
  absl::Status AllGather(float* data, const ShardLayout& layout) override;
  // Queues the all-reduce on stream() and returns; WaitAll() (or ComputeWaitsForComm()) completes
  // it. Used by GradientBucketer to overlap buckets with the rest of the backward pass.
  absl::Status AllReduceAsync(float* data, int64_t n, ReduceOp op) override;
  absl::Status WaitAll() override;
  // ncclSend / ncclRecv on the communicator's stream (the send after the compute stream's work),
  // then a wait for the stream: the buffer is free (Send) or filled (Recv) on return. The wait
  // also completes collectives queued before (every rank queues those in the same order).
  absl::Status Send(const float* data, int64_t n, int peer) override;
  absl::Status Recv(float* data, int64_t n, int peer) override;
  bool has_point_to_point() const override { return true; }
  // Makes the compute stream wait for the collectives queued so far, without blocking the host
  // (the watchdog still bounds them).
  absl::Status ComputeWaitsForComm();

  absl::Status health() const;

 private:
  absl::Status PointToPoint(float* data, int64_t n, int peer, bool send);
  NcclCommunicator(const NcclOptions& options, std::unique_ptr<Communicator> bootstrap);
  absl::Status Init(UniqueIdExchange& exchange);
  template <typename Enqueue>
  absl::Status Launch(const char* what, Enqueue enqueue);
  // Waits until the communicator is not ncclInProgress (non-blocking mode).
  absl::Status WaitReady(const char* what, absl::Time deadline);
  absl::Status Fail(absl::Status status);  // records, aborts the comm once
  void Watchdog();

  NcclOptions options_;
  std::unique_ptr<Communicator> bootstrap_;
  struct Handle;  // ncclComm_t, kept out of this header
  std::unique_ptr<Handle> handle_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t compute_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // recorded on the compute stream before each collective
  cudaEvent_t done_ = nullptr;   // recorded on stream_ after the last collective
  // Device scratch: one float for Barrier, and staging for host-memory double all-reduces.
  static constexpr size_t kScratchBytes = 4096;
  void* scratch_ = nullptr;

  mutable std::mutex mu_;
  absl::Status failed_;  // guarded by mu_
  std::atomic<bool> aborted_{false};
  // In-flight tracking for the watchdog: 0 when nothing is in flight.
  std::atomic<int64_t> in_flight_since_ns_{0};
  absl::Notification stop_watchdog_;
  std::thread watchdog_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_COMM_NCCL_COMMUNICATOR_H_
