// The mLSTM on the GPU: its gate kernel (ĩ, log f = logsigmoid(f̃), the stabiliser's recursion
// within each chunk) and its finishing kernel (∂ĩ, ∂f̃ = ∂log f · σ(−f̃)) around the gated scan
// (kernels/common/cuda/gated_scan.h) with the normalised readout.
#include "kernels/mlstm/cuda/mlstm_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/common/cuda/gated_scan.cuh"
#include "kernels/common/cuda/gated_scan.h"

namespace mesa::kernels::mlstm::cuda {
namespace {

namespace gs = ::mesa::kernels::cuda::gated_scan;

struct GateArgs {
  int B, T, H, chunks;
  const void *i, *f;
  const int32_t* doc_start;
  bool at_row_start;
  gs::Buffers buf;
};

// One thread per (row, head, chunk): the scan's per-token gates and the chunk's summary.
template <typename T>
__global__ void GatesKernel(GateArgs a) {
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= int64_t(a.B) * a.H * a.chunks) return;
  const int c = idx % a.chunks, bh = idx / a.chunks, h = bh % a.H, b = bh / a.H;
  const int t0 = c * gs::kChunk, n = min(a.T - t0, gs::kChunk);
  const T* ig = static_cast<const T*>(a.i);
  const T* fg = static_cast<const T*>(a.f);
  float cum = 0.f, m = -INFINITY;
  int last = -1;
  for (int r = 0; r < n; ++r) {
    const int t = t0 + r;
    const int64_t bt = int64_t(b) * a.T + t, g = int64_t(bh) * a.T + t;
    const float i_pre = gs::ToF(ig[bt * a.H + h]);
    if (gs::Restarts(a.doc_start, a.at_row_start, a.T, b, t)) {
      last = r;
      cum = 0.f;
      m = i_pre;
    } else {
      const float lf = gs::LogSigmoid(gs::ToF(fg[bt * a.H + h]));
      cum += lf;
      m = fmaxf(lf + m, i_pre);
    }
    a.buf.lw[g] = i_pre;
    a.buf.bc[g] = cum;
    a.buf.ml[g] = m;
    if (h == 0) a.buf.lr[bt] = last;
  }
  a.buf.bend[idx] = last >= 0 ? -INFINITY : cum;
  a.buf.mlend[idx] = m;
}

// ∂ĩ and ∂f̃ per token, [B,T,H] in the activation type.
template <typename T>
__global__ void FinishKernel(GateArgs a, void* di_out, void* df_out) {
  const int64_t tok = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (tok >= int64_t(a.B) * a.T * a.H) return;
  const int h = tok % a.H;
  const int64_t bt = tok / a.H, b = bt / a.T, t = bt % a.T;
  const int64_t g = (b * a.H + h) * a.T + t;
  const T* fg = static_cast<const T*>(a.f);
  static_cast<T*>(di_out)[tok] = gs::FromF<T>(a.buf.dig[g]);
  static_cast<T*>(df_out)[tok] = gs::FromF<T>(a.buf.dlf[g] * gs::Sigmoid(-gs::ToF(fg[tok])));
}

gs::Problem ScanProblem(const DeviceProblem& p) {
  return {.batch = p.batch,
          .seq_len = p.seq_len,
          .heads = p.heads,
          .key_dim = p.key_dim,
          .value_dim = p.value_dim,
          .bf16 = p.bf16,
          .q = p.q,
          .k = p.k,
          .v = p.v,
          .k_scale = p.k_scale,
          .eps = p.eps,
          .readout = gs::Readout::kNormalised,
          .c0 = p.c0,
          .n0 = p.n0,
          .m0 = p.m0,
          .doc_start = p.doc_start,
          .restart_at_row_start = p.restart_at_row_start};
}

GateArgs MakeGateArgs(const DeviceProblem& p, const gs::Buffers& buf) {
  return {int(p.batch), int(p.seq_len),         int(p.heads), int(p.Chunks()), p.i, p.f,
          p.doc_start,  p.restart_at_row_start, buf};
}

int LaunchGates(const DeviceProblem& p, const GateArgs& a, cudaStream_t s) {
  const int64_t tasks = p.batch * p.heads * p.Chunks();
  const dim3 grid(unsigned((tasks + 127) / 128));
  if (p.bf16) {
    GatesKernel<__nv_bfloat16><<<grid, 128, 0, s>>>(a);
  } else {
    GatesKernel<float><<<grid, 128, 0, s>>>(a);
  }
  return int(cudaGetLastError());
}

}  // namespace

bool Supported(const DeviceProblem& p) { return gs::Supported(ScanProblem(p)); }

size_t WorkspaceBytes(const DeviceProblem& p) { return gs::WorkspaceBytes(ScanProblem(p)); }

int MlstmForwardDevice(const DeviceProblem& p, void* h, float* c_final, float* n_final,
                       float* m_final, void* workspace, void* stream) {
  if (!Supported(p)) return int(cudaErrorInvalidValue);
  const gs::Problem sp = ScanProblem(p);
  const gs::Buffers buf = gs::Carve(sp, workspace);
  if (int e = LaunchGates(p, MakeGateArgs(p, buf), static_cast<cudaStream_t>(stream)); e != 0) {
    return e;
  }
  return gs::Forward(sp, buf, h, c_final, n_final, m_final, stream);
}

int MlstmBackwardDevice(const DeviceProblem& p, const void* dh, const float* dc_final,
                        const float* dn_final, void* dq, void* dk, void* dv, void* di, void* df,
                        float* dc0, float* dn0, void* workspace, bool states_valid, void* stream) {
  if (!Supported(p)) return int(cudaErrorInvalidValue);
  const gs::Problem sp = ScanProblem(p);
  const gs::Buffers buf = gs::Carve(sp, workspace);
  const GateArgs a = MakeGateArgs(p, buf);
  auto s = static_cast<cudaStream_t>(stream);
  if (!states_valid) {
    if (int e = LaunchGates(p, a, s); e != 0) return e;
  }
  if (int e =
          gs::Backward(sp, buf, dh, dc_final, dn_final, dq, dk, dv, dc0, dn0, states_valid, stream);
      e != 0) {
    return e;
  }
  const int64_t tokens = p.batch * p.seq_len * p.heads;
  const dim3 grid(unsigned((tokens + 255) / 256));
  if (p.bf16) {
    FinishKernel<__nv_bfloat16><<<grid, 256, 0, s>>>(a, di, df);
  } else {
    FinishKernel<float><<<grid, 256, 0, s>>>(a, di, df);
  }
  return int(cudaGetLastError());
}

}  // namespace mesa::kernels::mlstm::cuda
