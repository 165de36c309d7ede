// Host-side helpers shared by the CUDA operators (Mesa, DeltaNet family): CUDA errors as
// absl::Status, a grow-only device allocation, and the chunk/sequence tables of the chunked
// kernels (kernels/common/cuda/kernel_problem.h describes their entries).
#ifndef MESANET_KERNELS_COMMON_CUDA_DEVICE_SCRATCH_H_
#define MESANET_KERNELS_COMMON_CUDA_DEVICE_SCRATCH_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/cuda/kernel_problem.h"

namespace mesa::kernels::cuda {

inline absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("CUDA error in ", what, ": ", cudaGetErrorString(e)));
}

#define MESA_CUDA_RETURN_IF_ERROR(expr, what)                                                     \
  do {                                                                                            \
    if (absl::Status _s = ::mesa::kernels::cuda::CudaStatus((expr), (what)); !_s.ok()) return _s; \
  } while (0)

// A grow-only device allocation.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
  absl::Status Ensure(size_t want) {
    if (want <= bytes) return absl::OkStatus();
    if (ptr != nullptr) {
      cudaFree(ptr);
      ptr = nullptr;
      bytes = 0;
    }
    MESA_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, std::max<size_t>(want, 256)), "cudaMalloc");
    bytes = want;
    return absl::OkStatus();
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

// OK if a CUDA device is usable, else Unavailable saying why (the operators' device_available).
inline absl::Status CudaDeviceAvailable() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return absl::UnavailableError(absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(e)));
  if (n == 0) return absl::UnavailableError("no CUDA device");
  return absl::OkStatus();
}

// Head dims up to 64 run padded to 64, larger ones (up to 128) to 128.
inline int PaddedDim(int64_t d) { return d <= 64 ? 64 : 128; }

// The chunk and sequence tables of a (batch, seq_len) problem or of packed sequences
// (cu_seqlens non-empty, batch 1): entries as in KernelProblem (kernel_problem.h).
struct ChunkTables {
  std::vector<int4> seqs, chunks;
};
inline ChunkTables BuildChunkTables(int64_t batch, int64_t seq_len, std::span<const int32_t> cu) {
  ChunkTables t;
  const int64_t n_seq = cu.empty() ? batch : static_cast<int64_t>(cu.size()) - 1;
  for (int64_t s = 0; s < n_seq; ++s) {
    const int tok0 = cu.empty() ? static_cast<int>(s * seq_len) : cu[s];
    const int len = cu.empty() ? static_cast<int>(seq_len) : cu[s + 1] - cu[s];
    const int first = static_cast<int>(t.chunks.size());
    const int nc = (len + kChunk - 1) / kChunk;
    for (int c = 0; c < nc; ++c) {
      t.chunks.push_back(make_int4(static_cast<int>(s), tok0 + c * kChunk,
                                   std::min(kChunk, len - c * kChunk), first));
    }
    t.seqs.push_back(make_int4(tok0, len, first, nc));
  }
  return t;
}

// The chunk and sequence tables on the device, re-uploaded only when (B, T, cu_seqlens) change
// (synchronous copies: the tables are tiny and change rarely). Fill() also sets the problem's
// shape fields (heads, head dims, table pointers) for a head dim `head_dim` and `heads` heads.
class DeviceChunkTables {
 public:
  absl::Status Fill(int64_t batch, int64_t seq_len, int64_t heads, int64_t head_dim,
                    std::span<const int32_t> cu, KernelProblem* p) {
    std::vector<int32_t> k = {static_cast<int32_t>(batch), static_cast<int32_t>(seq_len)};
    k.insert(k.end(), cu.begin(), cu.end());
    if (k != key_) {
      const ChunkTables t = BuildChunkTables(batch, seq_len, cu);
      num_seqs_ = static_cast<int>(t.seqs.size());
      num_chunks_ = static_cast<int>(t.chunks.size());
      max_seq_chunks_ = 0;
      for (const int4& q : t.seqs) max_seq_chunks_ = std::max(max_seq_chunks_, q.w);
      if (auto s = chunks_.Ensure(t.chunks.size() * sizeof(int4)); !s.ok()) return s;
      if (auto s = seqs_.Ensure(t.seqs.size() * sizeof(int4)); !s.ok()) return s;
      if (!t.chunks.empty()) {
        MESA_CUDA_RETURN_IF_ERROR(
            cudaMemcpy(chunks_.ptr, t.chunks.data(), t.chunks.size() * sizeof(int4),
                       cudaMemcpyHostToDevice),
            "chunk table upload");
      }
      MESA_CUDA_RETURN_IF_ERROR(cudaMemcpy(seqs_.ptr, t.seqs.data(), t.seqs.size() * sizeof(int4),
                                           cudaMemcpyHostToDevice),
                                "sequence table upload");
      key_ = std::move(k);
    }
    p->num_seqs = num_seqs_;
    p->num_chunks = num_chunks_;
    p->max_seq_chunks = max_seq_chunks_;
    p->heads = static_cast<int>(heads);
    p->head_dim = static_cast<int>(head_dim);
    p->padded_dim = PaddedDim(head_dim);
    p->chunks = chunks_.as<int4>();
    p->seqs = seqs_.as<int4>();
    return absl::OkStatus();
  }

 private:
  std::vector<int32_t> key_;  // (B, T, cu_seqlens...) of the uploaded tables
  int num_seqs_ = 0, num_chunks_ = 0, max_seq_chunks_ = 0;
  DeviceBuffer chunks_, seqs_;
};

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_COMMON_CUDA_DEVICE_SCRATCH_H_
