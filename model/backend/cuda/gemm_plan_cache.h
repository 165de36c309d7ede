// cuBLASLt GEMM plans of the CUDA backend (matmul descriptor, matrix layouts and the heuristic's
// algorithm), cached per shape: the trainer repeats a few dozen shapes every step, and a new plan
// costs a heuristic query.
#ifndef MESANET_MODEL_BACKEND_CUDA_GEMM_PLAN_CACHE_H_
#define MESANET_MODEL_BACKEND_CUDA_GEMM_PLAN_CACHE_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>

#include "absl/status/statusor.h"

namespace mesa::model::cuda {

// Largest power-of-two alignment of a pointer, capped at 256 (cuBLASLt's default assumption) and
// floored at 2 bytes (a bf16 element). Part of the shape: a plan made for aligned operands may
// pick kernels that misaligned ones cannot run.
uint32_t GemmAlignment(const void* p);

// Everything a plan depends on: column-major C[m,n] = op(A) op(B) (+ beta C) with these leading
// dimensions, operand alignments (GemmAlignment) and element types, computed in `compute` with
// fp32 scaling.
struct GemmShape {
  cublasComputeType_t compute;
  cublasOperation_t ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  uint32_t align_a, align_b, align_c;
  cudaDataType_t a_type, b_type, c_type;

  auto operator<=>(const GemmShape&) const = default;
};

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // C's layout serves D too
  cublasLtMatmulAlgo_t algo{};
};

class GemmPlanCache {
 public:
  // `lt` must outlive the cache. Plans are chosen for `workspace_bytes` of workspace, so every
  // cublasLtMatmul with them must pass at least that much.
  GemmPlanCache(cublasLtHandle_t lt, size_t workspace_bytes);
  ~GemmPlanCache();
  GemmPlanCache(const GemmPlanCache&) = delete;
  GemmPlanCache& operator=(const GemmPlanCache&) = delete;

  // The plan for `shape`, made on first use (a failed one is not kept). Errors read
  // "cuBLASLt error in <what>: ..." or "cuBLASLt has no algorithm for <what> (...)". The pointer
  // stays valid for the cache's lifetime.
  absl::StatusOr<const GemmPlan*> Get(const GemmShape& shape, const char* what);

 private:
  absl::Status MakePlan(const GemmShape& shape, const char* what, GemmPlan* plan) const;

  cublasLtHandle_t lt_;
  size_t workspace_bytes_;
  std::map<GemmShape, GemmPlan> plans_;
};

}  // namespace mesa::model::cuda

#endif  // MESANET_MODEL_BACKEND_CUDA_GEMM_PLAN_CACHE_H_
