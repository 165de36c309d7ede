#include "model/comm/mpi_communicator.h"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace mesa::model {
namespace {

// MPI counts are int; larger buffers go out as several collectives of at most this many elements.
constexpr int64_t kMaxChunk = int64_t{1} << 30;

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return absl::StrCat("MPI error ", code);
  return std::string(text, len);
}

}  // namespace

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owns_init = false;
  // Outstanding requests, and what to scale once they complete (averages).
  std::vector<MPI_Request> requests;
  std::vector<MPI_Request> point_to_point;  // the Send or Recv in flight
  struct Scale {
    float* f = nullptr;
    double* d = nullptr;
    int64_t n = 0;
  };
  std::vector<Scale> scales;
};

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(
    const MpiOptions& options) {
  auto impl = std::make_unique<Impl>();
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
        rc != MPI_SUCCESS) {
      return absl::UnavailableError(absl::StrCat("MPI_Init_thread: ", MpiErrorString(rc)));
    }
    impl->owns_init = true;
  }
  if (int rc = MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm); rc != MPI_SUCCESS) {
    return absl::InternalError(absl::StrCat("MPI_Comm_dup: ", MpiErrorString(rc)));
  }
  // Errors come back as codes (mapped to absl::Status) instead of aborting the job.
  MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
  auto comm = std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(impl), options));
  return comm;
}

MpiCommunicator::MpiCommunicator(std::unique_ptr<Impl> impl, const MpiOptions& options)
    : impl_(std::move(impl)), options_(options) {
  MPI_Comm_rank(impl_->comm, &rank_);
  MPI_Comm_size(impl_->comm, &world_size_);
}

MpiCommunicator::~MpiCommunicator() {
  // After a timeout the peers are gone or stuck: MPI_Comm_free/MPI_Finalize could block on them.
  if (!failed_.ok()) return;
  if (!impl_->requests.empty()) (void)WaitAll();
  if (!failed_.ok()) return;
  MPI_Comm_free(&impl_->comm);
  if (impl_->owns_init) MPI_Finalize();
}

absl::Status MpiCommunicator::WaitAll() {
  if (absl::Status s = Poll(/*point_to_point=*/false); !s.ok()) return s;
  for (const Impl::Scale& s : impl_->scales) {
    if (s.f != nullptr) {
      const float k = 1.0f / static_cast<float>(world_size_);
      for (int64_t i = 0; i < s.n; ++i) s.f[i] *= k;
    } else {
      const double k = 1.0 / world_size_;
      for (int64_t i = 0; i < s.n; ++i) s.d[i] *= k;
    }
  }
  impl_->scales.clear();
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Poll(bool point_to_point) {
  if (!failed_.ok()) return failed_;
  auto& reqs = point_to_point ? impl_->point_to_point : impl_->requests;
  const char* what = point_to_point ? "point-to-point transfer" : "collective";
  const absl::Time deadline = absl::Now() + options_.timeout;
  int spins = 0;
  while (!reqs.empty()) {
    int done = 0;
    int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      failed_ = absl::UnavailableError(
          absl::StrCat("MPI ", what, " failed on rank ", rank_, ": ", MpiErrorString(rc)));
      return failed_;
    }
    if (done) {
      reqs.clear();
      break;
    }
    if (absl::Now() > deadline) {
      failed_ = absl::DeadlineExceededError(absl::StrCat(
          "MPI ", what, " timed out after ", absl::FormatDuration(options_.timeout), " on rank ",
          rank_, " of ", world_size_,
          ": a peer rank has died or hangs (MESA_COLLECTIVE_TIMEOUT_S sets the limit)"));
      return failed_;
    }
    // MPI progresses only inside MPI calls: poll often, but give the core away when it takes long
    // (ranks may share cores with each other and with the compute threads).
    if (++spins < 200) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(spins < 2000 ? 20 : 500));
    }
  }
  return absl::OkStatus();
}

// Records the first MPI error and returns it.
#define MESA_MPI_CHECK(call, what)                                            \
  do {                                                                        \
    if (int rc_ = (call); rc_ != MPI_SUCCESS) {                               \
      failed_ = absl::UnavailableError(                                       \
          absl::StrCat(what, " on rank ", rank_, ": ", MpiErrorString(rc_))); \
      return failed_;                                                         \
    }                                                                         \
  } while (0)

