#include "model/comm/nccl_communicator.h"

#include <nccl.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "model/comm/communicator_factory.h"

namespace mesa::model {

struct NcclCommunicator::Handle {
  ncclComm_t comm = nullptr;
};

namespace {

std::string NcclError(ncclResult_t rc, ncclComm_t comm) {
  std::string out = ncclGetErrorString(rc);
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') absl::StrAppend(&out, ": ", last);
  }
  return out;
}

absl::Status CudaStatus(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(rc)));
}

ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::kAverage ? ncclAvg : ncclSum; }

int64_t NowNs() { return absl::GetCurrentTimeNanos(); }

void PollPause(int& spins) {
  if (++spins < 100) return;
  std::this_thread::sleep_for(std::chrono::microseconds(spins < 1000 ? 10 : 200));
}

}  // namespace

NcclCommunicator::NcclCommunicator(const NcclOptions& options,
                                   std::unique_ptr<Communicator> bootstrap)
    : options_(options), bootstrap_(std::move(bootstrap)), handle_(std::make_unique<Handle>()) {}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const NcclOptions& options, UniqueIdExchange& exchange,
    std::unique_ptr<Communicator> bootstrap) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " of world size ", options.world_size));
  }
  auto comm =
      std::unique_ptr<NcclCommunicator>(new NcclCommunicator(options, std::move(bootstrap)));
  if (absl::Status st = comm->Init(exchange); !st.ok()) return st;
  comm->watchdog_ = std::thread([c = comm.get()] { c->Watchdog(); });
  return comm;
}

absl::Status NcclCommunicator::Init(UniqueIdExchange& exchange) {
  if (absl::Status st = CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"); !st.ok()) {
    return st;
  }
  int least = 0, greatest = 0;  // numerically, greatest priority < least
  absl::Status st = CudaStatus(cudaDeviceGetStreamPriorityRange(&least, &greatest),
                               "cudaDeviceGetStreamPriorityRange");
  if (st.ok()) {
    st = CudaStatus(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking,
                                                 options_.high_priority_stream ? greatest : 0),
                    "cudaStreamCreateWithPriority");
  }
  if (st.ok()) st = CudaStatus(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "event");
  if (st.ok()) st = CudaStatus(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "event");
  if (st.ok()) st = CudaStatus(cudaMalloc(&scratch_, kScratchBytes), "cudaMalloc");
  if (!st.ok()) return st;

  ncclUniqueId id;
  std::string bytes;
  if (options_.rank == 0) {
    if (ncclResult_t rc = ncclGetUniqueId(&id); rc != ncclSuccess) {
      return absl::InternalError(absl::StrCat("ncclGetUniqueId: ", NcclError(rc, nullptr)));
    }
    bytes.assign(reinterpret_cast<const char*>(&id), sizeof(id));
  }
  if (absl::Status ex = exchange.Exchange(options_.key, 0, &bytes); !ex.ok()) return ex;
  if (bytes.size() != sizeof(id)) {
    return absl::InternalError(absl::StrCat("NCCL unique id of ", bytes.size(), " bytes, want ",
                                            sizeof(id), " (rendezvous key ", options_.key, ")"));
  }
  std::memcpy(&id, bytes.data(), sizeof(id));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and collectives return at once; we poll against a deadline
  ncclResult_t rc =
      ncclCommInitRankConfig(&handle_->comm, options_.world_size, id, options_.rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    return absl::UnavailableError(absl::StrCat("ncclCommInitRankConfig (rank ", options_.rank,
                                               "): ", NcclError(rc, handle_->comm)));
  }
  return WaitReady("ncclCommInitRankConfig", absl::Now() + options_.timeout);
}

