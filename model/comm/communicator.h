// The data-parallel seam: how ranks combine gradients and agree on state.
//
// The trainer calls AllReduce on the gradient buffer (and on loss/token counts) after every step,
// Broadcast on the initial parameters, Barrier around checkpoints, and ReduceScatter/AllGather for
// a ZeRO-1 sharded optimiser. Implementations (docs/distributed.md):
//   LocalCommunicator   one process, every collective is the identity (this header);
//   MpiCommunicator     CPU ranks under mpirun (mpi_communicator.h);
//   TcpCommunicator     CPU ranks started by worker agents, rendezvous by file
//   (tcp_communicator.h); NcclCommunicator    CUDA ranks, device pointers (nccl_communicator.h, a
//   separate library so
//                       CPU-only builds need no NCCL at run time).
// CreateCommunicatorFromEnv (communicator_factory.h) picks one from the environment.
//
// Every collective is blocking from the caller's point of view and bounded: when a peer dies or
// hangs, it returns DeadlineExceeded (or Unavailable/Internal) after the communicator's timeout
// instead of hanging, and the communicator is then unusable (every later call fails fast).
#ifndef MESANET_MODEL_COMM_COMMUNICATOR_H_
#define MESANET_MODEL_COMM_COMMUNICATOR_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mesa::model {

enum class ReduceOp { kSum, kAverage };

// How a flat buffer of `total` elements is split over `world_size` ranks for ZeRO-1: contiguous,
// equal chunks of shard_size() = ceil(total / world_size) elements; rank r owns
// [r * shard_size(), min((r + 1) * shard_size(), total)). The last shard(s) are padded, so buffers
// passed to ReduceScatter/AllGather hold padded_size() = shard_size() * world_size elements (the
// padding is zero on input and ignored on output). Equal chunks are what NCCL's reduce-scatter and
// all-gather take, and a layout that depends only on (total, world_size) lets a checkpoint written
// by N ranks be re-sharded for M.
struct ShardLayout {
  int64_t total = 0;
  int world_size = 1;

  int64_t shard_size() const { return world_size <= 0 ? 0 : (total + world_size - 1) / world_size; }
  int64_t padded_size() const { return shard_size() * world_size; }
  int64_t begin(int rank) const { return std::min<int64_t>(total, rank * shard_size()); }
  int64_t end(int rank) const { return std::min<int64_t>(total, (rank + 1) * shard_size()); }
  // Elements of real data in rank's shard (the rest of its shard_size() is padding).
  int64_t size(int rank) const { return end(rank) - begin(rank); }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "local", "mpi", "tcp", "nccl": for logs and events.
  virtual std::string name() const { return "unknown"; }

  // In place; `data` is a backend (device) pointer.
  virtual absl::Status AllReduce(float* data, int64_t n, ReduceOp op) = 0;
  // In place on HOST memory: the trainer's scalars (loss and token sums, squared grad norm).
  virtual absl::Status AllReduce(double* data, int64_t n, ReduceOp op) = 0;
  virtual absl::Status Broadcast(float* data, int64_t n, int root) = 0;
  virtual absl::Status Barrier() = 0;

  // Raw bytes from `root` to every rank (host memory): small state such as a data position or a
  // NCCL unique id. Unimplemented by default.
  virtual absl::Status BroadcastBytes(void* data, int64_t bytes, int root);

  // ZeRO-1, in place on a buffer of layout.padded_size() elements (layout.world_size must equal
  // world_size()): afterwards this rank's shard [rank * shard_size(), (rank + 1) * shard_size())
  // holds the reduction over ranks of that shard; the rest of `data` is unspecified.
  // The default implementation all-reduces the whole buffer (correct, not bandwidth-optimal).
  virtual absl::Status ReduceScatter(float* data, const ShardLayout& layout, ReduceOp op);
  // In place on layout.padded_size() elements: each rank contributes its own shard; afterwards
  // every rank holds every shard. The default implementation is a loop of broadcasts.
  virtual absl::Status AllGather(float* data, const ShardLayout& layout);

