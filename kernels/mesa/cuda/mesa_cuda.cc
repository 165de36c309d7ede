// Host side of the CUDA Mesa operator: chunk tables, scratch, launch sequence, backend seam.
#include "kernels/mesa/cuda/mesa_cuda.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda/device_scratch.h"

namespace mesa::kernels::cuda {

struct Workspace::Impl {
  DeviceChunkTables tables;
  DeviceBuffer hc, gc, dhc, dgc, estar16, r, scale, r_final, steps, scan_scratch, dlambda_parts;
  // Identifies the inputs whose chunk states hc/gc hold (empty: none valid).
  std::vector<uintptr_t> states_tag;

  absl::Status Prepare(const MesaDims& dims, std::span<const int32_t> cu, cudaStream_t stream,
                       KernelProblem* p) {
    (void)stream;
    if (auto s = tables.Fill(dims.batch, dims.seq_len, dims.heads, dims.head_dim, cu, p); !s.ok())
      return s;
    const size_t state_bytes = static_cast<size_t>(p->num_chunks) * dims.heads * p->padded_dim *
                               p->padded_dim * sizeof(__half);
    if (auto s = hc.Ensure(state_bytes); !s.ok()) return s;
    if (auto s = gc.Ensure(state_bytes); !s.ok()) return s;
    if (auto s = steps.Ensure(sizeof(unsigned long long)); !s.ok()) return s;
    if (auto s = scan_scratch.Ensure(StateScanScratchFloats(*p) * sizeof(float)); !s.ok()) return s;
    return absl::OkStatus();
  }
};

Workspace::Workspace() : impl_(std::make_unique<Impl>()) {}

namespace {

std::vector<uintptr_t> StatesTag(const MesaDims& dims, std::span<const int32_t> cu,
                                 const DeviceInputs& in) {
  std::vector<uintptr_t> t = {
      static_cast<uintptr_t>(in.dtype),      static_cast<uintptr_t>(dims.batch),
      static_cast<uintptr_t>(dims.seq_len),  static_cast<uintptr_t>(dims.heads),
      static_cast<uintptr_t>(dims.head_dim), reinterpret_cast<uintptr_t>(in.k),
      reinterpret_cast<uintptr_t>(in.v),     reinterpret_cast<uintptr_t>(in.log_gamma),
      reinterpret_cast<uintptr_t>(in.beta),  reinterpret_cast<uintptr_t>(in.h0),
      reinterpret_cast<uintptr_t>(in.g0)};
  for (int32_t x : cu) t.push_back(static_cast<uintptr_t>(static_cast<uint32_t>(x)));
  return t;
}

}  // namespace
Workspace::~Workspace() = default;

namespace {

absl::Status ReadStepsMean(Workspace::Impl* w, const MesaDims& dims, cudaStream_t stream,
                           double* out) {
  unsigned long long steps = 0;
  MESA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&steps, w->steps.ptr, sizeof(steps), cudaMemcpyDeviceToHost, stream),
      "steps readback");
  MESA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "steps sync");
  const double systems = static_cast<double>(dims.batch) * dims.seq_len * dims.heads;
  *out = systems > 0 ? static_cast<double>(steps) / systems : 0.0;
  return absl::OkStatus();
}

}  // namespace

absl::Status ForwardDevice(const MesaDims& dims, std::span<const int32_t> cu_seqlens,
                           const CgOptions& cg, const DeviceInputs& in,
                           const DeviceForwardOutputs& out, Workspace* ws, cudaStream_t stream) {
  if (ws == nullptr || out.o == nullptr)
    return absl::InvalidArgumentError("ForwardDevice: null workspace or o");
  Workspace::Impl* w = ws->impl();
  KernelProblem p;
  p.dtype = in.dtype;
  w->states_tag.clear();
  if (auto s = w->Prepare(dims, cu_seqlens, stream, &p); !s.ok()) return s;
  StateForwardArgs sa{in.k,
                      in.v,
                      in.log_gamma,
                      in.beta,
                      in.h0,
                      in.g0,
                      w->hc.as<__half>(),
                      w->gc.as<__half>(),
                      out.h_final,
                      out.g_final,
                      nullptr,
                      nullptr,
                      nullptr};
  sa.scratch = w->scan_scratch.as<float>();
  MESA_CUDA_RETURN_IF_ERROR(LaunchStateForward(p, sa, stream), "state forward");
  w->states_tag = StatesTag(dims, cu_seqlens, in);
  MESA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(w->steps.ptr, 0, sizeof(unsigned long long), stream),
                            "memset");
  if (out.token_cg_steps != nullptr) {  // the kernel writes only the tokens it solves
    MESA_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(out.token_cg_steps, 0, sizeof(int32_t) * dims.GateElems(), stream),
        "memset token steps");
  }
  CgForwardArgs ca{in.q,
                   in.k,
                   in.v,
                   in.log_gamma,
                   in.beta,
                   in.lambda,
                   w->hc.as<__half>(),
                   w->gc.as<__half>(),
                   out.q_star,
                   out.o,
                   w->steps.as<unsigned long long>(),
                   out.token_cg_steps,
                   cg.max_steps,
                   cg.tolerance};
  MESA_CUDA_RETURN_IF_ERROR(LaunchCgForward(p, ca, stream), "cg forward");
  if (out.cg_steps_mean != nullptr) return ReadStepsMean(w, dims, stream, out.cg_steps_mean);
  return absl::OkStatus();
}

