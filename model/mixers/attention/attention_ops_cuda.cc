// The attention operator on the CUDA backend: kernels/attention/cuda's device API on the backend's
// stream (bf16 or fp32 activations as the backend keeps them), the rotary embedding and the KV
// cache append of attention_cache_kernels.cu. Each layer's instance keeps the forward's lse for
// its backward and its own backward workspace.
#include <cuda_runtime.h>

#include <memory>
#include <span>

#include "absl/strings/str_cat.h"
#include "kernels/attention/cuda/attention_cuda.h"
#include "kernels/common/cuda/device_scratch.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/mixers/attention/attention_cache_kernels.h"
#include "model/mixers/attention/attention_ops.h"
#include "model/mixers/mixer_ops.h"

namespace mesa::model {
namespace {

namespace kac = ::mesa::kernels::attention::cuda;
namespace kc = ::mesa::kernels::cuda;

class CudaAttentionOps final : public AttentionOps {
 public:
  CudaAttentionOps(CudaBackendControl& control, bool bf16) : control_(control), bf16_(bf16) {}

  absl::Status Rotary(Act x, const AttnShape& s, std::span<const int64_t> starts,
                      bool inverse) override {
    if (absl::Status st = control_.status(); !st.ok()) return st;
    const int64_t* starts_dev = nullptr;
    if (!starts.empty()) {
      absl::StatusOr<const int64_t*> up = Upload(starts_, starts);
      if (!up.ok()) return control_.RecordError(up.status());
      starts_dev = *up;
    }
    control_.ProfileBegin();
    const int e = attention_cuda::LaunchRotary(x.ptr, bf16_, s.batch, s.seq_len, s.heads,
                                               s.head_dim, starts_dev, inverse, control_.stream());
    if (absl::Status st = kc::CudaStatus(static_cast<cudaError_t>(e), "rotary"); !st.ok()) {
      return control_.RecordError(st);
    }
    control_.ProfileEnd("AttentionRotary");
    return absl::OkStatus();
  }

  absl::Status Forward(const AttnActs& in, Act o) override {
    if (absl::Status s = Check(in); !s.ok()) return s;
    const int64_t rows = in.shape.batch * in.shape.seq_len * in.shape.heads;
    if (absl::Status s = lse_.Ensure(sizeof(float) * rows); !s.ok()) {
      return control_.RecordError(s);
    }
    control_.ProfileBegin();
    if (absl::Status s = kac::ForwardDevice(Problem(in), {in.q.ptr, in.k.ptr, in.v.ptr}, o.ptr,
                                            lse_.as<float>(), Stream());
        !s.ok()) {
      return control_.RecordError(s);
    }
    control_.ProfileEnd("AttentionForward");
    return absl::OkStatus();
  }

  absl::Status Backward(const AttnActs& in, Act o, Act d_o, Act dq, Act dk, Act dv) override {
    if (absl::Status s = Check(in); !s.ok()) return s;
    control_.ProfileBegin();
    if (absl::Status s = kac::BackwardDevice(Problem(in), {in.q.ptr, in.k.ptr, in.v.ptr}, o.ptr,
                                             lse_.as<float>(), d_o.ptr, dq.ptr, dk.ptr, dv.ptr,
                                             &workspace_, Stream());
        !s.ok()) {
      return control_.RecordError(s);
    }
    control_.ProfileEnd("AttentionBackward");
    return absl::OkStatus();
  }

