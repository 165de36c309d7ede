// Float32 chunkwise DeltaNet / Gated DeltaNet (kernels/deltanet/README.md derives every formula).
//
// Per chunk of n tokens with start state S (D x D, rows = values), rows = tokens, b_r = in-chunk
// cumulative sum of log gamma (0 when ungated), gamma_r = e^{b_r}, tail_r = e^{b_{n-1} - b_r},
// Gam[r,i] = e^{b_r - b_i} for i <= r, else 0:
//   L  = strict_lower(diag(beta) (K K^T ⊙ Gam))         A = (I + L)^{-1}   (unit lower)
//   T  = A diag(beta)                                   (UT transform; note the PLUS sign)
//   U  = T V,   W = T diag(gamma) K,   X = U - W S^T    (X row r = beta_r (v_r - g_r S_{r-1} k_r))
//   O  = diag(gamma) Q S^T + ((Q K^T) ⊙ Gam) X
//   S' = gamma_{n-1} S + X^T diag(tail) K
//
// Backward per chunk (in reverse; dS = dL/dS' on entry, dL/dS on exit), with
// Vt = V - diag(gamma) K S^T, R = diag(beta) Vt, so X = A R, and P = (Q K^T) ⊙ Gam:
//   dX  = P^T dO + diag(tail) K dS^T              dP = dO X^T
//   dQ  = (dP ⊙ Gam) K + diag(gamma) dO S
//   dR  = A^T dX                                  dM = -dR X^T (strict lower part)
//   dV  = diag(beta) dR                           dbeta_r = dR_r . Vt_r + sum_{i<r} dM K K^T Gam
//   dK  = (dP ⊙ Gam)^T Q + diag(tail) X dS - diag(beta gamma) dR S + E K + E^T K,
//         E = dM ⊙ Gam ⊙ beta_row (strict lower)
//   dS <- gamma_{n-1} dS + dO^T diag(gamma) Q - (diag(beta gamma) dR)^T K
// and the gate gradients via db_r (gradient w.r.t. the cumulative b_r; every e^{b_r - b_i}
// factor f with upstream gradient df adds f df to db_r and subtracts it from db_i), then
// dlog_gamma_t = sum_{r >= t in chunk} db_r.
#include "kernels/deltanet/chunked.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/blas_util.h"
#include "kernels/deltanet/internal.h"

namespace mesa::kernels::deltanet {
namespace {

using internal::Slice;
using internal::SliceIndex;

inline double RowDot(const float* a, const float* b, int n) {
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += double(a[i]) * b[i];
  return sum;
}

// Per-worker scratch for one chunk of at most `chunk` tokens.
struct Workspace {
  Workspace(int chunk, int dim) : chunk(chunk), dim(dim) {
    const size_t rows = size_t(chunk) * dim, square = size_t(chunk) * chunk;
    for (auto* buf : {&q, &k, &v, &e, &ks, &vt, &x, &tmp, &tmp2, &dx, &dr, &xds, &dq, &dk, &dv})
      buf->assign(rows, 0.f);
    for (auto* buf : {&kk, &qk, &gam, &lower, &a, &p, &dp, &dm}) buf->assign(square, 0.f);
    for (auto* buf : {&gamma, &tail, &beta, &dbeta}) buf->assign(chunk, 0.f);
    b.assign(chunk, 0.0);
    db.assign(chunk, 0.0);
    a64.assign(square, 0.0);
  }
  int chunk, dim;
  std::vector<float> q, k, v, e, ks, vt, x, tmp, tmp2, dx, dr, xds, dq, dk, dv;  // n x D
  std::vector<float> kk, qk, gam, lower, a, p, dp, dm;                           // n x n
  std::vector<float> gamma, tail, beta, dbeta;                                   // n
  std::vector<double> b, db, a64;
};

struct SliceCtx {
  const DeltaInputs& in;
  SliceIndex idx;
  int dim;

