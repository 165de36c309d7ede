#include "kernels/rglru/reference.h"

#include <algorithm>
#include <cmath>

#include "kernels/rglru/rglru_gates.h"

namespace mesa::kernels::rglru {
namespace {

std::vector<double> ToDouble(std::span<const float> x) { return {x.begin(), x.end()}; }

void ToFloat(const std::vector<double>& x, std::span<float> out) {
  if (out.empty()) return;
  std::transform(x.begin(), x.end(), out.begin(), [](double v) { return static_cast<float>(v); });
}

RgLruProblem64 ToProblem64(const RgLruInputs& in) {
  RgLruProblem64 p;
  p.dims = in.dims;
  p.u = ToDouble(in.u);
  p.rho = ToDouble(in.rho);
  p.iota = ToDouble(in.iota);
  p.p = ToDouble(in.p);
  p.h0 = ToDouble(in.h0);
  p.started.assign(in.started.begin(), in.started.end());
  p.reset.assign(in.reset.begin(), in.reset.end());
  return p;
}

}  // namespace

RgLruForward64 ReferenceForward64(const RgLruProblem64& pr) {
  const int64_t B = pr.dims.batch, T = pr.dims.seq_len, D = pr.dims.width;
  RgLruForward64 out;
  out.h.assign(B * T * D, 0.0);
  out.h_final.assign(B * D, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t d = 0; d < D; ++d) {
      const double sp = RgSoftplus(pr.p[d]);
      double h = pr.h0.empty() ? 0.0 : pr.h0[b * D + d];
      for (int64_t t = 0; t < T; ++t) {
        const int64_t at = (b * T + t) * D + d;
        const RgLruGates<double> g =
            ComputeRgLruGates(pr.rho[at], pr.iota[at], sp, pr.Restart(b, t));
        h = g.a * h + g.m * g.i * pr.u[at];
        out.h[at] = h;
      }
      out.h_final[b * D + d] = h;
    }
  }
  return out;
}

RgLruGradients64 ReferenceBackward64(const RgLruProblem64& pr, const std::vector<double>& dh,
                                     const std::vector<double>& dh_final) {
  const int64_t B = pr.dims.batch, T = pr.dims.seq_len, D = pr.dims.width;
  const RgLruForward64 fwd = ReferenceForward64(pr);
  RgLruGradients64 g;
  g.du.assign(B * T * D, 0.0);
  g.drho.assign(B * T * D, 0.0);
  g.diota.assign(B * T * D, 0.0);
  g.dp.assign(D, 0.0);
  g.dh0.assign(B * D, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t d = 0; d < D; ++d) {
      const double sp = RgSoftplus(pr.p[d]);
      const double sig_p = RgSigmoid(pr.p[d]);
      double carry = dh_final.empty() ? 0.0 : dh_final[b * D + d];  // a_{t+1} δh_{t+1}
      for (int64_t t = T - 1; t >= 0; --t) {
        const int64_t at = (b * T + t) * D + d;
        const bool restart = pr.Restart(b, t);
        const RgLruGates<double> gates = ComputeRgLruGates(pr.rho[at], pr.iota[at], sp, restart);
        const double dh_t = dh[at] + carry;
        const double h_prev = t > 0 ? fwd.h[at - D] : (pr.h0.empty() ? 0.0 : pr.h0[b * D + d]);
        const RgLruTokenGrads<double> tg =
            RgLruTokenBackward(gates, pr.u[at], h_prev, dh_t, sp, sig_p, restart);
        g.du[at] = tg.d_u;
        g.drho[at] = tg.d_rho;
        g.diota[at] = tg.d_iota;
        g.dp[d] += tg.d_p;
        carry = gates.a * dh_t;
      }
      g.dh0[b * D + d] = carry;
    }
  }
  return g;
}

absl::Status ReferenceForward(const RgLruInputs& in, RgLruForwardOutputs* out) {
  const RgLruForward64 f = ReferenceForward64(ToProblem64(in));
  ToFloat(f.h, out->h);
  ToFloat(f.h_final, out->h_final);
  return absl::OkStatus();
}

absl::Status ReferenceBackward(const RgLruInputs& in, const RgLruBackwardInputs& bwd,
                               RgLruGradients* grads) {
  const RgLruGradients64 g =
      ReferenceBackward64(ToProblem64(in), ToDouble(bwd.dh), ToDouble(bwd.dh_final));
  ToFloat(g.du, grads->du);
  ToFloat(g.drho, grads->drho);
  ToFloat(g.diota, grads->diota);
  ToFloat(g.dp, grads->dp);
  ToFloat(g.dh0, grads->dh0);
  return absl::OkStatus();
}

}  // namespace mesa::kernels::rglru