  absl::Status ForwardCached(const AttnActs& in, const KvCacheView& cache, int first_row,
                             Act o) override {
    if (absl::Status s = Check(in); !s.ok()) return s;
    const int64_t b = in.shape.batch, t = in.shape.seq_len, hd = in.shape.heads * in.shape.head_dim;
    const size_t bytes = bf16_ ? 2 : 4;
    absl::StatusOr<const int64_t*> lengths = Upload(lengths_, cache.lengths.subspan(first_row, b));
    if (!lengths.ok()) return control_.RecordError(lengths.status());
    if (absl::Status s = valid_.Ensure(sizeof(int32_t) * b); !s.ok())
      return control_.RecordError(s);
    if (t > 1) {  // contiguous [B, H, D] copies of one token's queries and outputs
      if (absl::Status s = token_.Ensure(2 * bytes * b * hd); !s.ok()) {
        return control_.RecordError(s);
      }
    }
    char* k_rows = static_cast<char*>(cache.k.ptr) + first_row * cache.capacity * hd * bytes;
    char* v_rows = static_cast<char*>(cache.v.ptr) + first_row * cache.capacity * hd * bytes;
    control_.ProfileBegin();
    for (int64_t j = 0; j < t; ++j) {
      const int e = attention_cuda::LaunchAppendKv(in.k.ptr, in.v.ptr, bf16_, b, t, hd, j, k_rows,
                                                   v_rows, cache.capacity, *lengths,
                                                   valid_.as<int32_t>(), control_.stream());
      if (absl::Status s = kc::CudaStatus(static_cast<cudaError_t>(e), "KV append"); !s.ok()) {
        return control_.RecordError(s);
      }
      const void* q = in.q.ptr;
      void* out = o.ptr;
      char* q_token = token_.as<char>();
      char* o_token = q_token + bytes * b * hd;
      if (t > 1) {
        MESA_CUDA_RETURN_IF_ERROR(
            cudaMemcpy2DAsync(q_token, hd * bytes,
                              static_cast<const char*>(in.q.ptr) + j * hd * bytes, t * hd * bytes,
                              hd * bytes, b, cudaMemcpyDeviceToDevice, Stream()),
            "query gather");
        q = q_token;
        out = o_token;
      }
      kac::DeviceDecode d{.batch = b,
                          .heads = in.shape.heads,
                          .head_dim = in.shape.head_dim,
                          .capacity = cache.capacity,
                          .dtype = DType(),
                          .q = q,
                          .k_cache = k_rows,
                          .v_cache = v_rows,
                          .lengths = valid_.as<int32_t>(),
                          .o = out};
      if (absl::Status s = kac::DecodeDevice(d, Stream()); !s.ok()) return control_.RecordError(s);
      if (t > 1) {
        MESA_CUDA_RETURN_IF_ERROR(
            cudaMemcpy2DAsync(static_cast<char*>(o.ptr) + j * hd * bytes, t * hd * bytes, o_token,
                              hd * bytes, hd * bytes, b, cudaMemcpyDeviceToDevice, Stream()),
            "output scatter");
      }
    }
    control_.ProfileEnd("AttentionDecode");
    return absl::OkStatus();
  }

 private:
  cudaStream_t Stream() const { return static_cast<cudaStream_t>(control_.stream()); }
  kc::DType DType() const { return bf16_ ? kc::DType::kBF16 : kc::DType::kF32; }
  kac::DeviceProblem Problem(const AttnActs& in) const {
    return {.dims = {in.shape.batch, in.shape.seq_len, in.shape.heads, in.shape.head_dim},
            .window = in.window,
            .dtype = DType(),
            .doc_start = in.doc_start,
            .deterministic = control_.options().deterministic};
  }
  // The backend's sticky error first (its earlier failures make every later call a no-op).
  absl::Status Check(const AttnActs& in) const {
    if (absl::Status s = control_.status(); !s.ok()) return s;
    if (absl::Status s = kac::CheckDeviceProblem(Problem(in)); !s.ok()) return s;
    if (!in.q || !in.k || !in.v) {
      return absl::InvalidArgumentError("attention operator: a required input pointer is null");
    }
    return absl::OkStatus();
  }
  // Host values to `buffer` on the device, in stream order.
  absl::StatusOr<const int64_t*> Upload(kc::DeviceBuffer& buffer, std::span<const int64_t> host) {
    if (absl::Status s = buffer.Ensure(sizeof(int64_t) * host.size()); !s.ok()) return s;
    MESA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(buffer.ptr, host.data(), sizeof(int64_t) * host.size(),
                        cudaMemcpyHostToDevice, Stream()),
        "position upload");
    return buffer.as<const int64_t>();
  }

  CudaBackendControl& control_;
  const bool bf16_;
  kc::DeviceBuffer lse_, starts_, lengths_, valid_, token_;
  kac::Workspace workspace_;
};

const bool kRegistered = RegisterOps<AttentionOps>("cuda", [](Backend& backend) {
  CudaBackendControl* control = GetCudaControl(&backend);
  if (control == nullptr) return std::unique_ptr<AttentionOps>();
  return std::unique_ptr<AttentionOps>(std::make_unique<CudaAttentionOps>(
      *control, backend.activation_type() == ActivationType::kBfloat16));
});

}  // namespace
}  // namespace mesa::model