  // Asynchronous all-reduce for overlapping gradient communication with the backward pass
  // (GradientBucketer): starts the reduction of `data` and returns; the buffer must not be touched
  // until WaitAll() returns. Defaults to a blocking AllReduce.
  virtual absl::Status AllReduceAsync(float* data, int64_t n, ReduceOp op) {
    return AllReduce(data, n, op);
  }
  // Waits (bounded by the communicator's timeout) for every AllReduceAsync started so far.
  virtual absl::Status WaitAll() { return absl::OkStatus(); }

  // Device communicators: the stream (a cudaStream_t) the backend computes on. Collectives are
  // ordered after the work queued on it when they are issued, which is what lets a bucket start
  // while the rest of the backward pass is still queued. Host communicators ignore it.
  virtual void SetComputeStream(void* stream) {}

  // Point to point (context parallelism hands recurrent states along time): blocking send of `n`
  // floats to rank `peer`, and the matching receive from it, bounded by the communicator's
  // timeout. Messages between two ranks arrive in the order they were sent; `data` is a backend
  // (device) pointer. Unimplemented by default (the TCP communicator has none).
  virtual absl::Status Send(const float* data, int64_t n, int peer);
  virtual absl::Status Recv(float* data, int64_t n, int peer);
  // Whether Send and Recv are implemented.
  virtual bool has_point_to_point() const { return false; }

 protected:
  absl::Status CheckLayout(const ShardLayout& layout) const;
};

// One process: every collective is the identity.
class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string name() const override { return "local"; }
  absl::Status AllReduce(float*, int64_t, ReduceOp) override { return absl::OkStatus(); }
  absl::Status AllReduce(double*, int64_t, ReduceOp) override { return absl::OkStatus(); }
  absl::Status Broadcast(float*, int64_t, int) override { return absl::OkStatus(); }
  absl::Status Barrier() override { return absl::OkStatus(); }
  absl::Status BroadcastBytes(void*, int64_t, int) override { return absl::OkStatus(); }
  absl::Status ReduceScatter(float*, const ShardLayout& layout, ReduceOp) override {
    return CheckLayout(layout);
  }
  absl::Status AllGather(float*, const ShardLayout& layout) override { return CheckLayout(layout); }
};

// Every rank's `mine`, in rank order, on every rank (host bytes of any length: the sizes first,
// one all-reduce, then a broadcast from each rank).
absl::StatusOr<std::vector<std::string>> AllGatherBytes(Communicator& comm,
                                                        const std::string& mine);

// LocalCommunicator when world_size == 1; otherwise Unimplemented (multi-process communicators
// come from CreateCommunicatorFromEnv in communicator_factory.h, which needs the environment).
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(int rank, int world_size);

// Overlaps gradient all-reduce with the backward pass. The backward pass produces gradients of
// one contiguous buffer tensor by tensor (from the last layer to the first); MarkReady(offset, n)
// says [offset, offset + n) is final. Ready ranges are merged, and each contiguous run of at least
// bucket_elements is handed to AllReduceAsync at once; Finish() sends what is left and waits.
// Ranges may arrive in any order but must not overlap; every rank must mark the same ranges in the
// same order (the collectives are matched by order).
class GradientBucketer {
 public:
  GradientBucketer(Communicator* comm, float* data, int64_t n, int64_t bucket_elements,
                   ReduceOp op = ReduceOp::kSum);
  absl::Status MarkReady(int64_t offset, int64_t n);
  // Sends the remaining ready ranges and waits for every bucket. All of [0, n) must be ready.
  absl::Status Finish();
  int buckets_sent() const { return buckets_sent_; }

 private:
  absl::Status Send(int64_t begin, int64_t end);

  Communicator* comm_;
  float* data_;
  int64_t n_;
  int64_t bucket_elements_;
  ReduceOp op_;
  // Ready but not yet sent, as sorted disjoint [begin, end) ranges.
  std::vector<std::pair<int64_t, int64_t>> pending_;
  int64_t sent_elements_ = 0;
  int buckets_sent_ = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_COMM_COMMUNICATOR_H_
