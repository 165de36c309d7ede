#include "model/comm/comm_check.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mesa::model {
namespace {

template <typename T>
std::vector<T> RankData(uint64_t seed, int rank, int64_t n, int salt) {
  std::mt19937_64 rng(seed * 1000003 + rank * 7919 + salt);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> out(n);
  for (T& x : out) x = static_cast<T>(dist(rng));
  return out;
}

template <typename T>
absl::Status Compare(const char* what, const std::vector<T>& got, const std::vector<T>& want,
                     int64_t begin, int64_t end, double tol) {
  for (int64_t i = begin; i < end; ++i) {
    const double g = got[i], w = want[i];
    if (!(std::fabs(g - w) <= tol * (1.0 + std::fabs(w)))) {
      return absl::InternalError(absl::StrCat(what, ": element ", i, " is ", g, ", want ", w));
    }
  }
  return absl::OkStatus();
}

// Element-wise sum over ranks in rank order (float accumulation like the communicators, with a
// tolerance for a different order of summation).
template <typename T>
std::vector<T> Reduced(uint64_t seed, int world, int64_t n, int salt, ReduceOp op) {
  std::vector<T> sum(n, T(0));
  for (int r = 0; r < world; ++r) {
    std::vector<T> d = RankData<T>(seed, r, n, salt);
    for (int64_t i = 0; i < n; ++i) sum[i] += d[i];
  }
  if (op == ReduceOp::kAverage) {
    for (T& x : sum) x *= T(1) / static_cast<T>(world);
  }
  return sum;
}

class DeviceBuffer {
 public:
  DeviceBuffer(const CommMemory& memory, size_t bytes)
      : memory_(memory), ptr_(memory.allocate(bytes == 0 ? 1 : bytes)) {}
  ~DeviceBuffer() { memory_.free(ptr_); }
  template <typename T>
  T* as() {
    return static_cast<T*>(ptr_);
  }
  template <typename T>
  void Put(const std::vector<T>& host) {
    memory_.copy(ptr_, host.data(), sizeof(T) * host.size(), true);
  }
  template <typename T>
  std::vector<T> Get(int64_t n) {
    std::vector<T> host(n);
    memory_.copy(host.data(), ptr_, sizeof(T) * n, false);
    return host;
  }

 private:
  const CommMemory& memory_;
  void* ptr_;
};

#define MESA_RETURN_IF(expr)                              \
  do {                                                    \
    if (absl::Status st_ = (expr); !st_.ok()) return st_; \
  } while (0)

template <typename T>
absl::Status CheckAllReduce(Communicator& comm, uint64_t seed, const CommMemory& mem, int64_t n,
                            ReduceOp op, int salt) {
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  DeviceBuffer buf(mem, sizeof(T) * n);
  buf.Put(RankData<T>(seed, comm.rank(), n, salt));
  MESA_RETURN_IF(comm.AllReduce(buf.as<T>(), n, op));
  const std::string what = absl::StrCat("all-reduce ", op == ReduceOp::kSum ? "sum" : "average",
                                        " of ", n, sizeof(T) == 4 ? " floats" : " doubles");
  return Compare(what.c_str(), buf.Get<T>(n), Reduced<T>(seed, comm.world_size(), n, salt, op), 0,
                 n, tol);
}

}  // namespace

CommMemory HostMemory() {
  return {[](size_t bytes) { return std::malloc(bytes); }, [](void* p) { std::free(p); },
          [](void* dst, const void* src, size_t bytes, bool) { std::memcpy(dst, src, bytes); }};
}