  void Gather(std::span<const float> src, int64_t t0, int n, float* dst) const {
    for (int i = 0; i < n; ++i) std::copy_n(&src[idx.token(t0 + i)], dim, dst + size_t(i) * dim);
  }
  void Scatter(const float* src, int64_t t0, int n, std::span<float> dst) const {
    for (int i = 0; i < n; ++i) std::copy_n(src + size_t(i) * dim, dim, &dst[idx.token(t0 + i)]);
  }
};

// Loads q, k, v, beta of the chunk and builds gamma, tail, Gam, K K^T and A = (I + L)^{-1}.
void PrepareChunk(const SliceCtx& ctx, int64_t t0, int n, Workspace& ws) {
  const int dim = ctx.dim;
  ctx.Gather(ctx.in.q, t0, n, ws.q.data());
  ctx.Gather(ctx.in.k, t0, n, ws.k.data());
  ctx.Gather(ctx.in.v, t0, n, ws.v.data());
  double cum = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t gi = ctx.idx.gate(t0 + r);
    if (ctx.in.is_gated()) cum += ctx.in.log_gamma[gi];
    ws.b[r] = cum;
    ws.beta[r] = ctx.in.beta[gi];
    ws.gamma[r] = static_cast<float>(std::exp(cum));
  }
  for (int r = 0; r < n; ++r) {
    ws.tail[r] = static_cast<float>(std::exp(ws.b[n - 1] - ws.b[r]));
    for (int i = 0; i < n; ++i) {
      // Masked entries are set directly: never exp a positive exponent.
      ws.gam[r * n + i] = i <= r ? static_cast<float>(std::exp(ws.b[r] - ws.b[i])) : 0.f;
    }
  }
  RowMajorGemm(false, true, n, n, dim, 1.f, ws.k.data(), dim, ws.k.data(), dim, 0.f, ws.kk.data(),
               n);
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < n; ++i) {
      ws.lower[r * n + i] = i < r ? ws.beta[r] * ws.kk[r * n + i] * ws.gam[r * n + i] : 0.f;
    }
  }
  // A = (I + L)^{-1} by forward substitution in float64: A_r = e_r - sum_{i<r} L[r,i] A_i.
  // A is unit lower triangular, so A_r has entries only in columns <= r.
  for (int r = 0; r < n; ++r) {
    double* row = &ws.a64[size_t(r) * n];
    std::fill_n(row, n, 0.0);
    row[r] = 1.0;
    for (int i = 0; i < r; ++i) {
      const double l = ws.lower[r * n + i];
      if (l == 0.0) continue;
      const double* ai = &ws.a64[size_t(i) * n];
      for (int c = 0; c <= i; ++c) row[c] -= l * ai[c];
    }
  }
  for (int i = 0; i < n * n; ++i) ws.a[i] = static_cast<float>(ws.a64[i]);
}

// X = U - W S^T with U = A diag(beta) V, W = A diag(beta gamma) K (the WY / UT-transform form).
void ComputeX(const float* s, int n, Workspace& ws) {
  const int dim = ws.dim;
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < dim; ++c) {
      ws.tmp[r * dim + c] = ws.beta[r] * ws.v[r * dim + c];
      ws.tmp2[r * dim + c] = ws.beta[r] * ws.gamma[r] * ws.k[r * dim + c];
    }
  }
  RowMajorGemm(false, false, n, dim, n, 1.f, ws.a.data(), n, ws.tmp.data(), dim, 0.f, ws.x.data(),
               dim);
  RowMajorGemm(false, false, n, dim, n, 1.f, ws.a.data(), n, ws.tmp2.data(), dim, 0.f, ws.dx.data(),
               dim);  // dx holds W here
  RowMajorGemm(false, true, n, dim, dim, -1.f, ws.dx.data(), dim, s, dim, 1.f, ws.x.data(), dim);
}

// S <- gamma_{n-1} S + X^T diag(tail) K.
void AdvanceState(int n, Workspace& ws, float* s) {
  const int dim = ws.dim;
  const float g_end = ws.gamma[n - 1];
  for (int i = 0; i < dim * dim; ++i) s[i] *= g_end;
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < dim; ++c) ws.tmp[r * dim + c] = ws.tail[r] * ws.k[r * dim + c];
  }
  RowMajorGemm(true, false, dim, dim, n, 1.f, ws.x.data(), dim, ws.tmp.data(), dim, 1.f, s, dim);
}

void ForwardSlice(const SliceCtx& ctx, int chunk, Workspace& ws, std::span<float> o, float* s) {
  const Slice& slice = *ctx.idx.slice;
  const int dim = ctx.dim;
  for (int64_t t0 = slice.begin; t0 < slice.end; t0 += chunk) {
    const int n = static_cast<int>(std::min<int64_t>(chunk, slice.end - t0));
    PrepareChunk(ctx, t0, n, ws);
    ComputeX(s, n, ws);
    // O = diag(gamma) Q S^T + ((Q K^T) ⊙ Gam) X.
    RowMajorGemm(false, true, n, n, dim, 1.f, ws.q.data(), dim, ws.k.data(), dim, 0.f, ws.p.data(),
                 n);
    for (int i = 0; i < n * n; ++i) ws.p[i] *= ws.gam[i];
    RowMajorGemm(false, true, n, dim, dim, 1.f, ws.q.data(), dim, s, dim, 0.f, ws.tmp2.data(), dim);
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < dim; ++c) ws.tmp2[r * dim + c] *= ws.gamma[r];
    }
    RowMajorGemm(false, false, n, dim, n, 1.f, ws.p.data(), n, ws.x.data(), dim, 1.f,
                 ws.tmp2.data(), dim);
    ctx.Scatter(ws.tmp2.data(), t0, n, o);
    AdvanceState(n, ws, s);
  }
}