template <typename T>
absl::Status MpiCommunicator::StartAllReduce(T* data, int64_t n, ReduceOp op) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  if (!failed_.ok()) return failed_;
  const MPI_Datatype type = std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
  for (int64_t off = 0; off < n; off += kMaxChunk) {
    const int count = static_cast<int>(std::min(kMaxChunk, n - off));
    MPI_Request req;
    MESA_MPI_CHECK(
        MPI_Iallreduce(MPI_IN_PLACE, data + off, count, type, MPI_SUM, impl_->comm, &req),
        "MPI_Iallreduce");
    impl_->requests.push_back(req);
  }
  if (op == ReduceOp::kAverage && n > 0) {
    if constexpr (std::is_same_v<T, float>) {
      impl_->scales.push_back({data, nullptr, n});
    } else {
      impl_->scales.push_back({nullptr, data, n});
    }
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::AllReduceAsync(float* data, int64_t n, ReduceOp op) {
  return StartAllReduce(data, n, op);
}

absl::Status MpiCommunicator::AllReduce(float* data, int64_t n, ReduceOp op) {
  if (absl::Status st = StartAllReduce(data, n, op); !st.ok()) return st;
  return WaitAll();
}

absl::Status MpiCommunicator::AllReduce(double* data, int64_t n, ReduceOp op) {
  if (absl::Status st = StartAllReduce(data, n, op); !st.ok()) return st;
  return WaitAll();
}

absl::Status MpiCommunicator::Broadcast(float* data, int64_t n, int root) {
  return BroadcastBytes(data, n * static_cast<int64_t>(sizeof(float)), root);
}

absl::Status MpiCommunicator::BroadcastBytes(void* data, int64_t bytes, int root) {
  if (!failed_.ok()) return failed_;
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " of ", world_size_));
  }
  char* p = static_cast<char*>(data);
  for (int64_t off = 0; off < bytes; off += kMaxChunk) {
    const int count = static_cast<int>(std::min(kMaxChunk, bytes - off));
    MPI_Request req;
    MESA_MPI_CHECK(MPI_Ibcast(p + off, count, MPI_BYTE, root, impl_->comm, &req), "MPI_Ibcast");
    impl_->requests.push_back(req);
  }
  return WaitAll();
}

absl::Status MpiCommunicator::Send(const float* data, int64_t n, int peer) {
  return PointToPoint(const_cast<float*>(data), n, peer, /*send=*/true);
}

absl::Status MpiCommunicator::Recv(float* data, int64_t n, int peer) {
  return PointToPoint(data, n, peer, /*send=*/false);
}

absl::Status MpiCommunicator::PointToPoint(float* data, int64_t n, int peer, bool send) {
  if (!failed_.ok()) return failed_;
  if (peer < 0 || peer >= world_size_ || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat(send ? "send to" : "receive from", " rank ",
                                                   peer, " on rank ", rank_, " of ", world_size_));
  }
  // One tag: MPI keeps the order of messages between two ranks on one communicator and tag.
  constexpr int kTag = 7;
  for (int64_t off = 0; off < n; off += kMaxChunk) {
    const int count = static_cast<int>(std::min(kMaxChunk, n - off));
    MPI_Request req;
    if (send) {
      MESA_MPI_CHECK(MPI_Isend(data + off, count, MPI_FLOAT, peer, kTag, impl_->comm, &req),
                     "MPI_Isend");
    } else {
      MESA_MPI_CHECK(MPI_Irecv(data + off, count, MPI_FLOAT, peer, kTag, impl_->comm, &req),
                     "MPI_Irecv");
    }
    impl_->point_to_point.push_back(req);
  }
  return Poll(/*point_to_point=*/true);
}

absl::Status MpiCommunicator::Barrier() {
  if (!failed_.ok()) return failed_;
  MPI_Request req;
  MESA_MPI_CHECK(MPI_Ibarrier(impl_->comm, &req), "MPI_Ibarrier");
  impl_->requests.push_back(req);
  return WaitAll();
}

absl::Status MpiCommunicator::ReduceScatter(float* data, const ShardLayout& layout, ReduceOp op) {
  if (absl::Status st = CheckLayout(layout); !st.ok()) return st;
  if (!failed_.ok()) return failed_;
  const int64_t shard = layout.shard_size();
  if (shard > INT_MAX) return absl::UnimplementedError("MPI reduce-scatter shard over 2^31");
  if (shard == 0) return absl::OkStatus();
  MPI_Request req;
  // In place: the input is all of `data`; the result lands at its start.
  MESA_MPI_CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, data, static_cast<int>(shard), MPI_FLOAT,
                                           MPI_SUM, impl_->comm, &req),
                 "MPI_Ireduce_scatter_block");
  impl_->requests.push_back(req);
  // WaitAll scales an average where the result lands, before it moves to this rank's shard.
  if (op == ReduceOp::kAverage) impl_->scales.push_back({data, nullptr, shard});
  if (absl::Status st = WaitAll(); !st.ok()) return st;
  if (rank_ != 0) std::memmove(data + rank_ * shard, data, sizeof(float) * shard);
  return absl::OkStatus();
}

absl::Status MpiCommunicator::AllGather(float* data, const ShardLayout& layout) {
  if (absl::Status st = CheckLayout(layout); !st.ok()) return st;
  if (!failed_.ok()) return failed_;
  const int64_t shard = layout.shard_size();
  if (shard > INT_MAX) return absl::UnimplementedError("MPI all-gather shard over 2^31");
  if (shard == 0) return absl::OkStatus();
  MPI_Request req;
  MESA_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, static_cast<int>(shard),
                                MPI_FLOAT, impl_->comm, &req),
                 "MPI_Iallgather");
  impl_->requests.push_back(req);
  return WaitAll();
}

}  // namespace mesa::model
