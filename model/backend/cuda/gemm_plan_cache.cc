#include "model/backend/cuda/gemm_plan_cache.h"

#include <cublasLt.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace mesa::model::cuda {
namespace {

// OK, or the failed cuBLASLt call worded like the backend's other errors.
absl::Status Blas(cublasStatus_t b, const char* what) {
  if (b == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("cuBLASLt error in ", what, ": ", cublasGetStatusString(b)));
}

void DestroyPlan(GemmPlan* p) {
  if (p->a != nullptr) cublasLtMatrixLayoutDestroy(p->a);
  if (p->b != nullptr) cublasLtMatrixLayoutDestroy(p->b);
  if (p->c != nullptr) cublasLtMatrixLayoutDestroy(p->c);
  if (p->desc != nullptr) cublasLtMatmulDescDestroy(p->desc);
}

}  // namespace

uint32_t GemmAlignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 2 && (a % align) != 0) align >>= 1;
  return align;
}

GemmPlanCache::GemmPlanCache(cublasLtHandle_t lt, size_t workspace_bytes)
    : lt_(lt), workspace_bytes_(workspace_bytes) {}

GemmPlanCache::~GemmPlanCache() {
  for (auto& [shape, plan] : plans_) DestroyPlan(&plan);
}

absl::StatusOr<const GemmPlan*> GemmPlanCache::Get(const GemmShape& shape, const char* what) {
  auto it = plans_.find(shape);
  if (it == plans_.end()) {
    GemmPlan plan;
    if (absl::Status s = MakePlan(shape, what, &plan); !s.ok()) {
      DestroyPlan(&plan);
      return s;
    }
    it = plans_.emplace(shape, plan).first;
  }
  return &it->second;
}

// Each cuBLASLt call runs only while the ones before it succeeded; the first failure is returned.
absl::Status GemmPlanCache::MakePlan(const GemmShape& shape, const char* what,
                                     GemmPlan* plan) const {
  const cublasOperation_t ta = shape.ta, tb = shape.tb;
  absl::Status s = Blas(cublasLtMatmulDescCreate(&plan->desc, shape.compute, CUDA_R_32F), what);
  if (s.ok()) {
    s = Blas(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
        what);
  }
  if (s.ok()) {
    s = Blas(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
        what);
  }
  const bool an = ta == CUBLAS_OP_N, bn = tb == CUBLAS_OP_N;
  const int64_t m = shape.m, n = shape.n, k = shape.k;
  if (s.ok()) {
    s = Blas(cublasLtMatrixLayoutCreate(&plan->a, shape.a_type, an ? m : k, an ? k : m, shape.lda),
             what);
  }
  if (s.ok()) {
    s = Blas(cublasLtMatrixLayoutCreate(&plan->b, shape.b_type, bn ? k : n, bn ? n : k, shape.ldb),
             what);
  }
  if (s.ok()) s = Blas(cublasLtMatrixLayoutCreate(&plan->c, shape.c_type, m, n, shape.ldc), what);
  if (!s.ok()) return s;

  cublasLtMatmulPreference_t pref = nullptr;
  if (s = Blas(cublasLtMatmulPreferenceCreate(&pref), what); !s.ok()) return s;
  const uint64_t ws = workspace_bytes_;
  const struct {
    cublasLtMatmulPreferenceAttributes_t attr;
    const void* value;
    size_t bytes;
  } prefs[] = {
      {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &shape.align_a, sizeof(shape.align_a)},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &shape.align_b, sizeof(shape.align_b)},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &shape.align_c, sizeof(shape.align_c)},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &shape.align_c, sizeof(shape.align_c)},
  };
  for (const auto& p : prefs) {
    if (!s.ok()) break;
    s = Blas(cublasLtMatmulPreferenceSetAttribute(pref, p.attr, p.value, p.bytes), what);
  }
  if (s.ok()) {
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    s = Blas(cublasLtMatmulAlgoGetHeuristic(lt_, plan->desc, plan->a, plan->b, plan->c, plan->c,
                                            pref, 1, &result, &returned),
             what);
    if (s.ok() && returned == 0) {
      s = absl::InternalError(
          absl::StrCat("cuBLASLt has no algorithm for ", what, " (m=", m, " n=", n, " k=", k, ")"));
    }
    if (s.ok()) plan->algo = result.algo;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  return s;
}

}  // namespace mesa::model::cuda
