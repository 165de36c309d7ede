// Float64 recurrent reference of the Mesa operator: the test oracle.
//
// Forward: per (sequence, head), step t by t, materialising H_t and G_t and solving
// (H_t + diag lambda) q*_t = q_t exactly by Cholesky (or by float64 CG, see mesa_types.h).
// Backward: reverse-mode through the recurrence with dense state gradients
//   dG_t = e_t q*_t^T + gamma_{t+1} dG_{t+1},   dH_t = -e*_t q*_t^T + gamma_{t+1} dH_{t+1},
// and per token
//   dv_t = beta_t dG_t k_t,  dk_t = beta_t (dG_t^T v_t + (dH_t + dH_t^T) k_t),
//   dbeta_t = v_t^T dG_t k_t + k_t^T dH_t k_t,
//   dlog_gamma_t = gamma_t (<dG_t, G_{t-1}> + <dH_t, H_{t-1}>).
// States are recomputed per segment of kSegment tokens from stored checkpoints, so memory is
// O((T / kSegment + kSegment) D^2) per head.
#include "kernels/mesa/reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mesa::kernels::cpu {
namespace {

constexpr int64_t kSegment = 32;

using Mat = std::vector<double>;  // D x D row-major

// One (sequence, head) slice of the token-major tensors.
struct Slice {
  int64_t batch_index;  // b
  int64_t state_index;  // index into [S, H, D, D] state tensors
  int64_t head;
  int64_t begin, end;  // token range [begin, end) along T
};

std::vector<Slice> MakeSlices(const ReferenceProblem& in) {
  std::vector<Slice> slices;
  const MesaDims& d = in.dims;
  const bool varlen = !in.cu_seqlens.empty();
  const int64_t num_sequences = varlen ? static_cast<int64_t>(in.cu_seqlens.size()) - 1 : d.batch;
  for (int64_t s = 0; s < num_sequences; ++s) {
    for (int64_t h = 0; h < d.heads; ++h) {
      if (varlen) {
        slices.push_back({0, s, h, in.cu_seqlens[s], in.cu_seqlens[s + 1]});
      } else {
        slices.push_back({s, s, h, 0, d.seq_len});
      }
    }
  }
  return slices;
}

class ReferenceSolver {
 public:
  ReferenceSolver(const MesaOptions& options, int64_t dim) : options_(options), dim_(dim) {}

  // Solves (h + diag lambda) x = rhs. Returns the CG steps taken (0 for exact / GLA).
  int Solve(const Mat& h, const double* lambda, const std::vector<double>& rhs,
            std::vector<double>& x) {
    const int64_t n = dim_;
    if (options_.cg.max_steps == 0) {  // GLA: q* = q.
      x = rhs;
      return 0;
    }
    if (options_.reference_solver == mesa::kernels::ReferenceSolver::kExact) {
      // Cholesky A = L L^T in place (lower triangle).
      chol_.assign(h.begin(), h.end());
      for (int64_t i = 0; i < n; ++i) chol_[i * n + i] += lambda[i];
      for (int64_t j = 0; j < n; ++j) {
        double diag = chol_[j * n + j];
        for (int64_t p = 0; p < j; ++p) diag -= chol_[j * n + p] * chol_[j * n + p];
        diag = std::sqrt(std::max(diag, 1e-300));
        chol_[j * n + j] = diag;
        for (int64_t i = j + 1; i < n; ++i) {
          double sum = chol_[i * n + j];
          for (int64_t p = 0; p < j; ++p) sum -= chol_[i * n + p] * chol_[j * n + p];
          chol_[i * n + j] = sum / diag;
        }
      }
      x = rhs;
      for (int64_t i = 0; i < n; ++i) {  // L y = rhs
        double sum = x[i];
        for (int64_t p = 0; p < i; ++p) sum -= chol_[i * n + p] * x[p];
        x[i] = sum / chol_[i * n + i];
      }
      for (int64_t i = n - 1; i >= 0; --i) {  // L^T x = y
        double sum = x[i];
        for (int64_t p = i + 1; p < n; ++p) sum -= chol_[p * n + i] * x[p];
        x[i] = sum / chol_[i * n + i];
      }
      return 0;
    }
    // Float64 CG with the exact step semantics of mesa_types.h (x0 = 0).
    x.assign(n, 0.0);
    r_ = rhs;
    p_ = rhs;
    w_.assign(n, 0.0);
    double d_old = 0;
    for (int64_t i = 0; i < n; ++i) d_old += r_[i] * r_[i];
    const double d0 = d_old;
    const double tol = options_.cg.tolerance;
    int steps = 0;
    for (int step = 0; step < options_.cg.max_steps; ++step) {
      if (!(d_old > 0)) break;
      double pw = 0;
      for (int64_t i = 0; i < n; ++i) {
        double sum = lambda[i] * p_[i];
        for (int64_t j = 0; j < n; ++j) sum += h[i * n + j] * p_[j];
        w_[i] = sum;
        pw += p_[i] * sum;
      }
      if (!(pw > 0)) break;
      const double alpha = d_old / pw;
      double d_new = 0;
      for (int64_t i = 0; i < n; ++i) {
        x[i] += alpha * p_[i];
        r_[i] -= alpha * w_[i];
        d_new += r_[i] * r_[i];
      }
      ++steps;
      if (tol > 0 && d_new <= tol * tol * d0) break;
      const double ratio = d_new / d_old;
      for (int64_t i = 0; i < n; ++i) p_[i] = r_[i] + ratio * p_[i];
      d_old = d_new;
    }
    return steps;
  }

