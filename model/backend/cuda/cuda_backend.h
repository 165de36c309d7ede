// CUDA backend of the trainer (one GPU): bf16 activations by default (fp32 for exact comparisons),
// fp32 parameters, gradients and optimiser state; one stream; cuBLASLt GEMMs with fp32
// accumulation (bf16 tensor cores on bf16 activations with a bf16 copy of the weights made by
// CacheWeights; TF32 by default on fp32 activations); fused kernels for every other layer
// (model/backend/cuda/backend_kernels.h). The mixers' CUDA operators register for "cuda"
// (model/mixers/*/..._ops_cuda.cc) and run on its stream through CudaBackendControl. Semantics are
// CpuBackend's (model/layers/cpu_layers.h), up to the rounding of the storage type.
//
// Errors: Backend's layer calls return void, so the first CUDA/cuBLAS failure is kept as a sticky
// status (status(), also printed to stderr once). From then on every call is a no-op, the
// value-returning calls give NaN (so the trainer's non-finite check fires) and the mixers'
// operators return the sticky error, which the model propagates as a failed step.
#ifndef MESANET_MODEL_BACKEND_CUDA_CUDA_BACKEND_H_
#define MESANET_MODEL_BACKEND_CUDA_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/backend/backend.h"

namespace mesa::model {

// Math mode of the Linear GEMMs on fp32 activations (inputs and outputs stay fp32 in memory;
// accumulation is fp32). With bf16 activations the GEMMs are bf16 x bf16 -> fp32 accumulate.
enum class GemmMath {
  kTf32,  // CUBLAS_COMPUTE_32F_FAST_TF32 (default; ~3e-4 relative error, docs/journal.md ("CUDA
          // model backend"))
  kBf16,  // CUBLAS_COMPUTE_32F_FAST_16BF (operands rounded to bf16 inside cuBLAS)
  kFp32,  // CUBLAS_COMPUTE_32F (exact fp32; slow, for debugging)
};

struct CudaBackendOptions {
  int device = 0;
  ActivationType activations = ActivationType::kBfloat16;
  GemmMath gemm_math = GemmMath::kTf32;
  // Read back the Mesa op's exact mean CG steps (one stream sync per Mesa call). When false and
  // the solve is fixed-step (tolerance 0), max_steps is reported without a sync.
  bool exact_cg_steps = true;
  // training.deterministic: operators whose fast path adds floats in a run-dependent order take
  // their ordered path (today only softmax attention's backward dQ; docs/trainer.md,
  // "Determinism on the GPU").
  bool deterministic = false;
};

absl::StatusOr<GemmMath> ParseGemmMath(const std::string& name);  // "tf32" | "bf16" | "fp32"
const char* GemmMathName(GemmMath math);

// Returns FailedPrecondition (with the CUDA runtime's reason) when there is no usable GPU, e.g. on
// CI machines; never crashes there.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options = {});
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device);

// The device a trainer with this node-local rank drives: local_rank modulo the visible devices,
// the rule the NCCL communicator uses too (model/comm/nccl_communicator.cc), so that a rank's
// model and its collectives are always on the same GPU. One visible device (the worker agent
// narrows CUDA_VISIBLE_DEVICES to the rank's GPU) gives 0. FailedPrecondition without a GPU.
absl::StatusOr<int> CudaDeviceForLocalRank(int local_rank);

// Extra hooks of the CUDA backend for the mixers' CUDA operators, tests and benchmarks (nullptr if
// `backend` is not CUDA).
class CudaBackendControl {
 public:
  virtual ~CudaBackendControl() = default;
  // Waits for all queued work; returns the sticky status.
  virtual absl::Status Synchronize() = 0;
  virtual absl::Status status() const = 0;
  // Makes `error` the sticky status unless one is already kept; returns the sticky status.
  virtual absl::Status RecordError(const absl::Status& error) = 0;
  virtual const CudaBackendOptions& options() const = 0;
  // Brackets one operator launch for SetProfiling's table (no-ops while profiling is off).
  virtual void ProfileBegin() = 0;
  virtual void ProfileEnd(absl::string_view what) = 0;
  // The cudaStream_t all work runs on (as void* so this header needs no CUDA headers).
  virtual void* stream() const = 0;
  virtual void SetGemmMath(GemmMath math) = 0;
  // Fills device floats / activations with `value` (tests poison outputs with NaN).
  virtual void Fill(float* ptr, int64_t n, float value) = 0;
  virtual void FillActivations(Act ptr, int64_t n, float value) = 0;
  // Per-op GPU time: while on, every kernel launch, GEMM and Mesa call is bracketed by events and
  // waited for (slow: for a profiling step only). ProfileReport() gives the table, largest first,
  // and clears it.
  virtual void SetProfiling(bool on) = 0;
  virtual std::string ProfileReport() = 0;
};
CudaBackendControl* GetCudaControl(Backend* backend);

}  // namespace mesa::model

#endif  // MESANET_MODEL_BACKEND_CUDA_CUDA_BACKEND_H_
