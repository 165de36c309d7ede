// Float32 chunkwise CPU implementation of the Mesa operator (docs/math.md §2.2 and §3).
//
// Work is split over (sequence, head) slices, one slice per task on a small thread pool. Each
// slice walks its tokens in chunks of kChunk = 64 (the last chunk of a sequence may be shorter;
// chunks never cross a varlen sequence boundary). Per chunk with n tokens, b_t = in-chunk cumsum
// of log gamma, B = b_{n-1}:
//   decay_t  = e^{b_t}                       (state at chunk start -> token t)
//   Z[t,i]   = e^{b_t - b_i} [i <= t]         M[t,i] = Z[t,i] beta_i
//   w_i      = e^{B - b_i} beta_i             (token i -> chunk end, with its write weight)
//   A(P)     = diag(decay) P H_c + ((P K^T) ⊙ M) K + P ⊙ lambda       (rows = tokens)
//   O        = diag(decay) X G_c^T + ((X K^T) ⊙ M) V                   (X = q*, rows)
//   H_{c+1}  = e^B H_c + K^T diag(w) K,  G_{c+1} = e^B G_c + V^T diag(w) K
// CG runs the C token systems of a chunk in lockstep with per-row scalars (mesa_types.h).
//
// Backward (see docs/kernels.md for the derivation): a state pass stores every H_c, G_c; then a
// reverse pass over chunks carries D_G, D_H = gradients w.r.t. the chunk-end state coming from
// later chunks. Per chunk:
//   R  = diag(decay) E G_c + ((E V^T) ⊙ M) K          (rows r_t = G_t^T e_t)
//   E* = CG solve of (H_t + Λ) e*_t = r_t             (dq = E*)
//   dV = ((X K^T) ⊙ M)^T E + diag(w) K D_G^T
//   dK = ((E V^T - E* K^T) ⊙ M)^T X - ((X K^T) ⊙ M)^T E* + diag(w) (V D_G + K (D_H + D_H^T))
//   dbeta_t = sum_s Z[s,t] (x_s.k_t)(e_s.v_t - e*_s.k_t) + e^{B-b_t} (v_t^T D_G k_t + k_t^T D_H
//   k_t) dlog_gamma_t = sum_{s >= t} f_s + <dG_final, G_T> + <dH_final, H_T>,
//       f_s = e_s.o_s - e*_s.(H_s q*_s) - beta_s dbeta_s     (reverse cumsum over the sequence)
//   D_G <- e^B D_G + E^T diag(decay) X,   D_H <- e^B D_H - E*^T diag(decay) X
// and finally dg0 = D_G, dh0 = (D_H + D_H^T) / 2 (h0 is read as a symmetric matrix).
#include "kernels/mesa/chunked.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/blas_util.h"
#include "kernels/common/parallel_for.h"