absl::Status BackwardDevice(const MesaDims& dims, std::span<const int32_t> cu_seqlens,
                            const CgOptions& cg, const DeviceInputs& in,
                            const DeviceBackwardInputs& bwd, const DeviceGradients& grads,
                            Workspace* ws, cudaStream_t stream) {
  if (ws == nullptr || bwd.q_star == nullptr || bwd.d_o == nullptr || grads.dq == nullptr ||
      grads.dk == nullptr || grads.dv == nullptr || grads.dlog_gamma == nullptr ||
      grads.dbeta == nullptr || grads.dlambda == nullptr) {
    return absl::InvalidArgumentError("BackwardDevice: a required pointer is null");
  }
  Workspace::Impl* w = ws->impl();
  KernelProblem p;
  p.dtype = in.dtype;
  if (auto s = w->Prepare(dims, cu_seqlens, stream, &p); !s.ok()) return s;
  const size_t state_bytes = w->hc.bytes;
  const size_t tok_heads = static_cast<size_t>(dims.batch) * dims.seq_len * dims.heads;
  const size_t seq_heads = static_cast<size_t>(p.num_seqs) * dims.heads;
  if (auto s = w->dhc.Ensure(state_bytes); !s.ok()) return s;
  if (auto s = w->dgc.Ensure(state_bytes); !s.ok()) return s;
  if (auto s = w->estar16.Ensure(tok_heads * dims.head_dim * sizeof(__half)); !s.ok()) return s;
  if (auto s = w->r.Ensure(tok_heads * sizeof(float)); !s.ok()) return s;
  if (auto s = w->scale.Ensure(seq_heads * sizeof(float)); !s.ok()) return s;
  if (auto s = w->r_final.Ensure(seq_heads * kRFinalSlots * sizeof(float)); !s.ok()) return s;
  // With CG steps the backward writes dlambda from per-(chunk, warp) parts; without, it is zero.
  const bool solves = cg.max_steps > 0;
  if (solves) {
    if (auto s = w->dlambda_parts.Ensure(CgDlambdaPartialFloats(p) * sizeof(float)); !s.ok()) {
      return s;
    }
  }
  const bool final_grads = bwd.dh_final != nullptr || bwd.dg_final != nullptr;

  // Chunk-start states: those of the matching forward when the caller opts in (see
  // DeviceBackwardInputs::reuse_forward_states), else recomputed (FLA's memory plan).
  const bool reuse = bwd.reuse_forward_states && !final_grads && !w->states_tag.empty() &&
                     w->states_tag == StatesTag(dims, cu_seqlens, in);
  if (!reuse) {
    w->states_tag.clear();
    MESA_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(w->r_final.ptr, 0, seq_heads * kRFinalSlots * sizeof(float), stream),
        "memset");
    StateForwardArgs sa{in.k,
                        in.v,
                        in.log_gamma,
                        in.beta,
                        in.h0,
                        in.g0,
                        w->hc.as<__half>(),
                        w->gc.as<__half>(),
                        nullptr,
                        nullptr,
                        bwd.dh_final,
                        bwd.dg_final,
                        w->r_final.as<float>()};
    sa.scratch = w->scan_scratch.as<float>();
    MESA_CUDA_RETURN_IF_ERROR(LaunchStateForward(p, sa, stream), "state forward (recompute)");
    w->states_tag = StatesTag(dims, cu_seqlens, in);
  }
  MESA_CUDA_RETURN_IF_ERROR(LaunchGradScale(p, bwd.d_o, w->scale.as<float>(), stream),
                            "grad scale");
  if (!solves || p.num_chunks == 0) {  // else the CG backward overwrites every element
    MESA_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(grads.dlambda, 0, dims.heads * dims.head_dim * sizeof(float), stream),
        "memset");
  }
  MESA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(w->steps.ptr, 0, sizeof(unsigned long long), stream),
                            "memset");
  CgBackwardArgs cb{in.q,
                    in.k,
                    in.v,
                    bwd.d_o,
                    bwd.q_star,
                    in.log_gamma,
                    in.beta,
                    in.lambda,
                    w->scale.as<float>(),
                    w->hc.as<__half>(),
                    w->gc.as<__half>(),
                    grads.dq,
                    w->estar16.as<__half>(),
                    grads.dlambda,
                    w->r.as<float>(),
                    w->steps.as<unsigned long long>(),
                    cg.max_steps,
                    cg.tolerance};
  cb.dlambda_partials = solves ? w->dlambda_parts.as<float>() : nullptr;
  MESA_CUDA_RETURN_IF_ERROR(LaunchCgBackward(p, cb, stream), "cg backward");
  StateBackwardArgs sb{bwd.d_o,
                       bwd.q_star,
                       w->estar16.as<__half>(),
                       in.log_gamma,
                       w->scale.as<float>(),
                       bwd.dh_final,
                       bwd.dg_final,
                       w->dhc.as<__half>(),
                       w->dgc.as<__half>(),
                       grads.dh0,
                       grads.dg0};
  sb.scratch = w->scan_scratch.as<float>();
  MESA_CUDA_RETURN_IF_ERROR(LaunchStateBackward(p, sb, stream), "state backward");
  GlaBackwardArgs gb{in.k,
                     in.v,
                     bwd.d_o,
                     bwd.q_star,
                     w->estar16.as<__half>(),
                     in.log_gamma,
                     in.beta,
                     w->scale.as<float>(),
                     w->r.as<float>(),
                     w->dhc.as<__half>(),
                     w->dgc.as<__half>(),
                     grads.dk,
                     grads.dv,
                     grads.dbeta,
                     grads.dlog_gamma};
  MESA_CUDA_RETURN_IF_ERROR(LaunchGlaBackward(p, gb, stream), "gla backward");
  MESA_CUDA_RETURN_IF_ERROR(
      LaunchGateScan(p, grads.dlog_gamma, final_grads ? w->r_final.as<float>() : nullptr, stream),
      "gate scan");
  if (grads.cg_steps_mean != nullptr) return ReadStepsMean(w, dims, stream, grads.cg_steps_mean);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Backend seam: fp32, host or device memory.