NcclCommunicator::~NcclCommunicator() {
  stop_watchdog_.Notify();
  if (watchdog_.joinable()) watchdog_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (handle_->comm != nullptr) {
      if (failed_.ok()) {
        // Flush what is queued (bounded), then destroy; abort if that does not finish.
        ncclCommFinalize(handle_->comm);
        const absl::Time deadline = absl::Now() + absl::Seconds(10);
        ncclResult_t state = ncclInProgress;
        int spins = 0;
        while (ncclCommGetAsyncError(handle_->comm, &state) == ncclSuccess &&
               state == ncclInProgress && absl::Now() < deadline) {
          PollPause(spins);
        }
        if (state == ncclSuccess) {
          ncclCommDestroy(handle_->comm);
        } else {
          ncclCommAbort(handle_->comm);
        }
      } else if (!aborted_.exchange(true)) {
        ncclCommAbort(handle_->comm);
      }
      handle_->comm = nullptr;
    }
  }
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status NcclCommunicator::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

absl::Status NcclCommunicator::Fail(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_.ok()) failed_ = std::move(status);
  if (handle_->comm != nullptr && !aborted_.exchange(true)) {
    // Unblocks kernels stuck waiting for a dead peer; the handle is unusable afterwards.
    ncclCommAbort(handle_->comm);
    handle_->comm = nullptr;
  }
  in_flight_since_ns_.store(0);
  return failed_;
}

absl::Status NcclCommunicator::WaitReady(const char* what, absl::Time deadline) {
  int spins = 0;
  while (true) {
    ncclResult_t state = ncclSuccess;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failed_.ok()) return failed_;
      ncclResult_t rc = ncclCommGetAsyncError(handle_->comm, &state);
      if (rc != ncclSuccess) state = rc;
    }
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      return Fail(absl::UnavailableError(
          absl::StrCat(what, " on rank ", options_.rank, ": ", NcclError(state, handle_->comm))));
    }
    if (absl::Now() > deadline) {
      return Fail(absl::DeadlineExceededError(absl::StrCat(
          what, " timed out after ", absl::FormatDuration(options_.timeout), " on rank ",
          options_.rank, " of ", options_.world_size,
          ": a peer rank has died or hangs (MESA_COLLECTIVE_TIMEOUT_S sets the limit)")));
    }
    PollPause(spins);
  }
}

template <typename Enqueue>
absl::Status NcclCommunicator::Launch(const char* what, Enqueue enqueue) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) return failed_;
  }
  // Inputs written by kernels on the compute stream must be complete before NCCL reads them.
  absl::Status st = CudaStatus(cudaEventRecord(ready_, compute_stream_), "cudaEventRecord");
  if (st.ok()) st = CudaStatus(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
  if (!st.ok()) return Fail(st);
  ncclResult_t rc;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) return failed_;
    rc = enqueue(handle_->comm);
  }
  if (rc != ncclSuccess && rc != ncclInProgress) {
    return Fail(absl::UnavailableError(
        absl::StrCat(what, " on rank ", options_.rank, ": ", NcclError(rc, handle_->comm))));
  }
  int64_t expected = 0;
  in_flight_since_ns_.compare_exchange_strong(expected, NowNs());
  if (rc == ncclInProgress) {
    if (absl::Status ready = WaitReady(what, absl::Now() + options_.timeout); !ready.ok()) {
      return ready;
    }
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::WaitAll() {
  const int64_t since = in_flight_since_ns_.load();
  if (since == 0) return health();
  const absl::Time deadline = absl::FromUnixNanos(since) + options_.timeout;
  int spins = 0;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failed_.ok()) return failed_;
    }
    const cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) return Fail(CudaStatus(q, "collective stream"));
    ncclResult_t state = ncclSuccess;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failed_.ok()) return failed_;
      if (ncclCommGetAsyncError(handle_->comm, &state) != ncclSuccess) state = ncclInternalError;
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      return Fail(absl::UnavailableError(absl::StrCat("NCCL error on rank ", options_.rank, ": ",
                                                      NcclError(state, handle_->comm))));
    }
    if (absl::Now() > deadline) {
      return Fail(absl::DeadlineExceededError(absl::StrCat(
          "NCCL collective timed out after ", absl::FormatDuration(options_.timeout), " on rank ",
          options_.rank, " of ", options_.world_size,
          ": a peer rank has died or hangs (MESA_COLLECTIVE_TIMEOUT_S sets the limit)")));
    }
    PollPause(spins);
  }
  in_flight_since_ns_.store(0);
  return absl::OkStatus();
}