 private:
  const MesaOptions& options_;
  int64_t dim_;
  Mat chol_;
  std::vector<double> r_, p_, w_;
};

// Advances (h, g) by one token: X = gamma X + beta a k^T.
void StepState(int64_t n, double gamma, double beta, const double* k, const double* v, Mat& h,
               Mat& g) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      h[i * n + j] = gamma * h[i * n + j] + beta * k[i] * k[j];
      g[i * n + j] = gamma * g[i * n + j] + beta * v[i] * k[j];
    }
  }
}

void LoadState(std::span<const double> src, int64_t offset, int64_t elems, Mat& dst) {
  dst.assign(elems, 0.0);
  if (src.empty()) return;
  for (int64_t i = 0; i < elems; ++i) dst[i] = src[offset + i];
}

}  // namespace

ReferenceForwardResult RunReferenceForward(const ReferenceProblem& in, const MesaOptions& options) {
  const MesaDims& d = in.dims;
  const int64_t num_states =
      static_cast<int64_t>(in.cu_seqlens.empty() ? d.batch : in.cu_seqlens.size() - 1);
  ReferenceForwardResult out;
  out.o.assign(d.TokenElems(), 0.0);
  out.q_star.assign(d.TokenElems(), 0.0);
  out.h_final.assign(num_states * d.heads * d.head_dim * d.head_dim, 0.0);
  out.g_final.assign(out.h_final.size(), 0.0);
  out.token_cg_steps.assign(d.GateElems(), 0);
  const int64_t n = d.head_dim, hn = d.heads;
  const int64_t dd = n * n;
  ReferenceSolver solver(options, n);
  Mat h, g;
  std::vector<double> q(n), x(n);
  int64_t total_steps = 0, total_tokens = 0;
  for (const Slice& s : MakeSlices(in)) {
    const int64_t state_offset = (s.state_index * hn + s.head) * dd;
    LoadState(in.h0, state_offset, dd, h);
    LoadState(in.g0, state_offset, dd, g);
    const double* lambda = in.lambda.data() + s.head * n;
    for (int64_t t = s.begin; t < s.end; ++t) {
      const int64_t gate = (s.batch_index * d.seq_len + t) * hn + s.head;
      const int64_t tok = gate * n;
      StepState(n, std::exp(in.log_gamma[gate]), in.beta[gate], &in.k[tok], &in.v[tok], h, g);
      for (int64_t i = 0; i < n; ++i) q[i] = in.q[tok + i];
      out.token_cg_steps[gate] = solver.Solve(h, lambda, q, x);
      total_steps += out.token_cg_steps[gate];
      ++total_tokens;
      for (int64_t i = 0; i < n; ++i) {
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += g[i * n + j] * x[j];
        out.o[tok + i] = sum;
        out.q_star[tok + i] = x[i];
      }
    }
    for (int64_t i = 0; i < dd; ++i) {
      out.h_final[state_offset + i] = h[i];
      out.g_final[state_offset + i] = g[i];
    }
  }
  out.cg_steps_mean = total_tokens > 0 ? double(total_steps) / total_tokens : 0.0;
  return out;
}

