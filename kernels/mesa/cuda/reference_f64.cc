#include "kernels/mesa/cuda/reference_f64.h"

#include <cmath>

namespace mesa::kernels::cuda::testing {
namespace {

// Solves (A) x = b for SPD A (n x n, row-major) by Cholesky.
std::vector<double> Solve(std::vector<double> a, std::vector<double> b, int n) {
  for (int j = 0; j < n; ++j) {
    double s = a[j * n + j];
    for (int k = 0; k < j; ++k) s -= a[j * n + k] * a[j * n + k];
    const double l = std::sqrt(s);
    a[j * n + j] = l;
    for (int i = j + 1; i < n; ++i) {
      double t = a[i * n + j];
      for (int k = 0; k < j; ++k) t -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = t / l;
    }
  }
  for (int i = 0; i < n; ++i) {
    double t = b[i];
    for (int k = 0; k < i; ++k) t -= a[i * n + k] * b[k];
    b[i] = t / a[i * n + i];
  }
  for (int i = n - 1; i >= 0; --i) {
    double t = b[i];
    for (int k = i + 1; k < n; ++k) t -= a[k * n + i] * b[k];
    b[i] = t / a[i * n + i];
  }
  return b;
}

}  // namespace

RefResult RunReference(const RefProblem& p) {
  const int64_t H = p.H, D = p.D, DD = D * D;
  const int64_t S = p.cu_seqlens.empty() ? p.B : static_cast<int64_t>(p.cu_seqlens.size()) - 1;
  const size_t tok = static_cast<size_t>(p.B * p.T * H * D),
               gate = static_cast<size_t>(p.B * p.T * H);
  RefResult r;
  r.o.assign(tok, 0);
  r.q_star.assign(tok, 0);
  r.dq.assign(tok, 0);
  r.dk.assign(tok, 0);
  r.dv.assign(tok, 0);
  r.dlog_gamma.assign(gate, 0);
  r.dbeta.assign(gate, 0);
  r.dlambda.assign(H * D, 0);
  r.h_final.assign(S * H * DD, 0);
  r.g_final.assign(S * H * DD, 0);
  r.dh0.assign(S * H * DD, 0);
  r.dg0.assign(S * H * DD, 0);
  auto at = [&](const std::vector<float>& x, int64_t t, int64_t h, int64_t d) {
    return static_cast<double>(x[(t * H + h) * D + d]);
  };
  for (int64_t s = 0; s < S; ++s) {
    const int64_t t0 = p.cu_seqlens.empty() ? s * p.T : p.cu_seqlens[s];
    const int64_t len = p.cu_seqlens.empty() ? p.T : p.cu_seqlens[s + 1] - p.cu_seqlens[s];
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> Hs(DD, 0), Gs(DD, 0);
      const size_t so = static_cast<size_t>((s * H + h) * DD);
      if (!p.h0.empty())
        for (int64_t i = 0; i < DD; ++i) Hs[i] = p.h0[so + i];
      if (!p.g0.empty())
        for (int64_t i = 0; i < DD; ++i) Gs[i] = p.g0[so + i];
      std::vector<double> cum(len + 1, 0.0);  // cum[j+1] = sum_{s<=j} log_gamma
      std::vector<std::vector<double>> qs(len), es(len), ee(len);
      std::vector<double> R(len, 0.0);
      for (int64_t j = 0; j < len; ++j) {
        const int64_t t = t0 + j;
        const double lg = p.log_gamma[t * H + h], gam = std::exp(lg), be = p.beta[t * H + h];
        cum[j + 1] = cum[j] + lg;
        for (int64_t a = 0; a < D; ++a)
          for (int64_t b = 0; b < D; ++b) {
            Hs[a * D + b] = gam * Hs[a * D + b] + be * at(p.k, t, h, a) * at(p.k, t, h, b);
            Gs[a * D + b] = gam * Gs[a * D + b] + be * at(p.v, t, h, a) * at(p.k, t, h, b);
          }
        std::vector<double> A = Hs, q(D), e(D), u(D, 0.0);
        for (int64_t a = 0; a < D; ++a) {
          A[a * D + a] += p.lambda[h * D + a];
          q[a] = at(p.q, t, h, a);
          e[a] = at(p.d_o, t, h, a);
        }
        std::vector<double> x = p.gla ? q : Solve(A, q, static_cast<int>(D));
        std::vector<double> o(D, 0.0);
        for (int64_t a = 0; a < D; ++a)
          for (int64_t b = 0; b < D; ++b) {
            o[a] += Gs[a * D + b] * x[b];
            u[b] += Gs[a * D + b] * e[a];
          }
        std::vector<double> es_t =
            p.gla ? std::vector<double>(D, 0.0) : Solve(A, u, static_cast<int>(D));
        double eo = 0, ehq = 0;
        for (int64_t a = 0; a < D; ++a) {
          double hq = 0;
          for (int64_t b = 0; b < D; ++b) hq += Hs[a * D + b] * x[b];
          eo += e[a] * o[a];
          ehq += es_t[a] * hq;
        }
        R[j] = eo - ehq;
        const double z0 = std::exp(cum[j + 1]);  // zeta_{t,0}
        for (int64_t a = 0; a < D; ++a) {
          const size_t idx = static_cast<size_t>((t * H + h) * D + a);
          r.o[idx] = o[a];
          r.q_star[idx] = x[a];
          r.dq[idx] = p.gla ? u[a] : es_t[a];
          r.dlambda[h * D + a] -= x[a] * es_t[a];
          for (int64_t b = 0; b < D; ++b) {
            r.dh0[so + a * D + b] -= z0 * es_t[a] * x[b];
            r.dg0[so + a * D + b] += z0 * e[a] * x[b];
          }
        }
        qs[j] = x;
        es[j] = es_t;
        ee[j] = e;
      }
      for (int64_t i = 0; i < DD; ++i) {
        r.h_final[so + i] = Hs[i];
        r.g_final[so + i] = Gs[i];
      }
      // dv, dk, dbeta by the direct sums over t >= s.
      std::vector<double> Dterm(len, 0.0);
      for (int64_t j = 0; j < len; ++j) {
        const int64_t ts = t0 + j;
        const double be = p.beta[ts * H + h];
        std::vector<double> dv(D, 0.0), dk(D, 0.0);
        double db = 0;
        for (int64_t jt = j; jt < len; ++jt) {
          const double z = std::exp(cum[jt + 1] - cum[j + 1]);
          double kq = 0, ev = 0, esk = 0;
          for (int64_t a = 0; a < D; ++a) {
            kq += at(p.k, ts, h, a) * qs[jt][a];
            ev += ee[jt][a] * at(p.v, ts, h, a);
            esk += es[jt][a] * at(p.k, ts, h, a);
          }
          for (int64_t a = 0; a < D; ++a) {
            dv[a] += z * be * ee[jt][a] * kq;
            dk[a] += z * be * (qs[jt][a] * ev - es[jt][a] * kq - qs[jt][a] * esk);
          }
          db += z * kq * (ev - esk);
        }
        for (int64_t a = 0; a < D; ++a) {
          r.dv[(ts * H + h) * D + a] = dv[a];
          r.dk[(ts * H + h) * D + a] = dk[a];
        }
        r.dbeta[ts * H + h] = db;
        Dterm[j] = R[j] - be * db;
      }
      double acc = 0;
      for (int64_t j = len - 1; j >= 0; --j) {
        acc += Dterm[j];
        r.dlog_gamma[(t0 + j) * H + h] = acc;
      }
    }
  }
  return r;
}

}  // namespace mesa::kernels::cuda::testing