absl::Status NcclCommunicator::ComputeWaitsForComm() {
  if (absl::Status st = health(); !st.ok()) return st;
  absl::Status st = CudaStatus(cudaEventRecord(done_, stream_), "cudaEventRecord");
  if (st.ok()) st = CudaStatus(cudaStreamWaitEvent(compute_stream_, done_, 0), "wait event");
  return st.ok() ? st : Fail(st);
}

void NcclCommunicator::Watchdog() {
  while (!stop_watchdog_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
    const int64_t since = in_flight_since_ns_.load();
    if (since == 0) continue;
    ncclResult_t state = ncclSuccess;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failed_.ok() || handle_->comm == nullptr) continue;
      if (ncclCommGetAsyncError(handle_->comm, &state) != ncclSuccess) state = ncclInternalError;
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      (void)Fail(absl::UnavailableError(absl::StrCat("NCCL error on rank ", options_.rank,
                                                     " (watchdog): ", ncclGetErrorString(state))));
    } else if (NowNs() - since > absl::ToInt64Nanoseconds(options_.timeout)) {
      (void)Fail(absl::DeadlineExceededError(absl::StrCat(
          "NCCL collective in flight for over ", absl::FormatDuration(options_.timeout),
          " on rank ", options_.rank, " of ", options_.world_size,
          " (watchdog): a peer rank has died or hangs; communicator aborted")));
    }
  }
}

absl::Status NcclCommunicator::AllReduceAsync(float* data, int64_t n, ReduceOp op) {
  if (n == 0) return health();
  return Launch("ncclAllReduce", [&](ncclComm_t c) {
    return ncclAllReduce(data, data, n, ncclFloat, NcclOp(op), c, stream_);
  });
}

absl::Status NcclCommunicator::AllReduce(float* data, int64_t n, ReduceOp op) {
  if (absl::Status st = AllReduceAsync(data, n, op); !st.ok()) return st;
  return WaitAll();
}

absl::Status NcclCommunicator::AllReduce(double* data, int64_t n, ReduceOp op) {
  if (n == 0) return health();
  // Host scalars (loss sums, the squared grad norm): NCCL only reads device memory, so stage them.
  const size_t bytes = sizeof(double) * n;
  void* staging = scratch_;
  if (bytes > kScratchBytes) {
    if (absl::Status st = CudaStatus(cudaMalloc(&staging, bytes), "cudaMalloc"); !st.ok())
      return st;
  }
  absl::Status st = CudaStatus(cudaMemcpy(staging, data, bytes, cudaMemcpyHostToDevice), "copy");
  if (st.ok()) {
    st = Launch("ncclAllReduce", [&](ncclComm_t c) {
      return ncclAllReduce(staging, staging, n, ncclDouble, NcclOp(op), c, stream_);
    });
  }
  if (st.ok()) st = WaitAll();
  if (st.ok()) st = CudaStatus(cudaMemcpy(data, staging, bytes, cudaMemcpyDeviceToHost), "copy");
  if (staging != scratch_) cudaFree(staging);
  return st;
}

absl::Status NcclCommunicator::Send(const float* data, int64_t n, int peer) {
  return PointToPoint(const_cast<float*>(data), n, peer, /*send=*/true);
}

absl::Status NcclCommunicator::Recv(float* data, int64_t n, int peer) {
  return PointToPoint(data, n, peer, /*send=*/false);
}

absl::Status NcclCommunicator::PointToPoint(float* data, int64_t n, int peer, bool send) {
  if (peer < 0 || peer >= options_.world_size || peer == options_.rank) {
    return absl::InvalidArgumentError(absl::StrCat(send ? "send to" : "receive from", " rank ",
                                                   peer, " on rank ", options_.rank, " of ",
                                                   options_.world_size));
  }
  if (n == 0) return health();
  absl::Status st = Launch(send ? "ncclSend" : "ncclRecv", [&](ncclComm_t c) {
    return send ? ncclSend(data, n, ncclFloat, peer, c, stream_)
                : ncclRecv(data, n, ncclFloat, peer, c, stream_);
  });
  return st.ok() ? WaitAll() : st;
}