ReferenceGradientsResult RunReferenceBackward(const ReferenceProblem& in,
                                              const ReferenceCotangents& bwd,
                                              const MesaOptions& options) {
  const MesaDims& d = in.dims;
  const int64_t num_states =
      static_cast<int64_t>(in.cu_seqlens.empty() ? d.batch : in.cu_seqlens.size() - 1);
  ReferenceGradientsResult result;
  ReferenceGradientsResult* grads = &result;
  result.dq.assign(d.TokenElems(), 0.0);
  result.dk.assign(d.TokenElems(), 0.0);
  result.dv.assign(d.TokenElems(), 0.0);
  result.dlog_gamma.assign(d.GateElems(), 0.0);
  result.dbeta.assign(d.GateElems(), 0.0);
  result.dh0.assign(num_states * d.heads * d.head_dim * d.head_dim, 0.0);
  result.dg0.assign(result.dh0.size(), 0.0);
  const int64_t n = d.head_dim, hn = d.heads;
  const int64_t dd = n * n;
  const bool gla = options.cg.max_steps == 0;  // q* = q: no H dependence.
  ReferenceSolver solver(options, n);
  std::vector<double> dlambda(d.LambdaElems(), 0.0);
  int64_t total_steps = 0, total_tokens = 0;

  Mat dg, dh;
  std::vector<Mat> seg_h,
      seg_g;  // states H_t, G_t for the tokens of one segment, plus the one before
  std::vector<double> r(n), e_star(n), e(n), qs(n);
  for (const Slice& s : MakeSlices(in)) {
    const int64_t state_offset = (s.state_index * hn + s.head) * dd;
    const double* lambda = in.lambda.data() + s.head * n;
    auto gate_index = [&](int64_t t) { return (s.batch_index * d.seq_len + t) * hn + s.head; };

    // Forward sweep storing checkpoints at segment starts (the state before the segment's first
    // token).
    std::vector<Mat> ckpt_h, ckpt_g;
    Mat h, g;
    LoadState(in.h0, state_offset, dd, h);
    LoadState(in.g0, state_offset, dd, g);
    for (int64_t t = s.begin; t < s.end; ++t) {
      if ((t - s.begin) % kSegment == 0) {
        ckpt_h.push_back(h);
        ckpt_g.push_back(g);
      }
      const int64_t gate = gate_index(t);
      StepState(n, std::exp(in.log_gamma[gate]), in.beta[gate], &in.k[gate * n], &in.v[gate * n], h,
                g);
    }
    // Final-state gradients seed the reverse pass.
    LoadState(bwd.dh_final, state_offset, dd, dh);
    LoadState(bwd.dg_final, state_offset, dd, dg);

    for (int64_t seg = static_cast<int64_t>(ckpt_h.size()) - 1; seg >= 0; --seg) {
      const int64_t seg_begin = s.begin + seg * kSegment;
      const int64_t seg_end = std::min(seg_begin + kSegment, s.end);
      // seg_h[j] = state after token seg_begin + j - 1 (seg_h[0] = checkpoint).
      seg_h.assign(1, ckpt_h[seg]);
      seg_g.assign(1, ckpt_g[seg]);
      for (int64_t t = seg_begin; t < seg_end; ++t) {
        Mat nh = seg_h.back(), ng = seg_g.back();
        const int64_t gate = gate_index(t);
        StepState(n, std::exp(in.log_gamma[gate]), in.beta[gate], &in.k[gate * n], &in.v[gate * n],
                  nh, ng);
        seg_h.push_back(std::move(nh));
        seg_g.push_back(std::move(ng));
      }
      for (int64_t t = seg_end - 1; t >= seg_begin; --t) {
        const int64_t j = t - seg_begin + 1;
        const Mat& h_t = seg_h[j];
        const Mat& g_t = seg_g[j];
        const Mat& h_prev = seg_h[j - 1];
        const Mat& g_prev = seg_g[j - 1];
        const int64_t gate = gate_index(t);
        const int64_t tok = gate * n;
        const double gamma = std::exp(in.log_gamma[gate]);
        const double beta = in.beta[gate];
        const double* k = &in.k[tok];
        const double* v = &in.v[tok];
        for (int64_t i = 0; i < n; ++i) {
          e[i] = bwd.d_o[tok + i];
          qs[i] = bwd.q_star[tok + i];
        }
        // r = G_t^T e; e* = (H_t + Λ)^{-1} r.
        for (int64_t i = 0; i < n; ++i) {
          double sum = 0;
          for (int64_t a = 0; a < n; ++a) sum += g_t[a * n + i] * e[a];
          r[i] = sum;
        }
        total_steps += solver.Solve(h_t, lambda, r, e_star);
        ++total_tokens;
        for (int64_t i = 0; i < n; ++i) grads->dq[tok + i] = e_star[i];
        // Total state gradients at t.
        for (int64_t a = 0; a < n; ++a) {
          for (int64_t b = 0; b < n; ++b) {
            dg[a * n + b] += e[a] * qs[b];
            if (!gla) dh[a * n + b] -= e_star[a] * qs[b];
          }
        }
        if (!gla) {
          for (int64_t i = 0; i < n; ++i) dlambda[s.head * n + i] -= qs[i] * e_star[i];
        }
        double dbeta = 0, dgamma = 0;
        for (int64_t a = 0; a < n; ++a) {
          double dgk = 0, dgtv = 0, dhk = 0, dhtk = 0;
          for (int64_t b = 0; b < n; ++b) {
            dgk += dg[a * n + b] * k[b];
            dgtv += dg[b * n + a] * v[b];
            dhk += dh[a * n + b] * k[b];
            dhtk += dh[b * n + a] * k[b];
            dgamma += dg[a * n + b] * g_prev[a * n + b] + dh[a * n + b] * h_prev[a * n + b];
          }
          grads->dv[tok + a] = beta * dgk;
          grads->dk[tok + a] = beta * (dgtv + dhk + dhtk);
          dbeta += v[a] * dgk + k[a] * dhk;
        }
        grads->dbeta[gate] = dbeta;
        grads->dlog_gamma[gate] = gamma * dgamma;
        // Pass to t-1.
        for (int64_t i = 0; i < dd; ++i) {
          dg[i] *= gamma;
          dh[i] *= gamma;
        }
      }
    }
    // h0 is read as a symmetric matrix, so report the symmetric gradient (dH + dH^T) / 2.
    for (int64_t a = 0; a < n; ++a) {
      for (int64_t b = 0; b < n; ++b) {
        grads->dh0[state_offset + a * n + b] = 0.5 * (dh[a * n + b] + dh[b * n + a]);
        grads->dg0[state_offset + a * n + b] = dg[a * n + b];
      }
    }
  }
  grads->dlambda = dlambda;
  grads->cg_steps_mean = total_tokens > 0 ? double(total_steps) / total_tokens : 0.0;
  return result;
}

}  // namespace mesa::kernels::cpu