// One chunk of the backward. s = the chunk's start state; ds = dL/d(chunk end state) on entry,
// dL/d(start state) on exit.
void BackwardChunk(const SliceCtx& ctx, const DeltaBackwardInputs& bwd, int64_t t0, int n,
                   const float* s, float* ds, Workspace& ws, DeltaGradients* grads) {
  const int dim = ctx.dim;
  PrepareChunk(ctx, t0, n, ws);
  ctx.Gather(bwd.d_o, t0, n, ws.e.data());
  // Forward quantities: ks = K S^T, Vt = V - diag(gamma) ks, X = A diag(beta) Vt, P.
  RowMajorGemm(false, true, n, dim, dim, 1.f, ws.k.data(), dim, s, dim, 0.f, ws.ks.data(), dim);
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < dim; ++c) {
      ws.vt[r * dim + c] = ws.v[r * dim + c] - ws.gamma[r] * ws.ks[r * dim + c];
      ws.tmp[r * dim + c] = ws.beta[r] * ws.vt[r * dim + c];
    }
  }
  RowMajorGemm(false, false, n, dim, n, 1.f, ws.a.data(), n, ws.tmp.data(), dim, 0.f, ws.x.data(),
               dim);
  RowMajorGemm(false, true, n, n, dim, 1.f, ws.q.data(), dim, ws.k.data(), dim, 0.f, ws.qk.data(),
               n);
  for (int i = 0; i < n * n; ++i) ws.p[i] = ws.qk[i] * ws.gam[i];
  std::fill_n(ws.db.begin(), n, 0.0);
  const int last = n - 1;

  // dX = P^T dO + diag(tail) K dS^T.
  RowMajorGemm(true, false, n, dim, n, 1.f, ws.p.data(), n, ws.e.data(), dim, 0.f, ws.dx.data(),
               dim);
  RowMajorGemm(false, true, n, dim, dim, 1.f, ws.k.data(), dim, ds, dim, 0.f, ws.tmp.data(), dim);
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < dim; ++c) ws.dx[r * dim + c] += ws.tail[r] * ws.tmp[r * dim + c];
  }
  // S' = gamma_last S + X^T diag(tail) K: gate terms and xds = X dS (for dK).
  RowMajorGemm(false, false, n, dim, dim, 1.f, ws.x.data(), dim, ds, dim, 0.f, ws.xds.data(), dim);
  for (int r = 0; r < n; ++r) {
    const double f = ws.tail[r] * RowDot(&ws.xds[r * dim], &ws.k[r * dim], dim);
    ws.db[last] += f;
    ws.db[r] -= f;
  }
  ws.db[last] += ws.gamma[last] * RowDot(ds, s, dim * dim);
  // dP = dO X^T; gate terms of Gam inside P; then dP <- dP ⊙ Gam.
  RowMajorGemm(false, true, n, n, dim, 1.f, ws.e.data(), dim, ws.x.data(), dim, 0.f, ws.dp.data(),
               n);
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i <= r; ++i) {
      const double f = double(ws.dp[r * n + i]) * ws.qk[r * n + i] * ws.gam[r * n + i];
      ws.db[r] += f;
      ws.db[i] -= f;
    }
  }
  for (int i = 0; i < n * n; ++i) ws.dp[i] *= ws.gam[i];
  // dQ = dP K + diag(gamma) dO S; gate term of diag(gamma) Q S^T.
  RowMajorGemm(false, false, n, dim, dim, 1.f, ws.e.data(), dim, s, dim, 0.f, ws.dq.data(), dim);
  RowMajorGemm(false, true, n, dim, dim, 1.f, ws.q.data(), dim, s, dim, 0.f, ws.tmp.data(), dim);
  for (int r = 0; r < n; ++r) {
    ws.db[r] += ws.gamma[r] * RowDot(&ws.e[r * dim], &ws.tmp[r * dim], dim);
    for (int c = 0; c < dim; ++c) ws.dq[r * dim + c] *= ws.gamma[r];
  }
  RowMajorGemm(false, false, n, dim, n, 1.f, ws.dp.data(), n, ws.k.data(), dim, 1.f, ws.dq.data(),
               dim);
  // dK = dP^T Q + diag(tail) X dS.
  RowMajorGemm(true, false, n, dim, n, 1.f, ws.dp.data(), n, ws.q.data(), dim, 0.f, ws.dk.data(),
               dim);
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < dim; ++c) ws.dk[r * dim + c] += ws.tail[r] * ws.xds[r * dim + c];
  }
  // Through X = A R, R = diag(beta) Vt: dR = A^T dX, dM = -dR X^T.
  RowMajorGemm(true, false, n, dim, n, 1.f, ws.a.data(), n, ws.dx.data(), dim, 0.f, ws.dr.data(),
               dim);
  RowMajorGemm(false, false, n, dim, dim, 1.f, ws.dr.data(), dim, s, dim, 0.f, ws.tmp.data(), dim);
  for (int r = 0; r < n; ++r) {
    const float bg = ws.beta[r] * ws.gamma[r];
    ws.dbeta[r] = static_cast<float>(RowDot(&ws.dr[r * dim], &ws.vt[r * dim], dim));
    ws.db[r] -= double(bg) * RowDot(&ws.dr[r * dim], &ws.ks[r * dim], dim);
    for (int c = 0; c < dim; ++c) {
      ws.dv[r * dim + c] = ws.beta[r] * ws.dr[r * dim + c];
      ws.dk[r * dim + c] -= bg * ws.tmp[r * dim + c];
    }
  }
  RowMajorGemm(false, true, n, n, dim, -1.f, ws.dr.data(), dim, ws.x.data(), dim, 0.f, ws.dm.data(),
               n);
  // L[r,i] = beta_r (k_r . k_i) Gam[r,i] for i < r; E = dL ⊙ Gam ⊙ beta_row.
  for (int r = 0; r < n; ++r) {
    double dbeta_r = 0;
    for (int i = 0; i < n; ++i) {
      float& m = ws.dm[r * n + i];
      if (i >= r) {
        m = 0.f;
        continue;
      }
      const double dl_kk_gam = double(m) * ws.kk[r * n + i] * ws.gam[r * n + i];
      dbeta_r += dl_kk_gam;
      ws.db[r] += ws.beta[r] * dl_kk_gam;
      ws.db[i] -= ws.beta[r] * dl_kk_gam;
      m *= ws.beta[r] * ws.gam[r * n + i];
    }
    ws.dbeta[r] += static_cast<float>(dbeta_r);
  }
  RowMajorGemm(false, false, n, dim, n, 1.f, ws.dm.data(), n, ws.k.data(), dim, 1.f, ws.dk.data(),
               dim);
  RowMajorGemm(true, false, n, dim, n, 1.f, ws.dm.data(), n, ws.k.data(), dim, 1.f, ws.dk.data(),
               dim);
  // dS <- gamma_last dS + dO^T diag(gamma) Q - (diag(beta gamma) dR)^T K.
  for (int i = 0; i < dim * dim; ++i) ds[i] *= ws.gamma[last];
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < dim; ++c) {
      ws.tmp[r * dim + c] = ws.gamma[r] * ws.q[r * dim + c];
      ws.tmp2[r * dim + c] = ws.beta[r] * ws.gamma[r] * ws.dr[r * dim + c];
    }
  }
  RowMajorGemm(true, false, dim, dim, n, 1.f, ws.e.data(), dim, ws.tmp.data(), dim, 1.f, ds, dim);
  RowMajorGemm(true, false, dim, dim, n, -1.f, ws.tmp2.data(), dim, ws.k.data(), dim, 1.f, ds, dim);

  ctx.Scatter(ws.dq.data(), t0, n, grads->dq);
  ctx.Scatter(ws.dk.data(), t0, n, grads->dk);
  ctx.Scatter(ws.dv.data(), t0, n, grads->dv);
  double suffix = 0;
  for (int r = last; r >= 0; --r) {
    suffix += ws.db[r];
    const int64_t gi = ctx.idx.gate(t0 + r);
    grads->dbeta[gi] = ws.dbeta[r];
    if (!grads->dlog_gamma.empty()) grads->dlog_gamma[gi] = static_cast<float>(suffix);
  }
}