absl::Status CheckCollectives(Communicator& comm, uint64_t seed, const CommMemory& mem) {
  const int world = comm.world_size(), rank = comm.rank();
  int salt = 0;
  // Sizes: empty, one element, not divisible by the world size, larger than a typical MPI eager
  // limit (rendezvous protocol).
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1001}, int64_t{300007}}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      MESA_RETURN_IF(CheckAllReduce<float>(comm, seed, mem, n, op, ++salt));
    }
  }
  // Double all-reduces work on host memory on every communicator (the trainer's scalars); 777
  // doubles exceed the NCCL communicator's staging scratch, 2 fit in it.
  const CommMemory host = HostMemory();
  MESA_RETURN_IF(CheckAllReduce<double>(comm, seed, host, 2, ReduceOp::kSum, ++salt));
  MESA_RETURN_IF(CheckAllReduce<double>(comm, seed, host, 777, ReduceOp::kAverage, ++salt));

  // Broadcast from every root.
  for (int root = 0; root < world; ++root) {
    const int64_t n = 5003;
    ++salt;
    DeviceBuffer buf(mem, sizeof(float) * n);
    buf.Put(RankData<float>(seed, rank, n, salt));
    MESA_RETURN_IF(comm.Broadcast(buf.as<float>(), n, root));
    const std::string what = absl::StrCat("broadcast from rank ", root);
    MESA_RETURN_IF(
        Compare(what.c_str(), buf.Get<float>(n), RankData<float>(seed, root, n, salt), 0, n, 0.0));
  }

  // Bytes (host memory), from the last rank.
  {
    std::string bytes = absl::StrCat("rank-", rank, "-payload-", seed);
    std::string want = absl::StrCat("rank-", world - 1, "-payload-", seed);
    bytes.resize(want.size() + 8, '#');  // same length on every rank
    want.resize(want.size() + 8, '#');
    absl::Status st =
        comm.BroadcastBytes(bytes.data(), static_cast<int64_t>(bytes.size()), world - 1);
    if (!st.ok() && st.code() != absl::StatusCode::kUnimplemented) return st;
    if (st.ok() && bytes != want) {
      return absl::InternalError(absl::StrCat("byte broadcast: got ", bytes, ", want ", want));
    }
  }

  // Bytes of different lengths from every rank (rank 1's empty) to every rank.
  {
    auto payload = [&](int r) {
      return r == 1 ? std::string() : absl::StrCat("rank-", r, std::string(r * 37, 'x'), seed);
    };
    absl::StatusOr<std::vector<std::string>> all = AllGatherBytes(comm, payload(rank));
    if (!all.ok() && all.status().code() != absl::StatusCode::kUnimplemented) return all.status();
    for (int r = 0; all.ok() && r < world; ++r) {
      if ((*all)[r] != payload(r)) {
        return absl::InternalError(absl::StrCat("byte all-gather: rank ", r, "'s bytes differ"));
      }
    }
  }

  // ZeRO-1: reduce-scatter, then all-gather, on a padded layout.
  for (int64_t total : {int64_t{1}, int64_t{1001}, int64_t{65537}}) {
    const ShardLayout layout{total, world};
    const int64_t padded = layout.padded_size(), shard = layout.shard_size();
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      ++salt;
      std::vector<float> host = RankData<float>(seed, rank, padded, salt);
      for (int64_t i = total; i < padded; ++i) host[i] = 0.0f;  // padding is zero
      DeviceBuffer buf(mem, sizeof(float) * padded);
      buf.Put(host);
      MESA_RETURN_IF(comm.ReduceScatter(buf.as<float>(), layout, op));
      std::vector<float> want = Reduced<float>(seed, world, padded, salt, op);
      const std::string what = absl::StrCat("reduce-scatter of ", total, " over ", world);
      MESA_RETURN_IF(Compare(what.c_str(), buf.Get<float>(padded), want, layout.begin(rank),
                             layout.end(rank), 1e-5));
    }
    // All-gather: rank r's shard holds RankData(r) there; garbage elsewhere must be overwritten.
    ++salt;
    std::vector<float> host(padded, -12345.0f);
    std::vector<float> want(padded);
    for (int r = 0; r < world; ++r) {
      std::vector<float> d = RankData<float>(seed, r, padded, salt);
      for (int64_t i = r * shard; i < (r + 1) * shard; ++i) {
        want[i] = d[i];
        if (r == rank) host[i] = d[i];
      }
    }
    DeviceBuffer buf(mem, sizeof(float) * padded);
    buf.Put(host);
    MESA_RETURN_IF(comm.AllGather(buf.as<float>(), layout));
    const std::string what = absl::StrCat("all-gather of ", total, " over ", world);
    MESA_RETURN_IF(Compare(what.c_str(), buf.Get<float>(padded), want, 0, total, 0.0));
  }

  // Bucketed asynchronous all-reduce, ranges marked from the end (like a backward pass), with
  // buckets that close at uneven boundaries.
  {
    const int64_t n = 40000;
    ++salt;
    DeviceBuffer buf(mem, sizeof(float) * n);
    buf.Put(RankData<float>(seed, rank, n, salt));
    GradientBucketer bucketer(&comm, buf.as<float>(), n, /*bucket_elements=*/7000);
    for (int64_t end = n; end > 0;) {
      const int64_t len = std::min<int64_t>(end, 1237 + (end % 3) * 1000);
      MESA_RETURN_IF(bucketer.MarkReady(end - len, len));
      end -= len;
    }
    MESA_RETURN_IF(bucketer.Finish());
    if (bucketer.buckets_sent() < 2) {
      return absl::InternalError("bucketer sent fewer than 2 buckets");
    }
    MESA_RETURN_IF(Compare("bucketed all-reduce", buf.Get<float>(n),
                           Reduced<float>(seed, world, n, salt, ReduceOp::kSum), 0, n, 1e-5));
  }
  return comm.Barrier();
}

}  // namespace mesa::model