namespace mesa::kernels::cpu {
namespace {
std::vector<double> ToDouble(std::span<const float> x) {
  return std::vector<double>(x.begin(), x.end());
}
void CopyOut(const std::vector<double>& src, std::span<float> dst) {
  if (dst.empty()) return;
  for (size_t i = 0; i < src.size(); ++i) dst[i] = static_cast<float>(src[i]);
}
}  // namespace

ReferenceProblem ReferenceProblem::FromInputs(const MesaInputs& in) {
  ReferenceProblem p;
  p.dims = in.dims;
  p.q = ToDouble(in.q);
  p.k = ToDouble(in.k);
  p.v = ToDouble(in.v);
  p.log_gamma = ToDouble(in.log_gamma);
  p.beta = ToDouble(in.beta);
  p.lambda = ToDouble(in.lambda);
  p.h0 = ToDouble(in.h0);
  p.g0 = ToDouble(in.g0);
  p.cu_seqlens.assign(in.cu_seqlens.begin(), in.cu_seqlens.end());
  return p;
}

absl::Status MesaReferenceForward(const MesaInputs& in, const MesaOptions& options,
                                  MesaForwardOutputs* out) {
  ReferenceForwardResult r = RunReferenceForward(ReferenceProblem::FromInputs(in), options);
  CopyOut(r.o, out->o);
  CopyOut(r.q_star, out->q_star);
  CopyOut(r.h_final, out->h_final);
  CopyOut(r.g_final, out->g_final);
  if (!out->token_cg_steps.empty()) {
    std::copy(r.token_cg_steps.begin(), r.token_cg_steps.end(), out->token_cg_steps.begin());
  }
  out->cg_steps_mean = r.cg_steps_mean;
  return absl::OkStatus();
}

absl::Status MesaReferenceBackward(const MesaInputs& in, const MesaBackwardInputs& bwd,
                                   const MesaOptions& options, MesaGradients* grads) {
  ReferenceCotangents cot{.q_star = ToDouble(bwd.q_star),
                          .d_o = ToDouble(bwd.d_o),
                          .dh_final = ToDouble(bwd.dh_final),
                          .dg_final = ToDouble(bwd.dg_final)};
  ReferenceGradientsResult r = RunReferenceBackward(ReferenceProblem::FromInputs(in), cot, options);
  CopyOut(r.dq, grads->dq);
  CopyOut(r.dk, grads->dk);
  CopyOut(r.dv, grads->dv);
  CopyOut(r.dlog_gamma, grads->dlog_gamma);
  CopyOut(r.dbeta, grads->dbeta);
  CopyOut(r.dlambda, grads->dlambda);
  CopyOut(r.dh0, grads->dh0);
  CopyOut(r.dg0, grads->dg0);
  grads->cg_steps_mean = r.cg_steps_mean;
  return absl::OkStatus();
}

}  // namespace mesa::kernels::cpu