namespace mesa::kernels::cpu {
namespace {

constexpr int kChunk = 64;

struct Slice {
  int64_t batch_index;  // b
  int64_t state_index;  // index into [S, H, D, D]
  int64_t head;
  int64_t begin, end;  // tokens [begin, end) along T
};

std::vector<Slice> MakeSlices(const MesaInputs& in) {
  std::vector<Slice> slices;
  for (int64_t s = 0; s < in.num_sequences(); ++s) {
    for (int64_t h = 0; h < in.dims.heads; ++h) {
      if (in.is_varlen()) {
        slices.push_back({0, s, h, in.cu_seqlens[s], in.cu_seqlens[s + 1]});
      } else {
        slices.push_back({s, s, h, 0, in.dims.seq_len});
      }
    }
  }
  return slices;
}

inline double Dot(const float* a, const float* b, int n) {
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += double(a[i]) * b[i];
  return sum;
}

// Per-worker scratch, sized for one chunk.
struct Workspace {
  explicit Workspace(int dim) : dim(dim) {
    const size_t rows = size_t(kChunk) * dim, square = size_t(kChunk) * kChunk;
    for (auto* v : {&q, &k, &v, &e, &x, &r, &p, &w, &e_star, &tmp, &tmp2, &tmp3, &out_rows})
      v->assign(rows, 0.f);
    for (auto* v : {&mask, &zmask, &s, &s2, &s3}) v->assign(square, 0.f);
    for (auto* v : {&decay, &write, &tail, &beta}) v->assign(kChunk, 0.f);
    cg_d_old.assign(kChunk, 0.0);
    cg_d0.assign(kChunk, 0.0);
    cg_active.assign(kChunk, 0);
    sym.assign(size_t(dim) * dim, 0.f);
  }
  int dim;
  std::vector<float> q, k, v, e, x, r, p, w, e_star, tmp, tmp2, tmp3, out_rows;  // n x D
  std::vector<float> mask, zmask, s, s2, s3;                                     // n x n
  std::vector<float> decay, write, tail, beta;                                   // n
  std::vector<double> cg_d_old, cg_d0;
  std::vector<char> cg_active;
  std::vector<float> sym;  // D x D
};

// Token-major tensor addressing for one slice.
struct SliceLayout {
  const MesaInputs& in;
  const Slice& slice;
  int64_t gate(int64_t t) const {
    return (slice.batch_index * in.dims.seq_len + t) * in.dims.heads + slice.head;
  }
  int64_t token(int64_t t) const { return gate(t) * in.dims.head_dim; }
};

void GatherRows(std::span<const float> src, const SliceLayout& layout, int64_t t0, int n,
                float* dst) {
  const int dim = static_cast<int>(layout.in.dims.head_dim);
  for (int i = 0; i < n; ++i) std::copy_n(&src[layout.token(t0 + i)], dim, dst + size_t(i) * dim);
}

void ScatterRows(const float* src, const SliceLayout& layout, int64_t t0, int n,
                 std::span<float> dst) {
  const int dim = static_cast<int>(layout.in.dims.head_dim);
  for (int i = 0; i < n; ++i) std::copy_n(src + size_t(i) * dim, dim, &dst[layout.token(t0 + i)]);
}

// Gate-derived quantities of one chunk; returns e^B.
float BuildChunkGates(const SliceLayout& layout, int64_t t0, int n, Workspace& ws) {
  double b[kChunk] = {};  // n >= 1 always; the zeros only quiet -Wmaybe-uninitialized
  double cum = 0;
  for (int i = 0; i < n; ++i) {
    cum += layout.in.log_gamma[layout.gate(t0 + i)];
    b[i] = cum;
    ws.beta[i] = layout.in.beta[layout.gate(t0 + i)];
    ws.decay[i] = static_cast<float>(std::exp(b[i]));
  }
  const double b_last = b[n - 1];
  for (int i = 0; i < n; ++i) {
    ws.tail[i] = static_cast<float>(std::exp(b_last - b[i]));
    ws.write[i] = ws.tail[i] * ws.beta[i];
  }
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < n; ++i) {
      // Never exp a positive exponent: masked entries are set directly (docs/math.md §9.5).
      const float z = i <= t ? static_cast<float>(std::exp(b[t] - b[i])) : 0.f;
      ws.zmask[t * n + i] = z;
      ws.mask[t * n + i] = z * ws.beta[i];
    }
  }
  return static_cast<float>(std::exp(b_last));
}

// out = diag(decay) P H_c + ((P K^T) ⊙ M) K [+ P ⊙ lambda if lambda != nullptr]. Uses ws.s.
void ApplySystem(const float* p, const float* hc, const float* lambda, int n, Workspace& ws,
                 float* out) {
  const int dim = ws.dim;
  RowMajorGemm(false, false, n, dim, dim, 1.f, p, dim, hc, dim, 0.f, out, dim);
  for (int t = 0; t < n; ++t) {
    float* row = out + size_t(t) * dim;
    const float d = ws.decay[t];
    for (int j = 0; j < dim; ++j) row[j] *= d;
  }
  RowMajorGemm(false, true, n, n, dim, 1.f, p, dim, ws.k.data(), dim, 0.f, ws.s.data(), n);
  for (int i = 0; i < n * n; ++i) ws.s[i] *= ws.mask[i];
  RowMajorGemm(false, false, n, dim, n, 1.f, ws.s.data(), n, ws.k.data(), dim, 1.f, out, dim);
  if (lambda != nullptr) {
    for (int t = 0; t < n; ++t) {
      float* row = out + size_t(t) * dim;
      const float* prow = p + size_t(t) * dim;
      for (int j = 0; j < dim; ++j) row[j] += prow[j] * lambda[j];
    }
  }
}

