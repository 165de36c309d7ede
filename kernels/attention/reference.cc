#include "kernels/attention/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mesa::kernels::attention {
namespace {

std::vector<double> ToDouble(std::span<const float> x) { return {x.begin(), x.end()}; }

void Store(const std::vector<double>& x, std::span<float> out) {
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(x[i]);
}

// Offset of token t, head h of batch row b in a [B,T,H,D] tensor.
int64_t Off(const AttnDims& d, int64_t b, int64_t t, int64_t h) {
  return ((b * d.seq_len + t) * d.heads + h) * d.head_dim;
}

double Dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Probabilities P_ij of row i (j = lo..i) and its log-sum-exp.
double RowProbs(const Attn64& p, int64_t b, int64_t h, int64_t i, std::vector<double>* probs) {
  const AttnDims& d = p.dims;
  const int64_t lo = p.FirstKey(b, i);
  probs->assign(i - lo + 1, 0.0);
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = lo; j <= i; ++j) {
    (*probs)[j - lo] = p.scale * Dot(&p.q[Off(d, b, i, h)], &p.k[Off(d, b, j, h)], d.head_dim);
    m = std::max(m, (*probs)[j - lo]);
  }
  double l = 0;
  for (double& x : *probs) l += (x = std::exp(x - m));
  for (double& x : *probs) x /= l;
  return m + std::log(l);
}

}  // namespace

Attn64 Attn64::FromInputs(const AttnInputs& in, const AttnOptions& options) {
  return {.dims = in.dims,
          .q = ToDouble(in.q),
          .k = ToDouble(in.k),
          .v = ToDouble(in.v),
          .window = options.window,
          .scale = EffectiveScale(options, in.dims.head_dim),
          .doc_start = {in.doc_start.begin(), in.doc_start.end()}};
}

int64_t Attn64::FirstKey(int64_t b, int64_t i) const {
  return attention::FirstKey(doc_start, dims.seq_len, window, b, i);
}

Forward64 ReferenceForward64(const Attn64& p) {
  const AttnDims& d = p.dims;
  Forward64 f{std::vector<double>(d.TokenElems(), 0.0), std::vector<double>(d.RowElems(), 0.0)};
  std::vector<double> probs;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      for (int64_t i = 0; i < d.seq_len; ++i) {
        f.lse[(b * d.seq_len + i) * d.heads + h] = RowProbs(p, b, h, i, &probs);
        const int64_t lo = p.FirstKey(b, i);
        double* o = &f.o[Off(d, b, i, h)];
        for (int64_t j = lo; j <= i; ++j) {
          const double* v = &p.v[Off(d, b, j, h)];
          for (int64_t e = 0; e < d.head_dim; ++e) o[e] += probs[j - lo] * v[e];
        }
      }
    }
  }
  return f;
}

Gradients64 ReferenceBackward64(const Attn64& p, std::span<const double> d_o) {
  const AttnDims& d = p.dims;
  const int64_t n = d.TokenElems(), dim = d.head_dim;
  Gradients64 g{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0),
                std::vector<double>(n, 0.0)};
  std::vector<double> probs, dp;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      for (int64_t i = 0; i < d.seq_len; ++i) {
        RowProbs(p, b, h, i, &probs);
        const int64_t lo = p.FirstKey(b, i);
        const double* doi = &d_o[Off(d, b, i, h)];
        // delta_i = do_i . o_i = sum_j P_ij (do_i . v_j)
        dp.assign(probs.size(), 0.0);
        double delta = 0;
        for (int64_t j = lo; j <= i; ++j) {
          dp[j - lo] = Dot(doi, &p.v[Off(d, b, j, h)], dim);
          delta += probs[j - lo] * dp[j - lo];
        }
        for (int64_t j = lo; j <= i; ++j) {
          const double pij = probs[j - lo];
          const double ds = pij * (dp[j - lo] - delta) * p.scale;
          const int64_t oj = Off(d, b, j, h), oi = Off(d, b, i, h);
          for (int64_t e = 0; e < dim; ++e) {
            g.dv[oj + e] += pij * doi[e];
            g.dq[oi + e] += ds * p.k[oj + e];
            g.dk[oj + e] += ds * p.q[oi + e];
          }
        }
      }
    }
  }
  return g;
}

absl::Status AttnReferenceForward(const AttnInputs& in, const AttnOptions& options,
                                  AttnForwardOutputs* out) {
  Forward64 f = ReferenceForward64(Attn64::FromInputs(in, options));
  Store(f.o, out->o);
  if (!out->lse.empty()) Store(f.lse, out->lse);
  return absl::OkStatus();
}

absl::Status AttnReferenceBackward(const AttnInputs& in, const AttnBackwardInputs& bwd,
                                   const AttnOptions& options, AttnGradients* grads) {
  // The oracle recomputes everything from q, k, v (bwd.o and bwd.lse are not needed).
  Gradients64 g = ReferenceBackward64(Attn64::FromInputs(in, options), ToDouble(bwd.d_o));
  Store(g.dq, grads->dq);
  Store(g.dk, grads->dk);
  Store(g.dv, grads->dv);
  return absl::OkStatus();
}

}  // namespace mesa::kernels::attention