namespace {

template <typename T>
T* PtrOrNull(std::span<T> s) {
  return s.empty() ? nullptr : s.data();
}

// Host span -> device copy (or nullptr when empty).
absl::Status Upload(std::span<const float> host, DeviceBuffer* buf, const float** dev) {
  if (host.empty()) {
    *dev = nullptr;
    return absl::OkStatus();
  }
  if (auto s = buf->Ensure(host.size_bytes()); !s.ok()) return s;
  MESA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(buf->ptr, host.data(), host.size_bytes(), cudaMemcpyHostToDevice), "upload");
  *dev = buf->as<float>();
  return absl::OkStatus();
}

template <typename T>
absl::Status Alloc(std::span<T> host, DeviceBuffer* buf, T** dev) {
  if (host.empty()) {
    *dev = nullptr;
    return absl::OkStatus();
  }
  if (auto s = buf->Ensure(host.size_bytes()); !s.ok()) return s;
  *dev = buf->as<T>();
  return absl::OkStatus();
}

template <typename T>
absl::Status Download(T* dev, std::span<T> host) {
  if (host.empty() || dev == nullptr) return absl::OkStatus();
  MESA_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.data(), dev, host.size_bytes(), cudaMemcpyDeviceToHost),
                            "download");
  return absl::OkStatus();
}

struct HostStaging {
  DeviceBuffer q, k, v, lg, beta, lambda, h0, g0;
  DeviceBuffer o, qs, hf, gf, qs_in, d_o, dhf, dgf, token_steps;
  DeviceBuffer dq, dk, dv, dlg, dbeta, dlambda, dh0, dg0;
};