// Solves (H_t + Λ) x_t = rhs_t for the n tokens of a chunk (CG of mesa_types.h, x0 = 0).
// Returns the total number of steps over the rows; row_steps (optional, n entries) gets each
// row's.
int64_t ChunkCg(const float* rhs, const float* hc, const float* lambda, int n, const CgOptions& cg,
                Workspace& ws, float* x, int32_t* row_steps = nullptr) {
  if (row_steps != nullptr) std::fill_n(row_steps, n, 0);
  const int dim = ws.dim;
  const size_t rows = size_t(n) * dim;
  if (cg.max_steps == 0) {  // GLA readout: q* = q.
    std::copy_n(rhs, rows, x);
    return 0;
  }
  std::fill_n(x, rows, 0.f);
  std::copy_n(rhs, rows, ws.r.data());
  std::copy_n(rhs, rows, ws.p.data());
  int active_rows = 0;
  for (int t = 0; t < n; ++t) {
    ws.cg_d_old[t] = ws.cg_d0[t] = Dot(&ws.r[size_t(t) * dim], &ws.r[size_t(t) * dim], dim);
    ws.cg_active[t] = ws.cg_d_old[t] > 0;
    active_rows += ws.cg_active[t];
  }
  const double tol2 = double(cg.tolerance) * cg.tolerance;
  int64_t steps = 0;
  for (int step = 0; step < cg.max_steps && active_rows > 0; ++step) {
    ApplySystem(ws.p.data(), hc, lambda, n, ws, ws.w.data());
    for (int t = 0; t < n; ++t) {
      if (!ws.cg_active[t]) continue;
      float* xr = x + size_t(t) * dim;
      float* rr = &ws.r[size_t(t) * dim];
      float* pr = &ws.p[size_t(t) * dim];
      const float* wr = &ws.w[size_t(t) * dim];
      const double pw = Dot(pr, wr, dim);
      if (!(pw > 0)) {  // converged to exactly zero residual or lost positivity: freeze
        ws.cg_active[t] = 0;
        --active_rows;
        continue;
      }
      const float alpha = static_cast<float>(ws.cg_d_old[t] / pw);
      for (int j = 0; j < dim; ++j) {
        xr[j] += alpha * pr[j];
        rr[j] -= alpha * wr[j];
      }
      const double d_new = Dot(rr, rr, dim);
      ++steps;
      if (row_steps != nullptr) ++row_steps[t];
      if ((cg.tolerance > 0 && d_new <= tol2 * ws.cg_d0[t]) || !(d_new > 0)) {
        ws.cg_active[t] = 0;
        --active_rows;
        continue;
      }
      const float ratio = static_cast<float>(d_new / ws.cg_d_old[t]);
      for (int j = 0; j < dim; ++j) pr[j] = rr[j] + ratio * pr[j];
      ws.cg_d_old[t] = d_new;
    }
  }
  return steps;
}

void LoadState(std::span<const float> src, int64_t offset, int64_t elems, float* dst) {
  if (src.empty()) {
    std::fill_n(dst, elems, 0.f);
  } else {
    std::copy_n(&src[offset], elems, dst);
  }
}