void BackwardSlice(const SliceCtx& ctx, const DeltaBackwardInputs& bwd, int chunk, Workspace& ws,
                   std::vector<float>& states, float* ds, DeltaGradients* grads) {
  const Slice& slice = *ctx.idx.slice;
  const int dim = ctx.dim;
  const size_t dd = size_t(dim) * dim;
  const int64_t num_chunks = (slice.end - slice.begin + chunk - 1) / chunk;
  // State pass: states[c] = the state at the start of chunk c.
  states.assign(std::max<int64_t>(num_chunks, 1) * dd, 0.f);
  if (!ctx.in.s0.empty()) std::copy_n(&ctx.in.s0[ctx.idx.state()], dd, states.data());
  std::vector<float> s(states.begin(), states.begin() + dd);
  for (int64_t c = 0; c + 1 < num_chunks; ++c) {
    const int64_t t0 = slice.begin + c * chunk;
    const int n = static_cast<int>(std::min<int64_t>(chunk, slice.end - t0));
    PrepareChunk(ctx, t0, n, ws);
    ComputeX(s.data(), n, ws);
    AdvanceState(n, ws, s.data());
    std::copy_n(s.data(), dd, &states[(c + 1) * dd]);
  }
  for (int64_t c = num_chunks - 1; c >= 0; --c) {
    const int64_t t0 = slice.begin + c * chunk;
    const int n = static_cast<int>(std::min<int64_t>(chunk, slice.end - t0));
    BackwardChunk(ctx, bwd, t0, n, &states[c * dd], ds, ws, grads);
  }
}

}  // namespace