absl::Status UploadInputs(const MesaInputs& in, HostStaging* st, DeviceInputs* d) {
  d->dtype = DType::kF32;
  const float *q, *k, *v;
  if (auto s = Upload(in.q, &st->q, &q); !s.ok()) return s;
  if (auto s = Upload(in.k, &st->k, &k); !s.ok()) return s;
  if (auto s = Upload(in.v, &st->v, &v); !s.ok()) return s;
  d->q = q;
  d->k = k;
  d->v = v;
  if (auto s = Upload(in.log_gamma, &st->lg, &d->log_gamma); !s.ok()) return s;
  if (auto s = Upload(in.beta, &st->beta, &d->beta); !s.ok()) return s;
  if (auto s = Upload(in.lambda, &st->lambda, &d->lambda); !s.ok()) return s;
  if (auto s = Upload(in.h0, &st->h0, &d->h0); !s.ok()) return s;
  if (auto s = Upload(in.g0, &st->g0, &d->g0); !s.ok()) return s;
  return absl::OkStatus();
}

DeviceInputs DeviceView(const MesaInputs& in) {
  DeviceInputs d;
  d.dtype = DType::kF32;
  d.q = PtrOrNull(in.q);
  d.k = PtrOrNull(in.k);
  d.v = PtrOrNull(in.v);
  d.log_gamma = PtrOrNull(in.log_gamma);
  d.beta = PtrOrNull(in.beta);
  d.lambda = PtrOrNull(in.lambda);
  d.h0 = PtrOrNull(in.h0);
  d.g0 = PtrOrNull(in.g0);
  return d;
}

Workspace& SeamWorkspace() {
  static thread_local Workspace ws;
  return ws;
}

}  // namespace

absl::Status DeviceAvailable() { return ::mesa::kernels::cuda::CudaDeviceAvailable(); }

absl::Status Forward(const MesaInputs& in, const MesaOptions& options, MesaForwardOutputs* out) {
  Workspace& ws = SeamWorkspace();
  double steps = 0.0;
  if (options.memory == MemorySpace::kDevice) {
    DeviceForwardOutputs d{PtrOrNull(out->o),
                           PtrOrNull(out->q_star),
                           PtrOrNull(out->h_final),
                           PtrOrNull(out->g_final),
                           &steps,
                           PtrOrNull(out->token_cg_steps)};
    if (auto s = ForwardDevice(in.dims, in.cu_seqlens, options.cg, DeviceView(in), d, &ws, nullptr);
        !s.ok())
      return s;
    out->cg_steps_mean = steps;
    return absl::OkStatus();
  }
  HostStaging st;
  DeviceInputs din;
  if (auto s = UploadInputs(in, &st, &din); !s.ok()) return s;
  DeviceForwardOutputs d;
  float *o, *qs, *hf, *gf;
  if (auto s = Alloc(out->o, &st.o, &o); !s.ok()) return s;
  if (auto s = Alloc(out->q_star, &st.qs, &qs); !s.ok()) return s;
  if (auto s = Alloc(out->h_final, &st.hf, &hf); !s.ok()) return s;
  if (auto s = Alloc(out->g_final, &st.gf, &gf); !s.ok()) return s;
  int32_t* token_steps;
  if (auto s = Alloc(out->token_cg_steps, &st.token_steps, &token_steps); !s.ok()) return s;
  d = {o, qs, hf, gf, &steps, token_steps};
  if (auto s = ForwardDevice(in.dims, in.cu_seqlens, options.cg, din, d, &ws, nullptr); !s.ok())
    return s;
  if (auto s = Download(o, out->o); !s.ok()) return s;
  if (auto s = Download(qs, out->q_star); !s.ok()) return s;
  if (auto s = Download(hf, out->h_final); !s.ok()) return s;
  if (auto s = Download(gf, out->g_final); !s.ok()) return s;
  if (auto s = Download(token_steps, out->token_cg_steps); !s.ok()) return s;
  out->cg_steps_mean = steps;
  return absl::OkStatus();
}