// Advances (hc, gc) over one chunk whose gates are in ws: X = e^B X + A^T diag(w) K.
void AdvanceState(int n, float chunk_decay, Workspace& ws, float* hc, float* gc) {
  const int dim = ws.dim;
  float* kw = ws.tmp3.data();
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < dim; ++j) kw[size_t(i) * dim + j] = ws.k[size_t(i) * dim + j] * ws.write[i];
  }
  RowMajorGemm(true, false, dim, dim, n, 1.f, ws.k.data(), dim, kw, dim, chunk_decay, hc, dim);
  RowMajorGemm(true, false, dim, dim, n, 1.f, ws.v.data(), dim, kw, dim, chunk_decay, gc, dim);
}

}  // namespace

absl::Status MesaChunkedForward(const MesaInputs& in, const MesaOptions& options,
                                MesaForwardOutputs* out) {
  const int dim = static_cast<int>(in.dims.head_dim);
  const int64_t dd = int64_t(dim) * dim;
  const std::vector<Slice> slices = MakeSlices(in);
  const int threads = ResolveThreads(options.num_threads, slices.size());
  BlasSingleThreaded blas_guard(/*enable=*/threads > 1);
  std::vector<Workspace> workspaces(threads, Workspace(dim));
  std::vector<std::vector<float>> states(threads, std::vector<float>(2 * dd));
  std::vector<int64_t> slice_steps(slices.size(), 0);

  ParallelFor(static_cast<int64_t>(slices.size()), threads, [&](int64_t task, int worker) {
    const Slice& slice = slices[task];
    Workspace& ws = workspaces[worker];
    SliceLayout layout{in, slice};
    float* hc = states[worker].data();
    float* gc = hc + dd;
    const int64_t state_offset = (slice.state_index * in.dims.heads + slice.head) * dd;
    LoadState(in.h0, state_offset, dd, hc);
    LoadState(in.g0, state_offset, dd, gc);
    const float* lambda = &in.lambda[slice.head * dim];
    for (int64_t t0 = slice.begin; t0 < slice.end; t0 += kChunk) {
      const int n = static_cast<int>(std::min<int64_t>(kChunk, slice.end - t0));
      GatherRows(in.q, layout, t0, n, ws.q.data());
      GatherRows(in.k, layout, t0, n, ws.k.data());
      GatherRows(in.v, layout, t0, n, ws.v.data());
      const float chunk_decay = BuildChunkGates(layout, t0, n, ws);
      int32_t row_steps[kChunk];
      const bool per_token = !out->token_cg_steps.empty();
      slice_steps[task] += ChunkCg(ws.q.data(), hc, lambda, n, options.cg, ws, ws.x.data(),
                                   per_token ? row_steps : nullptr);
      if (per_token) {
        for (int t = 0; t < n; ++t) out->token_cg_steps[layout.gate(t0 + t)] = row_steps[t];
      }
      // O = diag(decay) X G_c^T + ((X K^T) ⊙ M) V
      float* o = ws.out_rows.data();
      RowMajorGemm(false, true, n, dim, dim, 1.f, ws.x.data(), dim, gc, dim, 0.f, o, dim);
      for (int t = 0; t < n; ++t) {
        for (int j = 0; j < dim; ++j) o[size_t(t) * dim + j] *= ws.decay[t];
      }
      RowMajorGemm(false, true, n, n, dim, 1.f, ws.x.data(), dim, ws.k.data(), dim, 0.f,
                   ws.s.data(), n);
      for (int i = 0; i < n * n; ++i) ws.s[i] *= ws.mask[i];
      RowMajorGemm(false, false, n, dim, n, 1.f, ws.s.data(), n, ws.v.data(), dim, 1.f, o, dim);
      ScatterRows(o, layout, t0, n, out->o);
      if (!out->q_star.empty()) ScatterRows(ws.x.data(), layout, t0, n, out->q_star);
      AdvanceState(n, chunk_decay, ws, hc, gc);
    }
    if (!out->h_final.empty()) std::copy_n(hc, dd, &out->h_final[state_offset]);
    if (!out->g_final.empty()) std::copy_n(gc, dd, &out->g_final[state_offset]);
  });

  int64_t total_steps = 0;
  for (int64_t s : slice_steps) total_steps += s;
  const int64_t tokens = in.dims.batch * in.dims.seq_len * in.dims.heads;
  out->cg_steps_mean = tokens > 0 ? double(total_steps) / tokens : 0.0;
  return absl::OkStatus();
}