absl::Status DeltaChunkedForward(const DeltaInputs& in, const DeltaOptions& options,
                                 DeltaForwardOutputs* out) {
  const DeltaDims& d = in.dims;
  const int dim = static_cast<int>(d.head_dim);
  const size_t dd = size_t(dim) * dim;
  const std::vector<Slice> slices =
      internal::MakeSlices(d.batch, d.seq_len, d.heads, in.cu_seqlens);
  const int threads = internal::ResolveThreads(options.num_threads, slices.size());
  const int chunk = std::min<int64_t>(options.chunk_size, std::max<int64_t>(d.seq_len, 1));
  BlasSingleThreaded guard;
  std::vector<Workspace> workspaces(threads, Workspace(chunk, dim));
  std::vector<std::vector<float>> states(threads, std::vector<float>(dd));
  internal::ParallelFor(int64_t(slices.size()), threads, [&](int64_t task, int worker) {
    const SliceCtx ctx{in, SliceIndex{d.seq_len, d.heads, d.head_dim, &slices[task]}, dim};
    float* s = out->s_final.empty() ? states[worker].data() : &out->s_final[ctx.idx.state()];
    if (in.s0.empty()) {
      std::fill_n(s, dd, 0.f);
    } else if (const float* s0 = &in.s0[ctx.idx.state()]; s0 != s) {  // s_final may alias s0
      std::copy_n(s0, dd, s);
    }
    ForwardSlice(ctx, chunk, workspaces[worker], out->o, s);
  });
  return absl::OkStatus();
}

absl::Status DeltaChunkedBackward(const DeltaInputs& in, const DeltaBackwardInputs& bwd,
                                  const DeltaOptions& options, DeltaGradients* grads) {
  const DeltaDims& d = in.dims;
  const int dim = static_cast<int>(d.head_dim);
  const size_t dd = size_t(dim) * dim;
  const std::vector<Slice> slices =
      internal::MakeSlices(d.batch, d.seq_len, d.heads, in.cu_seqlens);
  const int threads = internal::ResolveThreads(options.num_threads, slices.size());
  const int chunk = std::min<int64_t>(options.chunk_size, std::max<int64_t>(d.seq_len, 1));
  BlasSingleThreaded guard;
  std::vector<Workspace> workspaces(threads, Workspace(chunk, dim));
  std::vector<std::vector<float>> states(threads), ds_scratch(threads, std::vector<float>(dd));
  internal::ParallelFor(int64_t(slices.size()), threads, [&](int64_t task, int worker) {
    const SliceCtx ctx{in, SliceIndex{d.seq_len, d.heads, d.head_dim, &slices[task]}, dim};
    float* ds = grads->ds0.empty() ? ds_scratch[worker].data() : &grads->ds0[ctx.idx.state()];
    if (bwd.ds_final.empty()) {
      std::fill_n(ds, dd, 0.f);
    } else if (const float* dsf = &bwd.ds_final[ctx.idx.state()]; dsf != ds) {  // may alias ds0
      std::copy_n(dsf, dd, ds);
    }
    BackwardSlice(ctx, bwd, chunk, workspaces[worker], states[worker], ds, grads);
  });
  return absl::OkStatus();
}

}  // namespace mesa::kernels::deltanet
