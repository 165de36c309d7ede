// Host side of the CUDA DeltaNet-family operator: scratch, launch sequence, host-memory seam.
#include "kernels/deltanet/cuda/deltanet_cuda.h"

#include <cuda_bf16.h>

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/cuda/device_scratch.h"
#include "kernels/deltanet/cuda/deltanet_kernels.h"

namespace mesa::kernels::deltanet::cuda {

using ::mesa::kernels::cuda::DeviceBuffer;
using ::mesa::kernels::cuda::DeviceChunkTables;
using ::mesa::kernels::cuda::kChunk;
using ::mesa::kernels::cuda::PaddedDim;

struct Workspace::Impl {
  DeviceChunkTables tables;
  DeviceBuffer a, p, w, u, x, dx, s_chunk, ds_chunk;
  // Identifies the inputs whose forward quantities a, p, w, u, x, s_chunk hold (empty: none).
  std::vector<uintptr_t> forward_tag;

  absl::Status Prepare(const DeltaDims& dims, std::span<const int32_t> cu, DType dtype,
                       bool backward, KernelProblem* kp) {
    if (auto s = tables.Fill(dims.batch, dims.seq_len, dims.heads, dims.head_dim, cu, kp); !s.ok())
      return s;
    kp->dtype = dtype;
    const size_t dp = kp->padded_dim;
    const size_t tok = static_cast<size_t>(dims.batch) * dims.seq_len * dims.heads * dp * 2;
    const size_t blocks = static_cast<size_t>(kp->num_chunks) * dims.heads * kChunk * kChunk * 2;
    const size_t states = static_cast<size_t>(kp->num_chunks) * dims.heads * dp * dp * 2;
    for (auto [buf, bytes] : {std::pair{&a, blocks}, {&p, blocks}, {&w, tok}, {&u, tok}}) {
      if (auto s = buf->Ensure(bytes); !s.ok()) return s;
    }
    if (backward) {
      for (auto [buf, bytes] :
           {std::pair{&x, tok}, {&dx, tok}, {&s_chunk, states}, {&ds_chunk, states}}) {
        if (auto s = buf->Ensure(bytes); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }
};

Workspace::Workspace() : impl_(std::make_unique<Impl>()) {}
Workspace::~Workspace() = default;

absl::Status CheckDeviceDims(const DeltaDims& dims) {
  if (dims.batch < 1 || dims.seq_len < 1 || dims.heads < 1)
    return absl::InvalidArgumentError("DeltaNet CUDA: B, T and H must be >= 1");
  if (dims.head_dim < 16 || dims.head_dim > 128 || dims.head_dim % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeltaNet CUDA: head_dim must be a multiple of 16 in [16, 128], got ", dims.head_dim));
  }
  if (dims.batch * dims.seq_len * dims.heads * dims.head_dim >= (int64_t{1} << 31))
    return absl::InvalidArgumentError("DeltaNet CUDA: more than 2^31 elements per tensor");
  return absl::OkStatus();
}

namespace {

using bf16 = __nv_bfloat16;

std::vector<uintptr_t> ForwardTag(const DeltaDims& dims, std::span<const int32_t> cu,
                                  const DeviceInputs& in) {
  std::vector<uintptr_t> t = {
      static_cast<uintptr_t>(in.dtype),      static_cast<uintptr_t>(dims.batch),
      static_cast<uintptr_t>(dims.seq_len),  static_cast<uintptr_t>(dims.heads),
      static_cast<uintptr_t>(dims.head_dim), reinterpret_cast<uintptr_t>(in.q),
      reinterpret_cast<uintptr_t>(in.k),     reinterpret_cast<uintptr_t>(in.v),
      reinterpret_cast<uintptr_t>(in.beta),  reinterpret_cast<uintptr_t>(in.log_gamma),
      reinterpret_cast<uintptr_t>(in.s0)};
  for (int32_t x : cu) t.push_back(static_cast<uintptr_t>(static_cast<uint32_t>(x)));
  return t;
}

absl::Status RunForwardPasses(const KernelProblem& p, Workspace::Impl* w, const DeviceInputs& in,
                              void* o, float* s_final, bool for_backward, cudaStream_t stream) {
  PrepareArgs pa{in.q,
                 in.k,
                 in.v,
                 in.beta,
                 in.log_gamma,
                 w->a.as<bf16>(),
                 w->p.as<bf16>(),
                 w->w.as<bf16>(),
                 w->u.as<bf16>()};
  MESA_CUDA_RETURN_IF_ERROR(LaunchPrepare(p, pa, stream), "deltanet prepare");
  StateForwardArgs sa{in.q,
                      in.k,
                      in.log_gamma,
                      in.beta,
                      in.s0,
                      w->p.as<bf16>(),
                      w->w.as<bf16>(),
                      w->u.as<bf16>(),
                      o,
                      s_final,
                      for_backward ? w->x.as<bf16>() : nullptr,
                      for_backward ? w->s_chunk.as<bf16>() : nullptr};
  MESA_CUDA_RETURN_IF_ERROR(LaunchStateForward(p, sa, stream), "deltanet state forward");
  return absl::OkStatus();
}

}  // namespace

absl::Status ForwardDevice(const DeltaDims& dims, std::span<const int32_t> cu_seqlens,
                           const DeviceInputs& in, const DeviceForwardOutputs& out, Workspace* ws,
                           cudaStream_t stream) {
  if (auto s = CheckDeviceDims(dims); !s.ok()) return s;
  if (ws == nullptr || out.o == nullptr || in.q == nullptr || in.k == nullptr || in.v == nullptr ||
      in.beta == nullptr) {
    return absl::InvalidArgumentError("DeltaNet ForwardDevice: a required pointer is null");
  }
  KernelProblem p;
  Workspace::Impl* w = ws->impl();
  w->forward_tag.clear();
  if (auto s = w->Prepare(dims, cu_seqlens, in.dtype, out.keep_for_backward, &p); !s.ok()) return s;
  if (auto s = RunForwardPasses(p, w, in, out.o, out.s_final, out.keep_for_backward, stream);
      !s.ok())
    return s;
  if (out.keep_for_backward) w->forward_tag = ForwardTag(dims, cu_seqlens, in);
  return absl::OkStatus();
}

absl::Status BackwardDevice(const DeltaDims& dims, std::span<const int32_t> cu_seqlens,
                            const DeviceInputs& in, const DeviceBackwardInputs& bwd,
                            const DeviceGradients& grads, Workspace* ws, cudaStream_t stream) {
  if (auto s = CheckDeviceDims(dims); !s.ok()) return s;
  if (ws == nullptr || bwd.d_o == nullptr || grads.dq == nullptr || grads.dk == nullptr ||
      grads.dv == nullptr || grads.dbeta == nullptr ||
      (in.log_gamma != nullptr) != (grads.dlog_gamma != nullptr)) {
    return absl::InvalidArgumentError(
        "DeltaNet BackwardDevice: a required pointer is null (dlog_gamma is required exactly "
        "when log_gamma is given)");
  }
  KernelProblem p;
  Workspace::Impl* w = ws->impl();
  if (auto s = w->Prepare(dims, cu_seqlens, in.dtype, true, &p); !s.ok()) return s;
  const bool reuse = bwd.reuse_forward && !w->forward_tag.empty() &&
                     w->forward_tag == ForwardTag(dims, cu_seqlens, in);
  if (!reuse) {
    w->forward_tag.clear();
    if (auto s = RunForwardPasses(p, w, in, nullptr, nullptr, true, stream); !s.ok()) return s;
  }
  StateBackwardArgs sb{in.q,
                       in.k,
                       bwd.d_o,
                       in.log_gamma,
                       in.beta,
                       bwd.ds_final,
                       w->p.as<bf16>(),
                       w->w.as<bf16>(),
                       w->dx.as<bf16>(),
                       w->ds_chunk.as<bf16>(),
                       grads.ds0};
  MESA_CUDA_RETURN_IF_ERROR(LaunchStateBackward(p, sb, stream), "deltanet state backward");
  ChunkBackwardArgs cb{in.q,
                       in.k,
                       in.v,
                       bwd.d_o,
                       in.beta,
                       in.log_gamma,
                       w->a.as<bf16>(),
                       w->p.as<bf16>(),
                       w->x.as<bf16>(),
                       w->dx.as<bf16>(),
                       w->s_chunk.as<bf16>(),
                       w->ds_chunk.as<bf16>(),
                       grads.dq,
                       grads.dk,
                       grads.dv,
                       grads.dbeta,
                       grads.dlog_gamma};
  MESA_CUDA_RETURN_IF_ERROR(LaunchChunkBackward(p, cb, stream), "deltanet chunk backward");
  // Empty sequences have no chunk: their ds0 is ds_final (written by the state backward, which
  // runs one CTA per sequence whatever its length).
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Host-memory seam (fp32).
namespace {

struct Staged {
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  absl::StatusOr<float*> Up(std::span<const float> host) {
    if (host.empty()) return nullptr;
    auto b = std::make_unique<DeviceBuffer>();
    if (auto s = b->Ensure(host.size_bytes()); !s.ok()) return s;
    MESA_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(b->ptr, host.data(), host.size_bytes(), cudaMemcpyHostToDevice), "upload");
    bufs.push_back(std::move(b));
    return bufs.back()->as<float>();
  }
  absl::StatusOr<float*> Out(std::span<float> host) {
    if (host.empty()) return nullptr;
    auto b = std::make_unique<DeviceBuffer>();
    if (auto s = b->Ensure(host.size_bytes()); !s.ok()) return s;
    // Poisoned (all bits set: NaN), so that an element the kernels miss cannot pass a check.
    MESA_CUDA_RETURN_IF_ERROR(cudaMemset(b->ptr, 0xFF, host.size_bytes()), "poison");
    bufs.push_back(std::move(b));
    return bufs.back()->as<float>();
  }
};

absl::Status Down(const float* dev, std::span<float> host) {
  if (dev == nullptr || host.empty()) return absl::OkStatus();
  MESA_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.data(), dev, host.size_bytes(), cudaMemcpyDeviceToHost),
                            "download");
  return absl::OkStatus();
}

#define DN_ASSIGN(lhs, expr)          \
  do {                                \
    auto _r = (expr);                 \
    if (!_r.ok()) return _r.status(); \
    lhs = *_r;                        \
  } while (0)

absl::Status UploadInputs(const DeltaInputs& in, Staged* st, DeviceInputs* d) {
  d->dtype = DType::kF32;
  float* ptr;
  DN_ASSIGN(ptr, st->Up(in.q));
  d->q = ptr;
  DN_ASSIGN(ptr, st->Up(in.k));
  d->k = ptr;
  DN_ASSIGN(ptr, st->Up(in.v));
  d->v = ptr;
  DN_ASSIGN(ptr, st->Up(in.beta));
  d->beta = ptr;
  DN_ASSIGN(ptr, st->Up(in.log_gamma));
  d->log_gamma = ptr;
  DN_ASSIGN(ptr, st->Up(in.s0));
  d->s0 = ptr;
  return absl::OkStatus();
}

Workspace& SeamWorkspace() {
  static thread_local Workspace ws;
  return ws;
}

}  // namespace

absl::Status DeviceAvailable() { return ::mesa::kernels::cuda::CudaDeviceAvailable(); }

absl::Status Forward(const DeltaInputs& in, DeltaForwardOutputs* out) {
  Staged st;
  DeviceInputs d;
  if (auto s = UploadInputs(in, &st, &d); !s.ok()) return s;
  float *o, *sf;
  DN_ASSIGN(o, st.Out(out->o));
  DN_ASSIGN(sf, st.Out(out->s_final));
  if (auto s = ForwardDevice(in.dims, in.cu_seqlens, d, {o, sf}, &SeamWorkspace(), nullptr);
      !s.ok())
    return s;
  if (auto s = Down(o, out->o); !s.ok()) return s;
  return Down(sf, out->s_final);
}

absl::Status Backward(const DeltaInputs& in, const DeltaBackwardInputs& bwd,
                      DeltaGradients* grads) {
  Staged st;
  DeviceInputs d;
  if (auto s = UploadInputs(in, &st, &d); !s.ok()) return s;
  DeviceBackwardInputs db;
  float* ptr;
  DN_ASSIGN(ptr, st.Up(bwd.d_o));
  db.d_o = ptr;
  DN_ASSIGN(ptr, st.Up(bwd.ds_final));
  db.ds_final = ptr;
  float *dq, *dk, *dv, *dbeta, *dlg, *ds0;
  DN_ASSIGN(dq, st.Out(grads->dq));
  DN_ASSIGN(dk, st.Out(grads->dk));
  DN_ASSIGN(dv, st.Out(grads->dv));
  DN_ASSIGN(dbeta, st.Out(grads->dbeta));
  DN_ASSIGN(dlg, st.Out(grads->dlog_gamma));
  DN_ASSIGN(ds0, st.Out(grads->ds0));
  DeviceGradients dg{dq, dk, dv, dbeta, dlg, ds0};
  if (auto s = BackwardDevice(in.dims, in.cu_seqlens, d, db, dg, &SeamWorkspace(), nullptr);
      !s.ok())
    return s;
  for (auto [dev, host] : {std::pair{dq, grads->dq},
                           {dk, grads->dk},
                           {dv, grads->dv},
                           {dbeta, grads->dbeta},
                           {dlg, grads->dlog_gamma},
                           {ds0, grads->ds0}}) {
    if (auto s = Down(dev, host); !s.ok()) return s;
  }
  return absl::OkStatus();
}

double ForwardFlops(const DeltaDims& dims) {
  const double c = kChunk, d = PaddedDim(dims.head_dim);
  const double chunk_heads =
      static_cast<double>(dims.batch) * ((dims.seq_len + kChunk - 1) / kChunk) * dims.heads;
  return 2.0 * chunk_heads * (5 * c * c * d + 3 * c * d * d);
}

double BackwardFlops(const DeltaDims& dims) {
  const double c = kChunk, d = PaddedDim(dims.head_dim);
  const double chunk_heads =
      static_cast<double>(dims.batch) * ((dims.seq_len + kChunk - 1) / kChunk) * dims.heads;
  return 2.0 * chunk_heads * (13 * c * c * d + 8 * c * d * d);
}

}  // namespace mesa::kernels::deltanet::cuda