absl::Status MesaChunkedBackward(const MesaInputs& in, const MesaBackwardInputs& bwd,
                                 const MesaOptions& options, MesaGradients* grads) {
  const int dim = static_cast<int>(in.dims.head_dim);
  const int64_t dd = int64_t(dim) * dim;
  const bool solve = options.cg.max_steps > 0;  // false: GLA, q* = q does not depend on H.
  const std::vector<Slice> slices = MakeSlices(in);
  const int threads = ResolveThreads(options.num_threads, slices.size());
  BlasSingleThreaded blas_guard(/*enable=*/threads > 1);
  std::vector<Workspace> workspaces(threads, Workspace(dim));
  std::vector<int64_t> slice_steps(slices.size(), 0);
  std::vector<std::vector<double>> slice_dlambda(slices.size());

  ParallelFor(static_cast<int64_t>(slices.size()), threads, [&](int64_t task, int worker) {
    const Slice& slice = slices[task];
    Workspace& ws = workspaces[worker];
    SliceLayout layout{in, slice};
    const int64_t state_offset = (slice.state_index * in.dims.heads + slice.head) * dd;
    const float* lambda = &in.lambda[slice.head * dim];
    const int64_t num_chunks = (slice.end - slice.begin + kChunk - 1) / kChunk;

    // State pass: chunk-start states (H_c, G_c) for every chunk, then the final state.
    std::vector<float> chunk_states((num_chunks + 1) * 2 * dd);
    LoadState(in.h0, state_offset, dd, chunk_states.data());
    LoadState(in.g0, state_offset, dd, chunk_states.data() + dd);
    for (int64_t c = 0; c < num_chunks; ++c) {
      const int64_t t0 = slice.begin + c * kChunk;
      const int n = static_cast<int>(std::min<int64_t>(kChunk, slice.end - t0));
      float* next = &chunk_states[(c + 1) * 2 * dd];
      std::copy_n(&chunk_states[c * 2 * dd], 2 * dd, next);
      GatherRows(in.k, layout, t0, n, ws.k.data());
      GatherRows(in.v, layout, t0, n, ws.v.data());
      const float chunk_decay = BuildChunkGates(layout, t0, n, ws);
      AdvanceState(n, chunk_decay, ws, next, next + dd);
    }

    // Reverse pass. D_G, D_H: gradient w.r.t. the current chunk-end state from later tokens.
    std::vector<float> d_g(dd), d_h(dd);
    LoadState(bwd.dg_final, state_offset, dd, d_g.data());
    LoadState(bwd.dh_final, state_offset, dd, d_h.data());
    double dlog_gamma_acc = 0;  // reverse cumsum of f_s, seeded with the final-state terms
    {
      const float* h_final = &chunk_states[num_chunks * 2 * dd];
      dlog_gamma_acc = Dot(d_g.data(), h_final + dd, static_cast<int>(dd)) +
                       Dot(d_h.data(), h_final, static_cast<int>(dd));
    }
    std::vector<double> dlambda(dim, 0.0);
    std::vector<double> f(kChunk);
    for (int64_t c = num_chunks - 1; c >= 0; --c) {
      const int64_t t0 = slice.begin + c * kChunk;
      const int n = static_cast<int>(std::min<int64_t>(kChunk, slice.end - t0));
      const float* hc = &chunk_states[c * 2 * dd];
      const float* gc = hc + dd;
      GatherRows(in.k, layout, t0, n, ws.k.data());
      GatherRows(in.v, layout, t0, n, ws.v.data());
      GatherRows(bwd.d_o, layout, t0, n, ws.e.data());
      GatherRows(bwd.q_star, layout, t0, n, ws.x.data());
      const float chunk_decay = BuildChunkGates(layout, t0, n, ws);
      const size_t rows = size_t(n) * dim;
      float* const e = ws.e.data();
      float* const x = ws.x.data();
      float* const k = ws.k.data();
      float* const v = ws.v.data();

      // R = diag(decay) E G_c + ((E V^T) ⊙ M) K; keep EV = E V^T unmasked in s2.
      float* r = ws.tmp.data();
      RowMajorGemm(false, false, n, dim, dim, 1.f, e, dim, gc, dim, 0.f, r, dim);
      for (int t = 0; t < n; ++t) {
        for (int j = 0; j < dim; ++j) r[size_t(t) * dim + j] *= ws.decay[t];
      }
      float* ev = ws.s2.data();
      RowMajorGemm(false, true, n, n, dim, 1.f, e, dim, v, dim, 0.f, ev, n);
      for (int i = 0; i < n * n; ++i) ws.s[i] = ev[i] * ws.mask[i];
      RowMajorGemm(false, false, n, dim, n, 1.f, ws.s.data(), n, k, dim, 1.f, r, dim);

      // e* (ws.e_star) and dq.
      float* e_star = ws.e_star.data();
      slice_steps[task] += ChunkCg(r, hc, lambda, n, options.cg, ws, e_star);
      ScatterRows(e_star, layout, t0, n, grads->dq);

      // c_t = r_t.q*_t - e*_t.(H_t q*_t).
      double c_t[kChunk];
      for (int t = 0; t < n; ++t) c_t[t] = Dot(r + size_t(t) * dim, x + size_t(t) * dim, dim);
      if (solve) {
        float* hx = ws.tmp2.data();
        ApplySystem(x, hc, nullptr, n, ws, hx);
        for (int t = 0; t < n; ++t) {
          c_t[t] -= Dot(e_star + size_t(t) * dim, hx + size_t(t) * dim, dim);
          for (int j = 0; j < dim; ++j)
            dlambda[j] -= double(x[size_t(t) * dim + j]) * e_star[size_t(t) * dim + j];
        }
      }

      // XK[s,t] = q*_s.k_t and EsK[s,t] = e*_s.k_t (n x n, row = s).
      float* xk = ws.s.data();
      RowMajorGemm(false, true, n, n, dim, 1.f, x, dim, k, dim, 0.f, xk, n);
      float* esk = ws.s3.data();
      if (solve) {
        RowMajorGemm(false, true, n, n, dim, 1.f, e_star, dim, k, dim, 0.f, esk, n);
      } else {
        std::fill_n(esk, n * n, 0.f);
      }
      // Intra-chunk dbeta, then A1 = XK ⊙ M (in place in xk) and A2 = (EV - EsK) ⊙ M (in ev).
      double dbeta[kChunk];
      for (int t = 0; t < n; ++t) dbeta[t] = 0;
      for (int s = 0; s < n; ++s) {
        for (int t = 0; t <= s; ++t) {
          const int idx = s * n + t;
          const float diff = ev[idx] - esk[idx];
          dbeta[t] += double(ws.zmask[idx]) * xk[idx] * diff;
          xk[idx] *= ws.mask[idx];
          ev[idx] = diff * ws.mask[idx];
        }
        for (int t = s + 1; t < n; ++t) {
          xk[s * n + t] = 0.f;
          ev[s * n + t] = 0.f;
        }
      }
      float* dv = ws.tmp2.data();
      float* dk = ws.tmp3.data();
      RowMajorGemm(true, false, n, dim, n, 1.f, xk, n, e, dim, 0.f, dv, dim);  // A1^T E
      RowMajorGemm(true, false, n, dim, n, 1.f, ev, n, x, dim, 0.f, dk, dim);  // A2^T X
      if (solve)
        RowMajorGemm(true, false, n, dim, n, -1.f, xk, n, e_star, dim, 1.f, dk, dim);  // -A1^T E*

      // Inter-chunk terms through D_G and D_H. sym = D_H + D_H^T.
      for (int a = 0; a < dim; ++a) {
        for (int b = 0; b < dim; ++b) ws.sym[a * dim + b] = d_h[a * dim + b] + d_h[b * dim + a];
      }
      float* kdg = ws.r.data();   // K D_G^T
      float* vdg = ws.p.data();   // V D_G
      float* ksym = ws.w.data();  // K (D_H + D_H^T)
      RowMajorGemm(false, true, n, dim, dim, 1.f, k, dim, d_g.data(), dim, 0.f, kdg, dim);
      RowMajorGemm(false, false, n, dim, dim, 1.f, v, dim, d_g.data(), dim, 0.f, vdg, dim);
      RowMajorGemm(false, false, n, dim, dim, 1.f, k, dim, ws.sym.data(), dim, 0.f, ksym, dim);
      for (int t = 0; t < n; ++t) {
        const size_t row = size_t(t) * dim;
        const float wt = ws.write[t];
        for (int j = 0; j < dim; ++j) {
          dv[row + j] += wt * kdg[row + j];
          dk[row + j] += wt * (vdg[row + j] + ksym[row + j]);
        }
        dbeta[t] += double(ws.tail[t]) *
                    (Dot(vdg + row, k + row, dim) + 0.5 * Dot(ksym + row, k + row, dim));
      }
      ScatterRows(dv, layout, t0, n, grads->dv);
      ScatterRows(dk, layout, t0, n, grads->dk);
      for (int t = n - 1; t >= 0; --t) {
        const int64_t gate = layout.gate(t0 + t);
        grads->dbeta[gate] = static_cast<float>(dbeta[t]);
        dlog_gamma_acc += c_t[t] - double(ws.beta[t]) * dbeta[t];
        grads->dlog_gamma[gate] = static_cast<float>(dlog_gamma_acc);
      }

      // D_G <- e^B D_G + E^T diag(decay) X;  D_H <- e^B D_H - E*^T diag(decay) X.
      float* xd = ws.tmp.data();  // r is no longer needed
      for (int t = 0; t < n; ++t) {
        for (int j = 0; j < dim; ++j)
          xd[size_t(t) * dim + j] = x[size_t(t) * dim + j] * ws.decay[t];
      }
      RowMajorGemm(true, false, dim, dim, n, 1.f, e, dim, xd, dim, chunk_decay, d_g.data(), dim);
      if (solve) {
        RowMajorGemm(true, false, dim, dim, n, -1.f, e_star, dim, xd, dim, chunk_decay, d_h.data(),
                     dim);
      } else {
        for (float& value : d_h) value *= chunk_decay;
      }
      (void)rows;
    }
    if (!grads->dg0.empty()) std::copy_n(d_g.data(), dd, &grads->dg0[state_offset]);
    if (!grads->dh0.empty()) {  // symmetric gradient, as h0 is read as a symmetric matrix
      for (int a = 0; a < dim; ++a) {
        for (int b = 0; b < dim; ++b) {
          grads->dh0[state_offset + a * dim + b] = 0.5f * (d_h[a * dim + b] + d_h[b * dim + a]);
        }
      }
    }
    slice_dlambda[task] = std::move(dlambda);
  });

  // Deterministic reduction of dlambda over slices (in slice order).
  std::vector<double> dlambda(in.dims.LambdaElems(), 0.0);
  int64_t total_steps = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    total_steps += slice_steps[i];
    for (int j = 0; j < dim; ++j) dlambda[slices[i].head * dim + j] += slice_dlambda[i][j];
  }
  for (size_t i = 0; i < dlambda.size(); ++i) grads->dlambda[i] = static_cast<float>(dlambda[i]);
  const int64_t tokens = in.dims.batch * in.dims.seq_len * in.dims.heads;
  grads->cg_steps_mean = tokens > 0 ? double(total_steps) / tokens : 0.0;
  return absl::OkStatus();
}

}  // namespace mesa::kernels::cpu