absl::Status Backward(const MesaInputs& in, const MesaBackwardInputs& bwd,
                      const MesaOptions& options, MesaGradients* grads) {
  Workspace& ws = SeamWorkspace();
  double steps = 0.0;
  if (options.memory == MemorySpace::kDevice) {
    DeviceBackwardInputs db{PtrOrNull(bwd.q_star), PtrOrNull(bwd.d_o), PtrOrNull(bwd.dh_final),
                            PtrOrNull(bwd.dg_final)};
    DeviceGradients dg{
        PtrOrNull(grads->dq),         PtrOrNull(grads->dk),    PtrOrNull(grads->dv),
        PtrOrNull(grads->dlog_gamma), PtrOrNull(grads->dbeta), PtrOrNull(grads->dlambda),
        PtrOrNull(grads->dh0),        PtrOrNull(grads->dg0),   &steps};
    if (auto s = BackwardDevice(in.dims, in.cu_seqlens, options.cg, DeviceView(in), db, dg, &ws,
                                nullptr);
        !s.ok()) {
      return s;
    }
    grads->cg_steps_mean = steps;
    return absl::OkStatus();
  }
  HostStaging st;
  DeviceInputs din;
  if (auto s = UploadInputs(in, &st, &din); !s.ok()) return s;
  DeviceBackwardInputs db;
  if (auto s = Upload(bwd.q_star, &st.qs_in, &db.q_star); !s.ok()) return s;
  const float* d_o;
  if (auto s = Upload(bwd.d_o, &st.d_o, &d_o); !s.ok()) return s;
  db.d_o = d_o;
  if (auto s = Upload(bwd.dh_final, &st.dhf, &db.dh_final); !s.ok()) return s;
  if (auto s = Upload(bwd.dg_final, &st.dgf, &db.dg_final); !s.ok()) return s;
  float *dq, *dk, *dv, *dlg, *dbeta, *dlambda, *dh0, *dg0;
  if (auto s = Alloc(grads->dq, &st.dq, &dq); !s.ok()) return s;
  if (auto s = Alloc(grads->dk, &st.dk, &dk); !s.ok()) return s;
  if (auto s = Alloc(grads->dv, &st.dv, &dv); !s.ok()) return s;
  if (auto s = Alloc(grads->dlog_gamma, &st.dlg, &dlg); !s.ok()) return s;
  if (auto s = Alloc(grads->dbeta, &st.dbeta, &dbeta); !s.ok()) return s;
  if (auto s = Alloc(grads->dlambda, &st.dlambda, &dlambda); !s.ok()) return s;
  if (auto s = Alloc(grads->dh0, &st.dh0, &dh0); !s.ok()) return s;
  if (auto s = Alloc(grads->dg0, &st.dg0, &dg0); !s.ok()) return s;
  DeviceGradients dg{dq, dk, dv, dlg, dbeta, dlambda, dh0, dg0, &steps};
  if (auto s = BackwardDevice(in.dims, in.cu_seqlens, options.cg, din, db, dg, &ws, nullptr);
      !s.ok())
    return s;
  for (auto [dev, host] : {std::pair{dq, grads->dq},
                           {dk, grads->dk},
                           {dv, grads->dv},
                           {dlg, grads->dlog_gamma},
                           {dbeta, grads->dbeta},
                           {dlambda, grads->dlambda},
                           {dh0, grads->dh0},
                           {dg0, grads->dg0}}) {
    if (auto s = Download(dev, host); !s.ok()) return s;
  }
  grads->cg_steps_mean = steps;
  return absl::OkStatus();
}

// Dense per-chunk counts (C = 64, D = head dim); MACs x 2. See NOTES.md.
namespace {
double Chunks(const MesaDims& d) {
  return static_cast<double>(d.batch) * d.heads * ((d.seq_len + kChunk - 1) / kChunk);
}
double Iter(const MesaDims& d) {
  const double C = kChunk, D = static_cast<double>(d.head_dim);
  return 2.0 * (C * D * D + 2.0 * C * C * D);
}
}  // namespace

double ForwardFlops(const MesaDims& dims, int cg_steps) {
  const double C = kChunk, D = static_cast<double>(dims.head_dim);
  return Chunks(dims) * (2.0 * 2.0 * C * D * D + (cg_steps + 1) * Iter(dims));
}

double BackwardFlops(const MesaDims& dims, int cg_steps) {
  const double C = kChunk, D = static_cast<double>(dims.head_dim);
  const double states = 2.0 * 2.0 * 2.0 * C * D * D;             // recompute + reverse scan
  const double gla = 2.0 * (6.0 * C * C * D + 4.0 * C * D * D);  // GLA backward
  return Chunks(dims) * (states + (cg_steps + 1) * Iter(dims) + gla);
}

}  // namespace mesa::kernels::cuda
