#include "model/backend/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/mesa_cuda.h"
#include "kernels/mesa_types.h"
#include "model/backend/cuda/backend_kernels.h"

namespace mesa::model {
namespace {

namespace kc = ::mesa::kernels::cuda;
namespace mk = ::mesa::model::cuda;

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation on Hopper

// Largest power-of-two alignment of a pointer, capped at 256 (cuBLASLt's default assumption).
uint32_t Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 4 && (a % align) != 0) align >>= 1;
  return align;
}

cublasComputeType_t ComputeType(GemmMath math) {
  switch (math) {
    case GemmMath::kTf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case GemmMath::kBf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case GemmMath::kFp32:
      return CUBLAS_COMPUTE_32F;
  }
  return CUBLAS_COMPUTE_32F_FAST_TF32;
}

// A device allocation that only grows (scratch for reductions and the embedding backward).
struct Scratch {
  void* ptr = nullptr;
  size_t bytes = 0;
  cudaError_t Ensure(size_t want) {
    if (want <= bytes) return cudaSuccess;
    if (ptr != nullptr) cudaFree(ptr);  // cudaFree waits for queued work that may still use it
    ptr = nullptr;
    bytes = 0;
    if (cudaError_t e = cudaMalloc(&ptr, std::max<size_t>(want, 256)); e != cudaSuccess) return e;
    bytes = want;
    return cudaSuccess;
  }
  ~Scratch() {
    if (ptr != nullptr) cudaFree(ptr);
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr); }
};

