#include "model/backend/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "kernels/conv/cuda/causal_conv_step_cuda.h"
#include "model/backend/cuda/backend_kernels.h"
#include "model/backend/cuda/cuda_profiler.h"
#include "model/backend/cuda/gemm_plan_cache.h"

namespace mesa::model {
namespace {

namespace mk = ::mesa::model::cuda;

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation on Hopper
// Up to this many rows GateProjectionsForward is one kernel (a CTA per row and head); past it,
// two GEMMs and BiasGatesForward (a GEMM then beats the per-row dot products).
constexpr int64_t kMaxFusedGateRows = 64;

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
  // Makes ptr non-null and at least `want` bytes (at least 256, also for want = 0).
  cudaError_t Ensure(size_t want) {
    if (ptr != nullptr && want <= bytes) return cudaSuccess;
    if (ptr != nullptr) cudaFree(ptr);  // cudaFree waits for queued work that may still use it
    ptr = nullptr;
    bytes = 0;
    want = std::max<size_t>(want, 256);
    if (cudaError_t e = cudaMalloc(&ptr, want); e != cudaSuccess) return e;
    bytes = want;
    return cudaSuccess;
  }
  ~Scratch() {
    if (ptr != nullptr) cudaFree(ptr);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

class CudaBackend final : public Backend, public CudaBackendControl {
 public:
  explicit CudaBackend(const CudaBackendOptions& options) : options_(options) {}
  ~CudaBackend() override {
    for (cudaGraphExec_t exec : graphs_) cudaGraphExecDestroy(exec);
    gemm_plans_.reset();  // before the handle its plans were made with
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
      return absl::FailedPreconditionError(
          absl::StrCat("CUDA device ", options_.device, " requested but ", count, " present"));
    }
    if (cudaError_t e = cudaSetDevice(options_.device); e != cudaSuccess) {
      return absl::FailedPreconditionError(
          absl::StrCat("cudaSetDevice(", options_.device, "): ", cudaGetErrorString(e)));
    }
    cudaDeviceProp prop{};
    if (cudaError_t e = cudaGetDeviceProperties(&prop, options_.device); e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaGetDeviceProperties: ", cudaGetErrorString(e)));
    }
    if (prop.major < 8) {
      return absl::FailedPreconditionError(
          absl::StrCat("CUDA device ", prop.name, " has compute capability ", prop.major, ".",
                       prop.minor, "; the kernels are built for sm_80 and sm_90a"));
    }
    // A blocking stream: the Mesa op's synchronous table uploads (legacy stream) stay ordered.
    if (cudaError_t e = cudaStreamCreate(&stream_); e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaStreamCreate: ", cudaGetErrorString(e)));
    }
    if (cublasStatus_t b = cublasLtCreate(&lt_); b != CUBLAS_STATUS_SUCCESS) {
      return absl::InternalError(absl::StrCat("cublasLtCreate: ", cublasGetStatusString(b)));
    }
    gemm_plans_ = std::make_unique<mk::GemmPlanCache>(lt_, kGemmWorkspaceBytes);
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
  void WaitForDevice() override { (void)Synchronize(); }
  void PushRange(const char* name) override { nvtxRangePushA(name); }
  void PopRange() override { nvtxRangePop(); }
  void* stream() const override { return stream_; }
  absl::Status RecordError(const absl::Status& error) override { return Fail(error); }

  // ---- Recording: stream capture into CUDA graphs (relaxed mode: the cuBLASLt calls and host
  // bookkeeping in the captured calls are allowed; a synchronising call fails the capture).
  absl::Status BeginRecording() override {
    if (!ok()) return status_;
    if (cudaError_t e = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed);
        e != cudaSuccess) {
      cudaGetLastError();
      return absl::FailedPreconditionError(
          absl::StrCat("cudaStreamBeginCapture: ", cudaGetErrorString(e)));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<int> EndRecording() override {
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    cudaGraphExec_t exec = nullptr;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
      cudaGetLastError();
      // A call that could not be captured (e.g. it synchronised): not sticky, the caller runs
      // the calls directly instead.
      return absl::FailedPreconditionError(
          absl::StrCat("recording a CUDA graph: ", cudaGetErrorString(e)));
    }
    if (!ok()) {
      cudaGraphExecDestroy(exec);
      return status_;
    }
    graphs_.push_back(exec);
    return static_cast<int>(graphs_.size()) - 1;
  }
  absl::Status Replay(int recording) override {
    if (!ok()) return status_;
    if (recording < 0 || recording >= static_cast<int>(graphs_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("no recording ", recording));
    }
    ProfileBegin();
    Check(cudaGraphLaunch(graphs_[recording], stream_), "cudaGraphLaunch");
    ProfileEnd("Replay");
    return status_;
  }
  const CudaBackendOptions& options() const override { return options_; }
  void ProfileBegin() override { profiler_.Begin(stream_); }
  // A view, so that the per-launch call builds no string unless profiling is on.
  void ProfileEnd(absl::string_view what) override {
    if (profiler_.enabled()) Check(profiler_.End(stream_, what), "profiling");
  }
  void SetGemmMath(GemmMath math) override { options_.gemm_math = math; }
  void Fill(float* ptr, int64_t n, float value) override {
    if (ok()) Check(mk::LaunchFill(ptr, n, value, stream_), "Fill");
  }
  void SetProfiling(bool on) override { Check(profiler_.SetEnabled(on), "profiling event"); }
  std::string ProfileReport() override { return profiler_.Report(); }
  void FillActivations(Act ptr, int64_t n, float value) override {
    Launch("FillActivations",
           [&](auto* t) { return mk::LaunchFill(As(t, ptr), n, value, stream_); });
  }

  // ---- Memory.
  ActivationType activation_type() const override { return options_.activations; }
  float* AllocateFloats(int64_t n) override {
    return static_cast<float*>(AllocateZeroed(sizeof(float) * std::max<int64_t>(n, 1)));
  }
  int32_t* AllocateInts(int64_t n) override {
    return static_cast<int32_t*>(AllocateZeroed(sizeof(int32_t) * std::max<int64_t>(n, 1)));
  }
  Act AllocateActivations(int64_t n) override {
    return {AllocateZeroed(activation_bytes() * std::max<int64_t>(n, 1))};
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
    if (ok() && n > 0) Memset(ptr, sizeof(float) * n, "Zero");
  }
  void Copy(float* dst, const float* src, int64_t n) override {
    if (ok() && n > 0 && dst != src) Memcpy(dst, src, sizeof(float) * n, "Copy");
  }
  void GatherRows(float* base, int64_t row_elems, const int32_t* src_rows, int64_t first_dst,
                  int64_t count) override {
    if (ok() && row_elems > 0 && count > 0) {
      Check(mk::LaunchGatherRows(base, row_elems, src_rows, first_dst, count, stream_),
            "GatherRows");
    }
  }
  void ZeroActivations(Act ptr, int64_t n) override {
    if (ok() && n > 0) Memset(ptr.ptr, activation_bytes() * n, "ZeroActivations");
  }
  void CopyActivations(Act dst, Act src, int64_t n) override {
    if (ok() && n > 0 && dst.ptr != src.ptr) {
      Memcpy(dst.ptr, src.ptr, activation_bytes() * n, "CopyActivations");
    }
  }
  void ActivationsToHost(float* dst, Act src, int64_t n) override {
    if (!ok() || n <= 0) return;
    if (!bf16()) {
      CopyToHost(dst, src.ptr, sizeof(float) * n);
      return;
    }
    float* staging = Staging(n);
    if (staging != nullptr &&
        Check(mk::LaunchToFloat(As<Bf16>(src), staging, n, stream_), "ActivationsToHost")) {
      CopyToHost(dst, staging, sizeof(float) * n);
    }
  }
  void ActivationsFromHost(Act dst, const float* src, int64_t n) override {
    if (!ok() || n <= 0) return;
    if (!bf16()) {
      CopyToDevice(dst.ptr, src, sizeof(float) * n);
      return;
    }
    float* staging = Staging(n);
    if (staging == nullptr) return;
    CopyToDevice(staging, src, sizeof(float) * n);
    if (ok()) Check(mk::LaunchFromFloat(staging, As<Bf16>(dst), n, stream_), "ActivationsFromHost");
  }
  void CacheWeights(const float* params, int64_t n) override {
    if (!ok() || !bf16()) return;
    cached_params_ = nullptr;
    if (!Check(weight_cache_.Ensure(sizeof(Bf16) * n), "weight cache")) {
      return;
    }
    ProfileBegin();
    if (Check(mk::LaunchFromFloat(params, weight_cache_.as<Bf16>(), n, stream_), "CacheWeights")) {
      cached_params_ = params;
      cached_count_ = n;
    }
    ProfileEnd("CacheWeights");
  }

  // ---- Linear layers (row-major [M,K] x [N,K]^T, mapped onto column-major cuBLASLt).
  // `ld` is the row stride of out / d_out; it is the leading dimension of that operand in the
  // column-major view, so a padded stride (a multiple of 16 bytes) keeps cuBLASLt's aligned
  // (TMA) kernels usable when n is odd, e.g. the vocabulary.
  void LinearForwardStrided(Act in, const float* weight, Act out, int64_t ld, int64_t m, int64_t k,
                            int64_t n, bool accumulate) override {
    if (!CheckLd(ld, n, "LinearForward")) return;
    // out^T[N,M] = W[K,N]^T (col-major view of row-major [N,K]) . in^T[K,M].
    Gemm(CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, Weight(weight, k * n), k, ActOperand(in), k,
         ActOperand(out), ld, accumulate ? 1.f : 0.f, "LinearForward");
  }
  void LinearBackwardStrided(Act in, const float* weight, Act d_out, int64_t ld, Act d_in,
                             float* d_weight, int64_t m, int64_t k, int64_t n,
                             bool accumulate_d_in) override {
    if (!CheckLd(ld, n, "LinearBackward")) return;
    // d_in^T[K,M] (+)= W^T-view[K,N] . d_out^T[N,M].
    if (d_in) {
      Gemm(CUBLAS_OP_N, CUBLAS_OP_N, k, m, n, Weight(weight, k * n), k, ActOperand(d_out), ld,
           ActOperand(d_in), k, accumulate_d_in ? 1.f : 0.f, "LinearBackward dX");
    }
    // d_W^T[K,N] += in^T[K,M] . d_out[M,N]; float32 output whatever the activations are.
    if (d_weight != nullptr) {
      Gemm(CUBLAS_OP_N, CUBLAS_OP_T, k, n, m, ActOperand(in), k, ActOperand(d_out), ld,
           {d_weight, CUDA_R_32F}, k, 1.f, "LinearBackward dW");
    }
  }
  void BiasForward(Act out, const float* bias, int64_t rows, int64_t n) override {
    Launch("BiasForward",
           [&](auto* t) { return mk::LaunchBiasForward(As(t, out), bias, rows, n, stream_); });
  }
  void BiasBackward(Act d_out, float* d_bias, int64_t rows, int64_t n) override {
    float* partials = Partials(mk::PartialRows(rows) * n);
    if (partials == nullptr) return;
    Launch("BiasBackward", [&](auto* t) {
      return mk::LaunchBiasBackward(As(t, d_out), d_bias, partials, rows, n, stream_);
    });
  }
  void EmbeddingForward(const int32_t* tokens, const float* table, Act out, int64_t n, int64_t c,
                        float scale) override {
    Launch("EmbeddingForward", [&](auto* t) {
      return mk::LaunchEmbeddingForward(tokens, table, As(t, out), n, c, scale, stream_);
    });
  }
  void EmbeddingBackward(const int32_t* tokens, Act d_out, float* d_table, int64_t n, int64_t c,
                         float scale) override {
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
    // One upload of [order (n) | seg_start (segs + 1) | seg_token (segs)]; counts_ becomes the
    // scatter cursor (positions ascend within a token).
    host_embed_.resize(n + 2 * segs + 1);
    for (int64_t i = 0; i < n; ++i) {
      host_embed_[counts_[host_tokens_[i]]++] = static_cast<int32_t>(i);
    }
    std::copy(host_seg_start_.begin(), host_seg_start_.end(), host_embed_.begin() + n);
    std::copy(host_seg_token_.begin(), host_seg_token_.end(), host_embed_.begin() + n + segs + 1);
    const size_t bytes = sizeof(int32_t) * host_embed_.size();
    if (!Check(embed_scratch_.Ensure(bytes), "EmbeddingBackward scratch")) return;
    int32_t* d_order = embed_scratch_.as<int32_t>();
    int32_t* d_start = d_order + n;
    int32_t* d_token = d_start + segs + 1;
    CopyToDevice(d_order, host_embed_.data(), bytes);
    Launch("EmbeddingBackward", [&](auto* t) {
      return mk::LaunchEmbeddingBackward(d_order, d_start, d_token, segs, As(t, d_out), d_table, c,
                                         scale, stream_);
    });
  }
  void RmsNormForward(Act x, const float* weight, Act out, float* rstd, int64_t rows, int64_t c,
                      float eps) override {
    Launch("RmsNormForward", [&](auto* t) {
      return mk::LaunchRmsNormForward(As(t, x), weight, As(t, out), rstd, rows, c, eps, stream_);
    });
  }
  void RmsNormBackward(Act x, const float* weight, const float* rstd, Act d_out, Act d_x,
                       float* d_weight, int64_t rows, int64_t c) override {
    if (c > mk::MaxRmsNormWidth()) {
      FailVoid(absl::InvalidArgumentError(
          absl::StrCat("RmsNormBackward: width ", c, " above ", mk::MaxRmsNormWidth())));
      return;
    }
    float* partials = Partials(mk::PartialRows(rows) * c);
    if (partials == nullptr) return;
    Launch("RmsNormBackward", [&](auto* t) {
      return mk::LaunchRmsNormBackward(As(t, x), weight, rstd, As(t, d_out), As(t, d_x), d_weight,
                                       partials, rows, c, stream_);
    });
  }
  void CausalConvForward(Act x, const float* weight, Act out, int64_t b, int64_t t, int64_t ch,
                         int64_t w, const int32_t* doc_start) override {
    if (!CheckConvWidth(w, "CausalConvForward")) return;
    Launch("CausalConvForward", [&](auto* tag) {
      return mk::LaunchCausalConvForward(As(tag, x), weight, As(tag, out), b, t, ch, w, doc_start,
                                         stream_);
    });
  }
  void CausalConvBackward(Act x, const float* weight, Act d_out, Act d_x, float* d_weight,
                          int64_t b, int64_t t, int64_t ch, int64_t w,
                          const int32_t* doc_start) override {
    if (!CheckConvWidth(w, "CausalConvBackward")) return;
    float* partials = Partials(mk::PartialRows(b * t) * ch * w);
    if (partials == nullptr) return;
    Launch("CausalConvBackward", [&](auto* tag) {
      return mk::LaunchCausalConvBackward(As(tag, x), weight, As(tag, d_out), As(tag, d_x),
                                          d_weight, partials, b, t, ch, w, doc_start, stream_);
    });
  }
  void FillAtDocumentStarts(float* x, const int32_t* doc_start, int64_t b, int64_t t, int64_t cols,
                            float value) override {
    if (ok()) {
      Check(mk::LaunchFillAtDocumentStarts(x, doc_start, b, t, cols, value, stream_),
            "FillAtDocumentStarts");
    }
  }
  absl::Status CausalConvTailBackward(const float* tail, const float* d_tail_out,
                                      const float* weight, Act d_out, Act d_x, float* d_tail,
                                      float* d_weight, int64_t b, int64_t t, int64_t ch,
                                      int64_t w) override {
    if (t < w - 1) {
      return absl::InvalidArgumentError(absl::StrCat("a context-parallel slice of ", t,
                                                     " tokens is shorter than the convolution's "
                                                     "tail ",
                                                     w - 1));
    }
    if (!CheckConvWidth(w, "CausalConvTailBackward")) return status();
    Launch("CausalConvTailBackward", [&](auto* tag) {
      return mk::LaunchCausalConvTailBackward(tail, d_tail_out, weight, As(tag, d_out),
                                              As(tag, d_x), d_tail, d_weight, b, t, ch, w, stream_);
    });
    return status();
  }
  void CausalConvAppend(Act x, const float* weight, float* tail, Act out, int64_t b, int64_t t,
                        int64_t ch, int64_t w) override {
    if (!ok()) return;
    ProfileBegin();
    if (absl::Status s = kernels::cuda::CausalConvAppendDevice(
            {b, t, ch, w}, bf16() ? kernels::cuda::DType::kBF16 : kernels::cuda::DType::kF32, x.ptr,
            weight, tail, out.ptr, stream_);
        !s.ok()) {
      FailVoid(s);
      return;
    }
    ProfileEnd("CausalConvAppend");
  }
  void CausalConvAppendPair(Act x0, const float* weight0, float* tail0, Act out0, Act x1,
                            const float* weight1, float* tail1, Act out1, int64_t b, int64_t t,
                            int64_t ch, int64_t w) override {
    if (!ok()) return;
    ProfileBegin();
    if (absl::Status s = kernels::cuda::CausalConvAppendPairDevice(
            {b, t, ch, w}, bf16() ? kernels::cuda::DType::kBF16 : kernels::cuda::DType::kF32,
            {x0.ptr, weight0, tail0, out0.ptr}, {x1.ptr, weight1, tail1, out1.ptr}, stream_);
        !s.ok()) {
      FailVoid(s);
      return;
    }
    ProfileEnd("CausalConvAppendPair");
  }
  void SiluL2NormForward(Act x, Act y, int64_t groups, int64_t d) override {
    Launch("SiluL2NormForward", [&](auto* t) {
      return mk::LaunchSiluL2NormForward(As(t, x), As(t, y), groups, d, stream_);
    });
  }
  void SiluL2NormBackward(Act x, Act d_y, Act d_x, int64_t groups, int64_t d) override {
    Launch("SiluL2NormBackward", [&](auto* t) {
      return mk::LaunchSiluL2NormBackward(As(t, x), As(t, d_y), As(t, d_x), groups, d, stream_);
    });
  }
  void GatesForward(Act a_pre, Act b_pre, float* beta, float* log_gamma, int64_t n,
                    float cap) override {
    Launch("GatesForward", [&](auto* t) {
      return mk::LaunchGatesForward(As(t, a_pre), As(t, b_pre), beta, log_gamma, n, cap, stream_);
    });
  }
  void BiasGatesForward(Act a_pre, const float* a_bias, Act b_pre, const float* b_bias, float* beta,
                        float* log_gamma, int64_t rows, int64_t cols, float cap) override {
    Launch("BiasGatesForward", [&](auto* t) {
      return mk::LaunchBiasGatesForward(As(t, a_pre), a_bias, As(t, b_pre), b_bias, beta, log_gamma,
                                        rows, cols, cap, stream_);
    });
  }
  void GateProjectionsForward(Act ln, const float* a_weight, const float* a_bias,
                              const float* b_weight, const float* b_bias, Act a_pre, Act b_pre,
                              float* beta, float* log_gamma, int64_t rows, int64_t in,
                              int64_t heads, float cap) override {
    const void* wa = a_weight != nullptr ? ResidentWeight(a_weight, heads * in) : nullptr;
    const void* wb = b_weight != nullptr ? ResidentWeight(b_weight, heads * in) : nullptr;
    if (rows > kMaxFusedGateRows || (b_weight != nullptr && wb == nullptr) ||
        (a_weight != nullptr && wa == nullptr)) {
      Backend::GateProjectionsForward(ln, a_weight, a_bias, b_weight, b_bias, a_pre, b_pre, beta,
                                      log_gamma, rows, in, heads, cap);
      return;
    }
    Launch("GateProjectionsForward", [&](auto* t) {
      using T = std::remove_pointer_t<decltype(t)>;
      return mk::LaunchGateProjectionsForward(
          As(t, ln), static_cast<const T*>(wa), a_bias, static_cast<const T*>(wb), b_bias,
          As(t, a_pre), As(t, b_pre), beta, log_gamma, rows, in, heads, cap, stream_);
    });
  }
  void GatesBackward(Act a_pre, Act b_pre, const float* d_beta, const float* d_log_gamma,
                     Act d_a_pre, Act d_b_pre, int64_t n, float cap) override {
    Launch("GatesBackward", [&](auto* t) {
      return mk::LaunchGatesBackward(As(t, a_pre), As(t, b_pre), d_beta, d_log_gamma,
                                     As(t, d_a_pre), As(t, d_b_pre), n, cap, stream_);
    });
  }
  void LambdaForward(const float* p, float* lambda, int64_t n, float floor) override {
    if (ok()) Check(mk::LaunchLambdaForward(p, lambda, n, floor, stream_), "LambdaForward");
  }
  void LambdaBackward(const float* p, const float* d_lambda, float* d_p, int64_t n) override {
    if (ok()) Check(mk::LaunchLambdaBackward(p, d_lambda, d_p, n, stream_), "LambdaBackward");
  }
  void SwiGluRowsForward(Act gate_up, Act h, int64_t rows, int64_t n) override {
    Launch("SwiGluRowsForward", [&](auto* t) {
      return mk::LaunchSwiGluRowsForward(As(t, gate_up), As(t, h), rows, n, stream_);
    });
  }
  void SwiGluForward(Act gate, Act up, Act h, int64_t n) override {
    Launch("SwiGluForward", [&](auto* t) {
      return mk::LaunchSwiGluForward(As(t, gate), As(t, up), As(t, h), n, stream_);
    });
  }
  void SwiGluBackward(Act gate, Act up, Act d_h, Act d_gate, Act d_up, int64_t n) override {
    Launch("SwiGluBackward", [&](auto* t) {
      return mk::LaunchSwiGluBackward(As(t, gate), As(t, up), As(t, d_h), As(t, d_gate),
                                      As(t, d_up), n, stream_);
    });
  }
  void SiluForward(Act x, Act y, int64_t n) override {
    Launch("SiluForward",
           [&](auto* t) { return mk::LaunchSiluForward(As(t, x), As(t, y), n, stream_); });
  }
  void SiluBackward(Act x, Act d_y, Act d_x, int64_t n) override {
    Launch("SiluBackward", [&](auto* t) {
      return mk::LaunchSiluBackward(As(t, x), As(t, d_y), As(t, d_x), n, stream_);
    });
  }
  void GeluGateForward(Act y_pre, Act x, Act out, int64_t n) override {
    Launch("GeluGateForward", [&](auto* t) {
      return mk::LaunchGeluGateForward(As(t, y_pre), As(t, x), As(t, out), n, stream_);
    });
  }
  void GeluGateBackward(Act y_pre, Act x, Act d_out, Act d_y_pre, Act d_x, int64_t n) override {
    Launch("GeluGateBackward", [&](auto* t) {
      return mk::LaunchGeluGateBackward(As(t, y_pre), As(t, x), As(t, d_out), As(t, d_y_pre),
                                        As(t, d_x), n, stream_);
    });
  }
  // One GEMM per block over column slices of the rows (lda = blocks * width).
  void BlockDiagonalLinearForward(Act in, const float* weight, Act out, int64_t m, int64_t blocks,
                                  int64_t width, bool accumulate) override {
    const int64_t ld = blocks * width, w2 = width * width;
    for (int64_t j = 0; j < blocks; ++j) {
      Gemm(CUBLAS_OP_T, CUBLAS_OP_N, width, m, width, Weight(weight + j * w2, w2), width,
           ActOperand(ActAt(in, j * width)), ld, ActOperand(ActAt(out, j * width)), ld,
           accumulate ? 1.f : 0.f, "BlockDiagonalLinearForward");
    }
  }
  void BlockDiagonalLinearBackward(Act in, const float* weight, Act d_out, Act d_in,
                                   float* d_weight, int64_t m, int64_t blocks, int64_t width,
                                   bool accumulate_d_in) override {
    const int64_t ld = blocks * width, w2 = width * width;
    for (int64_t j = 0; j < blocks; ++j) {
      if (d_in) {
        Gemm(CUBLAS_OP_N, CUBLAS_OP_N, width, m, width, Weight(weight + j * w2, w2), width,
             ActOperand(ActAt(d_out, j * width)), ld, ActOperand(ActAt(d_in, j * width)), ld,
             accumulate_d_in ? 1.f : 0.f, "BlockDiagonalLinearBackward dX");
      }
      Gemm(CUBLAS_OP_N, CUBLAS_OP_T, width, width, m, ActOperand(ActAt(in, j * width)), ld,
           ActOperand(ActAt(d_out, j * width)), ld, {d_weight + j * w2, CUDA_R_32F}, width, 1.f,
           "BlockDiagonalLinearBackward dW");
    }
  }
  void AddInPlace(Act out, Act in, int64_t n) override {
    Launch("AddInPlace",
           [&](auto* t) { return mk::LaunchAddInPlace(As(t, out), As(t, in), n, stream_); });
  }
  double SoftcapCrossEntropyForward(Act logits, const int32_t* targets, float* losses, int64_t rows,
                                    int64_t v, int64_t ld, float cap,
                                    int32_t ignore_token) override {
    if (!ok() || !CheckLd(ld, v, "SoftcapCrossEntropyForward")) return NAN;
    const bool launched = Launch("SoftcapCrossEntropyForward", [&](auto* t) {
      return mk::LaunchSoftcapCrossEntropyForward(As(t, logits), targets, losses, rows, v, ld, cap,
                                                  ignore_token, stream_);
    });
    if (!launched) return NAN;
    double* partials = sum_partials_.as<double>();
    if (!Check(mk::LaunchSum(losses, rows, partials, partials + mk::kSumBlocks, stream_),
               "loss sum")) {
      return NAN;
    }
    return ReadDouble(partials + mk::kSumBlocks);
  }
  void SoftcapArgmax(Act logits, int64_t rows, int64_t v, int64_t ld, float cap, int32_t* tokens,
                     float* logprobs) override {
    if (!ok() || rows <= 0 || !CheckLd(ld, v, "SoftcapArgmax")) return;
    // Both results in one scratch buffer: [rows] int32 then [rows] float, one read-back.
    if (!Check(argmax_scratch_.Ensure(2 * sizeof(float) * rows), "SoftcapArgmax scratch")) return;
    int32_t* d_tokens = argmax_scratch_.as<int32_t>();
    float* d_logprobs = reinterpret_cast<float*>(d_tokens + rows);
    Launch("SoftcapArgmax", [&](auto* t) {
      return mk::LaunchSoftcapArgmax(As(t, logits), rows, v, ld, cap, d_tokens, d_logprobs,
                                     stream_);
    });
    argmax_host_.resize(2 * rows);
    CopyToHost(argmax_host_.data(), d_tokens, sizeof(int32_t) * 2 * rows);
    std::copy_n(argmax_host_.data(), rows, tokens);
    std::memcpy(logprobs, argmax_host_.data() + rows, sizeof(float) * rows);
  }
  void SoftcapSample(Act logits, int64_t rows, int64_t v, int64_t ld, float cap,
                     const SamplingRow* params, int32_t* tokens, float* logprobs) override {
    if (!ok() || rows <= 0 || !CheckLd(ld, v, "SoftcapSample")) return;
    // The rows' settings, then [rows] int32 tokens and [rows] float log-probabilities.
    const size_t settings = sizeof(SamplingRow) * rows;
    if (!Check(sample_scratch_.Ensure(settings + 2 * sizeof(float) * rows),
               "SoftcapSample scratch")) {
      return;
    }
    auto* d_params = sample_scratch_.as<SamplingRow>();
    int32_t* d_tokens = reinterpret_cast<int32_t*>(d_params + rows);
    float* d_logprobs = reinterpret_cast<float*>(d_tokens + rows);
    CopyToDevice(d_params, params, settings);
    Launch("SoftcapSample", [&](auto* t) {
      return mk::LaunchSoftcapSample(As(t, logits), rows, v, ld, cap, d_params, d_tokens,
                                     d_logprobs, stream_);
    });
    argmax_host_.resize(2 * rows);
    CopyToHost(argmax_host_.data(), d_tokens, sizeof(int32_t) * 2 * rows);
    std::copy_n(argmax_host_.data(), rows, tokens);
    std::memcpy(logprobs, argmax_host_.data() + rows, sizeof(float) * rows);
  }
  void SoftcapCrossEntropyBackward(Act logits, const int32_t* targets, const float* losses,
                                   int64_t rows, int64_t v, int64_t ld, float cap,
                                   int32_t ignore_token, float loss_scale) override {
    if (!ok() || !CheckLd(ld, v, "SoftcapCrossEntropyBackward")) return;
    if (losses == nullptr) {
      FailVoid(absl::InvalidArgumentError(
          "SoftcapCrossEntropyBackward: the forward's per-row losses are required"));
      return;
    }
    Launch("SoftcapCrossEntropyBackward", [&](auto* t) {
      return mk::LaunchSoftcapCrossEntropyBackward(As(t, logits), targets, losses, rows, v, ld, cap,
                                                   ignore_token, loss_scale, stream_);
    });
  }

  // ---- Optimizer and reductions.
  double SumOfSquares(const float* x, int64_t n) override {
    if (!ok()) return NAN;
    double* partials = sum_partials_.as<double>();
    ProfileBegin();
    if (!Check(mk::LaunchSumOfSquares(x, n, partials, partials + mk::kSumBlocks, stream_),
               "SumOfSquares")) {
      return NAN;
    }
    ProfileEnd("SumOfSquares");
    return ReadDouble(partials + mk::kSumBlocks);
  }
  void Scale(float* x, int64_t n, float factor) override {
    if (ok()) Check(mk::LaunchScale(x, n, factor, stream_), "Scale");
  }
  void AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                   float beta1, float beta2, float eps, float weight_decay, float bias_correction1,
                   float bias_correction2) override {
    if (!ok()) return;
    ProfileBegin();
    Check(mk::LaunchAdamW(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay,
                          bias_correction1, bias_correction2, stream_),
          "AdamWUpdate");
    ProfileEnd("AdamWUpdate");
  }

 private:
  using Bf16 = __nv_bfloat16;
  // A GEMM operand: device pointer and element type.
  struct Operand {
    void* ptr;
    cudaDataType_t type;
  };

  bool bf16() const { return options_.activations == ActivationType::kBfloat16; }
  template <typename T>
  static T* As(Act a) {
    return static_cast<T*>(a.ptr);
  }
  // The activation pointer typed like the dispatch tag `T*` of Launch.
  template <typename T>
  static T* As(T* /*tag*/, Act a) {
    return static_cast<T*>(a.ptr);
  }
  // Runs launch(T* tag) with T = the activation type and checks the launch error.
  template <typename F>
  bool Launch(const char* what, F&& launch) {
    if (!ok()) return false;
    ProfileBegin();
    const bool launched = Check(
        bf16() ? launch(static_cast<Bf16*>(nullptr)) : launch(static_cast<float*>(nullptr)), what);
    ProfileEnd(what);
    return launched;
  }
  void Memset(void* ptr, size_t bytes, const char* what) {
    ProfileBegin();
    Check(cudaMemsetAsync(ptr, 0, bytes, stream_), what);
    ProfileEnd(what);
  }
  void Memcpy(void* dst, const void* src, size_t bytes, const char* what) {
    ProfileBegin();
    Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), what);
    ProfileEnd(what);
  }
  Operand ActOperand(Act a) const { return {a.ptr, bf16() ? CUDA_R_16BF : CUDA_R_32F}; }
  // The weights as the GEMMs take them: float32 as given, or their bf16 copy (from the
  // CacheWeights buffer when they lie in it, else converted now into a scratch buffer).
  Operand Weight(const float* weight, int64_t count) {
    if (!bf16()) return {const_cast<float*>(weight), CUDA_R_32F};
    if (const void* resident = ResidentWeight(weight, count); resident != nullptr) {
      return {const_cast<void*>(resident), CUDA_R_16BF};
    }
    if (!ok() || !Check(weight_scratch_.Ensure(sizeof(Bf16) * count), "weight scratch")) {
      return {nullptr, CUDA_R_16BF};
    }
    Check(mk::LaunchFromFloat(weight, weight_scratch_.as<Bf16>(), count, stream_), "weight copy");
    return {weight_scratch_.ptr, CUDA_R_16BF};
  }
  // The weights in the GEMMs' type without a conversion: float32 as given, or their bf16 copy
  // in the CacheWeights buffer; null when they lie outside it.
  const void* ResidentWeight(const float* weight, int64_t count) const {
    if (!bf16()) return weight;
    if (cached_params_ != nullptr && weight >= cached_params_ &&
        weight + count <= cached_params_ + cached_count_) {
      return weight_cache_.as<Bf16>() + (weight - cached_params_);
    }
    return nullptr;
  }
  float* Staging(int64_t n) {
    if (!ok() || !Check(staging_.Ensure(sizeof(float) * n), "staging")) {
      return nullptr;
    }
    return staging_.as<float>();
  }

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
  bool CheckConvWidth(int64_t w, const char* what) {
    if (w >= 1 && w <= mk::kMaxConvWidth) return true;
    FailVoid(absl::InvalidArgumentError(
        absl::StrCat(what, ": width ", w, " outside [1, ", mk::kMaxConvWidth, "]")));
    return false;
  }
  bool CheckLd(int64_t ld, int64_t n, const char* what) {
    if (ld >= n) return true;
    FailVoid(
        absl::InvalidArgumentError(absl::StrCat(what, ": row stride ", ld, " below width ", n)));
    return false;
  }
  bool Check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    FailVoid(
        absl::InternalError(absl::StrCat("CUDA error in ", what, ": ", cudaGetErrorString(e))));
    return false;
  }
  bool CheckBlas(cublasStatus_t b, const char* what) {
    if (b == CUBLAS_STATUS_SUCCESS) return true;
    FailVoid(absl::InternalError(
        absl::StrCat("cuBLASLt error in ", what, ": ", cublasGetStatusString(b))));
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
    if (!Check(partials_.Ensure(sizeof(float) * floats), "scratch")) {
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

  // Column-major C[m,n] = alpha op(A) op(B) + beta C, with descriptors and the heuristic's
  // algorithm cached per shape (gemm_plan_cache.h). A and B are both float32 (math per
  // options_.gemm_math) or both bf16 (fp32 accumulation); C is either.
  void Gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, Operand a,
            int64_t lda, Operand b, int64_t ldb, Operand c, int64_t ldc, float beta,
            const char* what) {
    if (!ok() || m == 0 || n == 0) return;
    if (k == 0) {  // empty sum: C = beta C
      if (beta == 0.f) {
        // n columns of m elements, ldc apart (the padding between them is left alone).
        const size_t elem = c.type == CUDA_R_16BF ? 2 : 4;
        Check(cudaMemset2DAsync(c.ptr, elem * ldc, 0, elem * m, n, stream_), what);
      }
      return;
    }
    // bf16 operands: plain fp32 accumulation; fp32 operands: the configured math mode.
    const mk::GemmShape shape{
        .compute = a.type == CUDA_R_16BF ? CUBLAS_COMPUTE_32F : ComputeType(options_.gemm_math),
        .ta = ta,
        .tb = tb,
        .m = m,
        .n = n,
        .k = k,
        .lda = lda,
        .ldb = ldb,
        .ldc = ldc,
        .align_a = mk::GemmAlignment(a.ptr),
        .align_b = mk::GemmAlignment(b.ptr),
        .align_c = mk::GemmAlignment(c.ptr),
        .a_type = a.type,
        .b_type = b.type,
        .c_type = c.type,
    };
    const absl::StatusOr<const mk::GemmPlan*> plan = gemm_plans_->Get(shape, what);
    if (!plan.ok()) {
      FailVoid(plan.status());
      return;
    }
    const mk::GemmPlan& p = **plan;
    const float alpha = 1.f;
    ProfileBegin();
    CheckBlas(cublasLtMatmul(lt_, p.desc, &alpha, a.ptr, p.a, b.ptr, p.b, &beta, c.ptr, p.c, c.ptr,
                             p.c, &p.algo, gemm_ws_, kGemmWorkspaceBytes, stream_),
              what);
    if (profiler_.enabled()) {
      ProfileEnd(absl::StrFormat("%s %dx%dx%d", what, m, n, k));
    }
  }

  CudaBackendOptions options_;
  absl::Status status_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* gemm_ws_ = nullptr;
  std::unique_ptr<mk::GemmPlanCache> gemm_plans_;  // made in Init, once lt_ exists
  Scratch partials_, sum_partials_, embed_scratch_, staging_, argmax_scratch_, sample_scratch_;
  mk::CudaProfiler profiler_;
  // bf16 copy of the parameter buffer given to CacheWeights, and of weights outside it.
  Scratch weight_cache_, weight_scratch_;
  const float* cached_params_ = nullptr;
  int64_t cached_count_ = 0;
  std::vector<int32_t> host_tokens_, counts_, host_embed_, host_seg_start_, host_seg_token_;
  std::vector<cudaGraphExec_t> graphs_;  // Recordings, by index
  std::vector<int32_t> argmax_host_;     // SoftcapArgmax's read-back (tokens, then logprobs)
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  auto backend = std::make_unique<CudaBackend>(options);
  if (absl::Status s = backend->Init(); !s.ok()) return s;
  return std::unique_ptr<Backend>(std::move(backend));
}

absl::StatusOr<int> CudaDeviceForLocalRank(int local_rank) {
  if (local_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("local rank ", local_rank, " is negative"));
  }
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("no usable CUDA device: ", cudaGetErrorString(e)));
  }
  return local_rank % count;
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