absl::Status NcclCommunicator::Broadcast(float* data, int64_t n, int root) {
  if (root < 0 || root >= options_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root));
  }
  if (n == 0) return health();
  absl::Status st = Launch("ncclBroadcast", [&](ncclComm_t c) {
    return ncclBroadcast(data, data, n, ncclFloat, root, c, stream_);
  });
  return st.ok() ? WaitAll() : st;
}

absl::Status NcclCommunicator::BroadcastBytes(void* data, int64_t bytes, int root) {
  if (root < 0 || root >= options_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root));
  }
  if (bytes == 0) return health();
  void* staging = nullptr;
  if (absl::Status st = CudaStatus(cudaMalloc(&staging, bytes), "cudaMalloc"); !st.ok()) return st;
  absl::Status st = CudaStatus(cudaMemcpy(staging, data, bytes, cudaMemcpyHostToDevice), "copy");
  if (st.ok()) {
    st = Launch("ncclBroadcast", [&](ncclComm_t c) {
      return ncclBroadcast(staging, staging, bytes, ncclUint8, root, c, stream_);
    });
  }
  if (st.ok()) st = WaitAll();
  if (st.ok()) st = CudaStatus(cudaMemcpy(data, staging, bytes, cudaMemcpyDeviceToHost), "copy");
  cudaFree(staging);
  return st;
}

absl::Status NcclCommunicator::Barrier() {
  // A one-element all-reduce: completes on a rank only once every rank has joined.
  return AllReduce(static_cast<float*>(scratch_), 1, ReduceOp::kSum);
}

absl::Status NcclCommunicator::ReduceScatter(float* data, const ShardLayout& layout, ReduceOp op) {
  if (absl::Status st = CheckLayout(layout); !st.ok()) return st;
  const int64_t shard = layout.shard_size();
  if (shard == 0) return health();
  // In place: NCCL wants recvbuff == sendbuff + rank * recvcount.
  absl::Status st = Launch("ncclReduceScatter", [&](ncclComm_t c) {
    return ncclReduceScatter(data, data + options_.rank * shard, shard, ncclFloat, NcclOp(op), c,
                             stream_);
  });
  return st.ok() ? WaitAll() : st;
}

absl::Status NcclCommunicator::AllGather(float* data, const ShardLayout& layout) {
  if (absl::Status st = CheckLayout(layout); !st.ok()) return st;
  const int64_t shard = layout.shard_size();
  if (shard == 0) return health();
  absl::Status st = Launch("ncclAllGather", [&](ncclComm_t c) {
    return ncclAllGather(data + options_.rank * shard, data, shard, ncclFloat, c, stream_);
  });
  return st.ok() ? WaitAll() : st;
}

namespace {

// Registered with the factory: device = local rank modulo the visible devices (agents give each
// rank one device through CUDA_VISIBLE_DEVICES; under mpirun ranks of a node share them). The
// trainer picks its model's device by the same rule (CudaDeviceForLocalRank).
absl::StatusOr<std::unique_ptr<Communicator>> MakeNccl(const CommEnvironment& env,
                                                       std::unique_ptr<Communicator> bootstrap,
                                                       UniqueIdExchange& exchange) {
  int devices = 0;
  if (cudaError_t rc = cudaGetDeviceCount(&devices); rc != cudaSuccess || devices == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL communicator: no CUDA device (", cudaGetErrorString(rc), ")"));
  }
  NcclOptions options;
  options.rank = env.rank;
  options.world_size = env.world_size;
  options.device = env.local_rank % devices;
  options.timeout = env.timeout;
  options.key = absl::StrCat(env.key_prefix, ".nccl");
  options.high_priority_stream = env.comm_stream_high_priority;
  auto comm = NcclCommunicator::Create(options, exchange, std::move(bootstrap));
  if (!comm.ok()) return comm.status();
  return std::unique_ptr<Communicator>(*std::move(comm));
}

const bool kRegistered = RegisterDeviceCommunicator("cuda", MakeNccl);

}  // namespace

}  // namespace mesa::model