class CudaBackend final : public Backend, public CudaBackendControl {
 public:
  explicit CudaBackend(const CudaBackendOptions& options) : options_(options) {}
  ~CudaBackend() override {
    for (auto& [key, plan] : plans_) DestroyPlan(&plan);
    if (lt_ != nullptr) cublasLtDestroy(lt_);
    if (gemm_ws_ != nullptr) cudaFree(gemm_ws_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    int count = 0;
    if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
      cudaGetLastError();  // clear it so later runtime calls do not report it again
      return absl::FailedPreconditionError(
          absl::StrCat("no usable CUDA device: ", cudaGetErrorString(e)));
    }
    if (options_.device < 0 || options_.device >= count) {
      return absl::FailedPreconditionError(absl::StrCat("CUDA device ", options_.device,
                                                        " requested but ", count, " present"));
    }
    if (cudaError_t e = cudaSetDevice(options_.device); e != cudaSuccess) {
      return absl::FailedPreconditionError(absl::StrCat("cudaSetDevice(", options_.device,
                                                        "): ", cudaGetErrorString(e)));
    }
    cudaDeviceProp prop{};
    if (cudaError_t e = cudaGetDeviceProperties(&prop, options_.device); e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaGetDeviceProperties: ", cudaGetErrorString(e)));
    }
    if (prop.major < 8) {
      return absl::FailedPreconditionError(absl::StrCat(
          "CUDA device ", prop.name, " has compute capability ", prop.major, ".", prop.minor,
          "; the kernels are built for sm_80 and sm_90a"));
    }
    device_name_ = prop.name;
    // A blocking stream: the Mesa op's synchronous table uploads (legacy stream) stay ordered.
    if (cudaError_t e = cudaStreamCreate(&stream_); e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaStreamCreate: ", cudaGetErrorString(e)));
    }
    if (cublasStatus_t b = cublasLtCreate(&lt_); b != CUBLAS_STATUS_SUCCESS) {
      return absl::InternalError(absl::StrCat("cublasLtCreate: ", cublasGetStatusString(b)));
    }
    if (cudaError_t e = cudaMalloc(&gemm_ws_, kGemmWorkspaceBytes); e != cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat("GEMM workspace: ", cudaGetErrorString(e)));
    }
    if (cudaError_t e = sum_partials_.Ensure(sizeof(double) * (mk::kSumBlocks + 1));
        e != cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat("scratch: ", cudaGetErrorString(e)));
    }
    return absl::OkStatus();
  }

  std::string Name() const override { return "cuda"; }

  // ---- CudaBackendControl.
  absl::Status Synchronize() override {
    if (ok()) Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return status_;
  }
  absl::Status status() const override { return status_; }
  void* stream() const override { return stream_; }
  void SetGemmMath(GemmMath math) override { options_.gemm_math = math; }
  void Fill(float* ptr, int64_t n, float value) override {
    if (ok()) Check(mk::LaunchFill(ptr, n, value, stream_), "Fill");
  }

  // ---- Memory.
  float* AllocateFloats(int64_t n) override {
    return static_cast<float*>(AllocateZeroed(sizeof(float) * std::max<int64_t>(n, 1)));
  }
  int32_t* AllocateInts(int64_t n) override {
    return static_cast<int32_t*>(AllocateZeroed(sizeof(int32_t) * std::max<int64_t>(n, 1)));
  }
  void Free(void* ptr) override {
    if (ptr != nullptr) Check(cudaFree(ptr), "cudaFree");
  }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    if (!ok() || bytes == 0) return;
    // Synchronous: the caller may reuse `src` as soon as this returns.
    Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "CopyToDevice");
    Check(cudaStreamSynchronize(stream_), "CopyToDevice sync");
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    if (!ok() || bytes == 0) return;
    Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "CopyToHost");
    Check(cudaStreamSynchronize(stream_), "CopyToHost sync");
  }
  void Zero(float* ptr, int64_t n) override {
    if (ok() && n > 0) Check(cudaMemsetAsync(ptr, 0, sizeof(float) * n, stream_), "Zero");
  }
  void Copy(float* dst, const float* src, int64_t n) override {
    if (ok() && n > 0 && dst != src) {
      Check(cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToDevice, stream_), "Copy");
    }
  }

  // ---- Linear layers (row-major [M,K] x [N,K]^T, mapped onto column-major cuBLASLt).
  void LinearForward(const float* in, const float* weight, float* out, int64_t m, int64_t k,
                     int64_t n, bool accumulate) override {
    LinearForwardStrided(in, weight, out, n, m, k, n, accumulate);
  }
  void LinearBackward(const float* in, const float* weight, const float* d_out, float* d_in,
                      float* d_weight, int64_t m, int64_t k, int64_t n) override {
    LinearBackwardStrided(in, weight, d_out, n, d_in, d_weight, m, k, n);
  }
  // `ld` is the row stride of out / d_out; it is the leading dimension of that operand in the
  // column-major view, so a padded stride (a multiple of 4 floats) keeps cuBLASLt's aligned
  // (TMA) kernels usable when n is odd, e.g. the vocabulary.
  void LinearForwardStrided(const float* in, const float* weight, float* out, int64_t ld,
                            int64_t m, int64_t k, int64_t n, bool accumulate) override {
    if (!CheckLd(ld, n, "LinearForward")) return;
    // out^T[N,M] = W[K,N]^T (col-major view of row-major [N,K]) . in^T[K,M].
    Gemm(CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, weight, k, in, k, out, ld, accumulate ? 1.f : 0.f,
         "LinearForward");
  }
  void LinearBackwardStrided(const float* in, const float* weight, const float* d_out, int64_t ld,
                             float* d_in, float* d_weight, int64_t m, int64_t k,
                             int64_t n) override {
    if (!CheckLd(ld, n, "LinearBackward")) return;
    // d_in^T[K,M] += W^T-view[K,N] . d_out^T[N,M].
    if (d_in != nullptr) {
      Gemm(CUBLAS_OP_N, CUBLAS_OP_N, k, m, n, weight, k, d_out, ld, d_in, k, 1.f,
           "LinearBackward dX");
    }
    // d_W^T[K,N] += in^T[K,M] . d_out[M,N].
    if (d_weight != nullptr) {
      Gemm(CUBLAS_OP_N, CUBLAS_OP_T, k, n, m, in, k, d_out, ld, d_weight, k, 1.f,
           "LinearBackward dW");
    }
  }
  void BiasForward(float* out, const float* bias, int64_t rows, int64_t n) override {
    if (ok()) Check(mk::LaunchBiasForward(out, bias, rows, n, stream_), "BiasForward");
  }
  void BiasBackward(const float* d_out, float* d_bias, int64_t rows, int64_t n) override {
    float* partials = Partials(mk::PartialRows(rows) * n);
    if (partials != nullptr) {
      Check(mk::LaunchBiasBackward(d_out, d_bias, partials, rows, n, stream_), "BiasBackward");
    }
  }
  void EmbeddingForward(const int32_t* tokens, const float* table, float* out, int64_t n,
                        int64_t c, float scale) override {
    if (ok()) Check(mk::LaunchEmbeddingForward(tokens, table, out, n, c, scale, stream_),
                    "EmbeddingForward");
  }
  void EmbeddingBackward(const int32_t* tokens, const float* d_out, float* d_table, int64_t n,
                         int64_t c, float scale) override {
    if (!ok() || n == 0) return;
    // Deterministic scatter-add: group positions by token on the host (a counting sort of n ids),
    // then one block per distinct token sums its rows in position order. No float atomics.
    host_tokens_.resize(n);
    CopyToHost(host_tokens_.data(), tokens, sizeof(int32_t) * n);
    if (!ok()) return;
    int32_t max_token = 0;
    for (int32_t t : host_tokens_) {
      if (t < 0) {
        FailVoid(absl::InvalidArgumentError("EmbeddingBackward: negative token id"));
        return;
      }
      max_token = std::max(max_token, t);
    }
    counts_.assign(static_cast<size_t>(max_token) + 2, 0);
    for (int32_t t : host_tokens_) ++counts_[t + 1];
    for (size_t i = 1; i < counts_.size(); ++i) counts_[i] += counts_[i - 1];
    // counts_[t] = first slot of token t.
    host_order_.resize(n);
    std::vector<int32_t> cursor(counts_.begin(), counts_.end() - 1);
    for (int64_t i = 0; i < n; ++i) host_order_[cursor[host_tokens_[i]]++] = static_cast<int32_t>(i);
    host_seg_start_.clear();
    host_seg_token_.clear();
    for (int32_t t = 0; t <= max_token; ++t) {
      if (counts_[t + 1] > counts_[t]) {
        host_seg_start_.push_back(counts_[t]);
        host_seg_token_.push_back(t);
      }
    }
    host_seg_start_.push_back(static_cast<int32_t>(n));
    const int64_t segs = static_cast<int64_t>(host_seg_token_.size());
    const size_t need = sizeof(int32_t) * (n + 2 * segs + 1);
    if (!Check(embed_scratch_.Ensure(need), "EmbeddingBackward scratch")) return;
    int32_t* d_order = embed_scratch_.as<int32_t>();
    int32_t* d_start = d_order + n;
    int32_t* d_token = d_start + segs + 1;
    CopyToDevice(d_order, host_order_.data(), sizeof(int32_t) * n);
    CopyToDevice(d_start, host_seg_start_.data(), sizeof(int32_t) * (segs + 1));
    CopyToDevice(d_token, host_seg_token_.data(), sizeof(int32_t) * segs);
    if (ok()) {
      Check(mk::LaunchEmbeddingBackward(d_order, d_start, d_token, segs, d_out, d_table, c, scale,
                                        stream_),
            "EmbeddingBackward");
    }
  }
  void RmsNormForward(const float* x, const float* weight, float* out, float* rstd, int64_t rows,
                      int64_t c, float eps) override {
    if (ok()) Check(mk::LaunchRmsNormForward(x, weight, out, rstd, rows, c, eps, stream_),
                    "RmsNormForward");
  }
  void RmsNormBackward(const float* x, const float* weight, const float* rstd, const float* d_out,
                       float* d_x, float* d_weight, int64_t rows, int64_t c) override {
    if (c > mk::MaxRmsNormWidth()) {
      FailVoid(absl::InvalidArgumentError(absl::StrCat("RmsNormBackward: width ", c, " above ",
                                                   mk::MaxRmsNormWidth())));
      return;
    }
    float* partials = Partials(mk::PartialRows(rows) * c);
    if (partials != nullptr) {
      Check(mk::LaunchRmsNormBackward(x, weight, rstd, d_out, d_x, d_weight, partials, rows, c,
                                      stream_),
            "RmsNormBackward");
    }
  }
  void CausalConvForward(const float* x, const float* weight, float* out, int64_t b, int64_t t,
                         int64_t ch, int64_t w) override {
    if (ok()) Check(mk::LaunchCausalConvForward(x, weight, out, b, t, ch, w, stream_),
                    "CausalConvForward");
  }
  void CausalConvBackward(const float* x, const float* weight, const float* d_out, float* d_x,
                          float* d_weight, int64_t b, int64_t t, int64_t ch, int64_t w) override {
    if (w < 1 || w > mk::kMaxConvWidth) {
      FailVoid(absl::InvalidArgumentError(absl::StrCat("CausalConvBackward: width ", w, " outside [1, ",
                                                   mk::kMaxConvWidth, "]")));
      return;
    }
    float* partials = Partials(mk::PartialRows(b * t) * ch * w);
    if (partials != nullptr) {
      Check(mk::LaunchCausalConvBackward(x, weight, d_out, d_x, d_weight, partials, b, t, ch, w,
                                         stream_),
            "CausalConvBackward");
    }
  }
  void SiluL2NormForward(const float* x, float* y, int64_t groups, int64_t d) override {
    if (ok()) Check(mk::LaunchSiluL2NormForward(x, y, groups, d, stream_), "SiluL2NormForward");
  }
  void SiluL2NormBackward(const float* x, const float* d_y, float* d_x, int64_t groups,
                          int64_t d) override {
    if (ok()) Check(mk::LaunchSiluL2NormBackward(x, d_y, d_x, groups, d, stream_),
                    "SiluL2NormBackward");
  }
  void GatesForward(const float* a_pre, const float* b_pre, float* beta, float* log_gamma,
                    int64_t n, float cap) override {
    if (ok()) Check(mk::LaunchGatesForward(a_pre, b_pre, beta, log_gamma, n, cap, stream_),
                    "GatesForward");
  }
  void GatesBackward(const float* a_pre, const float* b_pre, const float* d_beta,
                     const float* d_log_gamma, float* d_a_pre, float* d_b_pre, int64_t n,
                     float cap) override {
    if (ok()) {
      Check(mk::LaunchGatesBackward(a_pre, b_pre, d_beta, d_log_gamma, d_a_pre, d_b_pre, n, cap,
                                    stream_),
            "GatesBackward");
    }
  }
  void LambdaForward(const float* p, float* lambda, int64_t n, float floor) override {
    if (ok()) Check(mk::LaunchLambdaForward(p, lambda, n, floor, stream_), "LambdaForward");
  }
  void LambdaBackward(const float* p, const float* d_lambda, float* d_p, int64_t n) override {
    if (ok()) Check(mk::LaunchLambdaBackward(p, d_lambda, d_p, n, stream_), "LambdaBackward");
  }
  void SwiGluForward(const float* gate, const float* up, float* h, int64_t n) override {
    if (ok()) Check(mk::LaunchSwiGluForward(gate, up, h, n, stream_), "SwiGluForward");
  }
  void SwiGluBackward(const float* gate, const float* up, const float* d_h, float* d_gate,
                      float* d_up, int64_t n) override {
    if (ok()) Check(mk::LaunchSwiGluBackward(gate, up, d_h, d_gate, d_up, n, stream_),
                    "SwiGluBackward");
  }
  void AddInPlace(float* out, const float* in, int64_t n) override {
    if (ok()) Check(mk::LaunchAddInPlace(out, in, n, stream_), "AddInPlace");
  }
  double SoftcapCrossEntropyForward(const float* logits, const int32_t* targets, float* losses,
                                    int64_t rows, int64_t v, int64_t ld, float cap,
                                    int32_t ignore_token) override {
    if (!ok() || !CheckLd(ld, v, "SoftcapCrossEntropyForward")) return NAN;
    if (!Check(mk::LaunchSoftcapCrossEntropyForward(logits, targets, losses, rows, v, ld, cap,
                                                    ignore_token, stream_),
               "SoftcapCrossEntropyForward")) {
      return NAN;
    }
    double* partials = sum_partials_.as<double>();
    if (!Check(mk::LaunchSum(losses, rows, partials, partials + mk::kSumBlocks, stream_),
               "loss sum")) {
      return NAN;
    }
    return ReadDouble(partials + mk::kSumBlocks);
  }
  void SoftcapCrossEntropyBackward(float* logits, const int32_t* targets, int64_t rows, int64_t v,
                                   int64_t ld, float cap, int32_t ignore_token,
                                   float loss_scale) override {
    if (ok() && CheckLd(ld, v, "SoftcapCrossEntropyBackward")) {
      Check(mk::LaunchSoftcapCrossEntropyBackward(logits, targets, rows, v, ld, cap, ignore_token,
                                                  loss_scale, stream_),
            "SoftcapCrossEntropyBackward");
    }
  }

  // ---- Mesa operator: the device entry points of kernels/cuda on this backend's stream.
  absl::StatusOr<double> MesaForward(const kernels::MesaInputs& in, const MesaSolve& solve,
                                     const kernels::MesaForwardOutputs& out) override {
    if (!ok()) return status_;
    kernels::MesaOptions options = OptionsFor(solve);
    if (absl::Status s = kernels::ValidateMesaInputs(in, options); !s.ok()) return s;
    if (absl::Status s = kernels::ValidateForwardOutputs(in, out); !s.ok()) return s;
    kc::DeviceInputs d = DeviceInputsFor(in);
    kc::DeviceForwardOutputs o;
    o.o = out.o.data();
    o.q_star = out.q_star.empty() ? nullptr : out.q_star.data();
    o.h_final = out.h_final.empty() ? nullptr : out.h_final.data();
    o.g_final = out.g_final.empty() ? nullptr : out.g_final.data();
    double steps = solve.max_steps;
    const bool read_steps = options_.exact_cg_steps || solve.tolerance > 0;
    o.cg_steps_mean = read_steps ? &steps : nullptr;
    if (absl::Status s = kc::ForwardDevice(in.dims, in.cu_seqlens, options.cg, d, o, &mesa_ws_,
                                           stream_);
        !s.ok()) {
      return Fail(s);
    }
    return steps;
  }
  absl::StatusOr<double> MesaBackward(const kernels::MesaInputs& in,
                                      const kernels::MesaBackwardInputs& bwd,
                                      const MesaSolve& solve,
                                      const kernels::MesaGradients& grads) override {
    if (!ok()) return status_;
    kernels::MesaOptions options = OptionsFor(solve);
    if (absl::Status s = kernels::ValidateBackward(in, bwd, grads, options); !s.ok()) return s;
    kc::DeviceInputs d = DeviceInputsFor(in);
    kc::DeviceBackwardInputs b;
    b.q_star = bwd.q_star.data();
    b.d_o = bwd.d_o.data();
    b.dh_final = bwd.dh_final.empty() ? nullptr : bwd.dh_final.data();
    b.dg_final = bwd.dg_final.empty() ? nullptr : bwd.dg_final.data();
    kc::DeviceGradients g;
    g.dq = grads.dq.data();
    g.dk = grads.dk.data();
    g.dv = grads.dv.data();
    g.dlog_gamma = grads.dlog_gamma.data();
    g.dbeta = grads.dbeta.data();
    g.dlambda = grads.dlambda.data();
    g.dh0 = grads.dh0.empty() ? nullptr : grads.dh0.data();
    g.dg0 = grads.dg0.empty() ? nullptr : grads.dg0.data();
    double steps = solve.max_steps;
    const bool read_steps = options_.exact_cg_steps || solve.tolerance > 0;
    g.cg_steps_mean = read_steps ? &steps : nullptr;
    if (absl::Status s = kc::BackwardDevice(in.dims, in.cu_seqlens, options.cg, d, b, g, &mesa_ws_,
                                            stream_);
        !s.ok()) {
      return Fail(s);
    }
    return steps;
  }

  // ---- Optimizer and reductions.
  double SumOfSquares(const float* x, int64_t n) override {
    if (!ok()) return NAN;
    double* partials = sum_partials_.as<double>();
    if (!Check(mk::LaunchSumOfSquares(x, n, partials, partials + mk::kSumBlocks, stream_),
               "SumOfSquares")) {
      return NAN;
    }
    return ReadDouble(partials + mk::kSumBlocks);
  }
  void Scale(float* x, int64_t n, float factor) override {
    if (ok()) Check(mk::LaunchScale(x, n, factor, stream_), "Scale");
  }
  void AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                   float beta1, float beta2, float eps, float weight_decay, float bias_correction1,
                   float bias_correction2) override {
    if (ok()) {
      Check(mk::LaunchAdamW(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay,
                            bias_correction1, bias_correction2, stream_),
            "AdamWUpdate");
    }
  }

 private:
  struct GemmPlan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // (math, transa, transb, m, n, k, lda, ldb, ldc, align a, b, c)
  using GemmKey = std::tuple<int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                             uint32_t, uint32_t, uint32_t>;

  bool ok() const { return status_.ok(); }

  // Records the first error (sticky) and returns it.
  absl::Status Fail(const absl::Status& s) {
    if (status_.ok()) {
      status_ = s;
      std::fprintf(stderr, "CudaBackend: %s\n", std::string(s.message()).c_str());
    }
    return status_;
  }
  void FailVoid(const absl::Status& s) { Fail(s).IgnoreError(); }
  bool CheckLd(int64_t ld, int64_t n, const char* what) {
    if (ld >= n) return true;
    FailVoid(absl::InvalidArgumentError(
        absl::StrCat(what, ": row stride ", ld, " below width ", n)));
    return false;
  }
  bool Check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    FailVoid(absl::InternalError(absl::StrCat("CUDA error in ", what, ": ", cudaGetErrorString(e))));
    return false;
  }
  bool CheckBlas(cublasStatus_t b, const char* what) {
    if (b == CUBLAS_STATUS_SUCCESS) return true;
    FailVoid(absl::InternalError(absl::StrCat("cuBLASLt error in ", what, ": ",
                                          cublasGetStatusString(b))));
    return false;
  }

  void* AllocateZeroed(size_t bytes) {
    if (!ok()) return nullptr;
    void* ptr = nullptr;
    if (cudaError_t e = cudaMalloc(&ptr, bytes); e != cudaSuccess) {
      cudaGetLastError();  // out of memory is reported to the caller as nullptr, not sticky
      return nullptr;
    }
    if (!Check(cudaMemsetAsync(ptr, 0, bytes, stream_), "Allocate memset") ||
        !Check(cudaStreamSynchronize(stream_), "Allocate sync")) {
      cudaFree(ptr);
      return nullptr;
    }
    return ptr;
  }

  float* Partials(int64_t floats) {
    if (!ok()) return nullptr;
    if (!Check(partials_.Ensure(sizeof(float) * std::max<int64_t>(floats, 1)), "scratch")) {
      return nullptr;
    }
    return partials_.as<float>();
  }

  double ReadDouble(const double* device) {
    double host = NAN;
    if (!Check(cudaMemcpyAsync(&host, device, sizeof(double), cudaMemcpyDeviceToHost, stream_),
               "readback") ||
        !Check(cudaStreamSynchronize(stream_), "readback sync")) {
      return NAN;
    }
    return host;
  }

  kernels::MesaOptions OptionsFor(const MesaSolve& solve) const {
    kernels::MesaOptions options;
    options.impl = kernels::MesaImpl::kCuda;
    options.cg.max_steps = solve.max_steps;
    options.cg.tolerance = solve.tolerance;
    options.memory = kernels::MemorySpace::kDevice;
    return options;
  }
  static kc::DeviceInputs DeviceInputsFor(const kernels::MesaInputs& in) {
    kc::DeviceInputs d;
    d.dtype = kc::DType::kF32;
    d.q = in.q.data();
    d.k = in.k.data();
    d.v = in.v.data();
    d.log_gamma = in.log_gamma.data();
    d.beta = in.beta.data();
    d.lambda = in.lambda.data();
    d.h0 = in.h0.empty() ? nullptr : in.h0.data();
    d.g0 = in.g0.empty() ? nullptr : in.g0.data();
    return d;
  }

  static void DestroyPlan(GemmPlan* p) {
    if (p->a != nullptr) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b != nullptr) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c != nullptr) cublasLtMatrixLayoutDestroy(p->c);
    if (p->desc != nullptr) cublasLtMatmulDescDestroy(p->desc);
  }

  // Column-major C[m,n] = alpha op(A) op(B) + beta C, with descriptors and the heuristic's
  // algorithm cached per shape (the trainer repeats a few dozen shapes every step).
  void Gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
            const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
            float beta, const char* what) {
    if (!ok() || m == 0 || n == 0) return;
    if (k == 0) {  // empty sum: C = beta C
      if (beta == 0.f) {
        // n columns of m floats, ldc apart (the padding between them is left alone).
        Check(cudaMemset2DAsync(c, sizeof(float) * ldc, 0, sizeof(float) * m, n, stream_), what);
      }
      return;
    }
    const GemmKey key{static_cast<int>(options_.gemm_math), ta, tb, m, n, k, lda, ldb, ldc,
                      Alignment(a), Alignment(b), Alignment(c)};
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      GemmPlan plan;
      if (!MakePlan(key, ta, tb, m, n, k, lda, ldb, ldc, &plan, what)) {
        DestroyPlan(&plan);
        return;
      }
      it = plans_.emplace(key, plan).first;
    }
    const GemmPlan& p = it->second;
    const float alpha = 1.f;
    CheckBlas(cublasLtMatmul(lt_, p.desc, &alpha, a, p.a, b, p.b, &beta, c, p.c, c, p.c, &p.algo,
                             gemm_ws_, kGemmWorkspaceBytes, stream_),
              what);
  }

  bool MakePlan(const GemmKey& key, cublasOperation_t ta, cublasOperation_t tb, int64_t m,
                int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc, GemmPlan* plan,
                const char* what) {
    if (!CheckBlas(cublasLtMatmulDescCreate(&plan->desc, ComputeType(options_.gemm_math),
                                            CUDA_R_32F),
                   what) ||
        !CheckBlas(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                  sizeof(ta)),
                   what) ||
        !CheckBlas(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                  sizeof(tb)),
                   what)) {
      return false;
    }
    const bool an = ta == CUBLAS_OP_N, bn = tb == CUBLAS_OP_N;
    if (!CheckBlas(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_32F, an ? m : k, an ? k : m, lda),
                   what) ||
        !CheckBlas(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_32F, bn ? k : n, bn ? n : k, ldb),
                   what) ||
        !CheckBlas(cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_32F, m, n, ldc), what)) {
      return false;
    }
    cublasLtMatmulPreference_t pref = nullptr;
    if (!CheckBlas(cublasLtMatmulPreferenceCreate(&pref), what)) return false;
    const uint64_t ws = kGemmWorkspaceBytes;
    const uint32_t align_a = std::get<9>(key), align_b = std::get<10>(key),
                   align_c = std::get<11>(key);
    bool good =
        CheckBlas(cublasLtMatmulPreferenceSetAttribute(
                      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                  what) &&
        CheckBlas(cublasLtMatmulPreferenceSetAttribute(
                      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)),
                  what) &&
        CheckBlas(cublasLtMatmulPreferenceSetAttribute(
                      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)),
                  what) &&
        CheckBlas(cublasLtMatmulPreferenceSetAttribute(
                      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)),
                  what) &&
        CheckBlas(cublasLtMatmulPreferenceSetAttribute(
                      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)),
                  what);
    if (good) {
      cublasLtMatmulHeuristicResult_t result{};
      int returned = 0;
      good = CheckBlas(cublasLtMatmulAlgoGetHeuristic(lt_, plan->desc, plan->a, plan->b, plan->c,
                                                      plan->c, pref, 1, &result, &returned),
                       what);
      if (good && returned == 0) {
        FailVoid(absl::InternalError(absl::StrCat("cuBLASLt has no algorithm for ", what, " (m=", m,
                                              " n=", n, " k=", k, ")")));
        good = false;
      }
      if (good) plan->algo = result.algo;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    return good;
  }

  CudaBackendOptions options_;
  absl::Status status_;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* gemm_ws_ = nullptr;
  std::map<GemmKey, GemmPlan> plans_;
  Scratch partials_, sum_partials_, embed_scratch_;
  kc::Workspace mesa_ws_;
  std::vector<int32_t> host_tokens_, counts_, host_order_, host_seg_start_, host_seg_token_;
};

}  // namespace

absl::StatusOr<GemmMath> ParseGemmMath(const std::string& name) {
  if (name == "tf32") return GemmMath::kTf32;
  if (name == "bf16") return GemmMath::kBf16;
  if (name == "fp32") return GemmMath::kFp32;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown GEMM math '", name, "' (expected tf32, bf16 or fp32)"));
}

const char* GemmMathName(GemmMath math) {
  switch (math) {
    case GemmMath::kTf32:
      return "tf32";
    case GemmMath::kBf16:
      return "bf16";
    case GemmMath::kFp32:
      return "fp32";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  auto backend = std::make_unique<CudaBackend>(options);
  if (absl::Status s = backend->Init(); !s.ok()) return s;
  return std::unique_ptr<Backend>(std::move(backend));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device) {
  CudaBackendOptions options;
  options.device = device;
  return CreateCudaBackend(options);
}

CudaBackendControl* GetCudaControl(Backend* backend) {
  return dynamic_cast<CudaBackendControl*>(backend);
}

}  // namespace mesa::model
