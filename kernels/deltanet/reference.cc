#include "kernels/deltanet/reference.h"

#include <algorithm>
#include <cmath>

#include "kernels/deltanet/internal.h"

namespace mesa::kernels::deltanet {
namespace {

using internal::Slice;
using internal::SliceIndex;

constexpr int64_t kCheckpointEvery = 64;

std::vector<double> ToDouble(std::span<const float> x) { return {x.begin(), x.end()}; }

// One recurrence step: S <- g S + beta (v - g S k) k^T. u (size D) receives S_{t-1} k.
void Step(int64_t dim, const double* k, const double* v, double beta, double g, double* s,
          double* u) {
  for (int64_t i = 0; i < dim; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < dim; ++j) acc += s[i * dim + j] * k[j];
    u[i] = acc;
  }
  for (int64_t i = 0; i < dim; ++i) {
    const double delta = beta * (v[i] - g * u[i]);
    double* row = s + i * dim;
    for (int64_t j = 0; j < dim; ++j) row[j] = g * row[j] + delta * k[j];
  }
}

double Gate(const Delta64& p, int64_t gate_index) {
  return p.log_gamma.empty() ? 1.0 : std::exp(p.log_gamma[gate_index]);
}

}  // namespace

Delta64 Delta64::FromInputs(const DeltaInputs& in) {
  Delta64 p;
  p.dims = in.dims;
  p.q = ToDouble(in.q);
  p.k = ToDouble(in.k);
  p.v = ToDouble(in.v);
  p.beta = ToDouble(in.beta);
  p.log_gamma = ToDouble(in.log_gamma);
  p.s0 = ToDouble(in.s0);
  p.cu_seqlens.assign(in.cu_seqlens.begin(), in.cu_seqlens.end());
  return p;
}

Forward64 ReferenceForward64(const Delta64& p) {
  const DeltaDims& d = p.dims;
  const int64_t dim = d.head_dim;
  Forward64 out;
  out.o.assign(d.TokenElems(), 0.0);
  out.s_final.assign(p.StateElems(), 0.0);
  std::vector<double> u(dim);
  for (const Slice& slice : internal::MakeSlices(d.batch, d.seq_len, d.heads, p.cu_seqlens)) {
    const SliceIndex idx{d.seq_len, d.heads, dim, &slice};
    double* s = &out.s_final[idx.state()];
    if (!p.s0.empty()) std::copy_n(&p.s0[idx.state()], dim * dim, s);
    for (int64_t t = slice.begin; t < slice.end; ++t) {
      const int64_t g_i = idx.gate(t), x_i = idx.token(t);
      Step(dim, &p.k[x_i], &p.v[x_i], p.beta[g_i], Gate(p, g_i), s, u.data());
      for (int64_t i = 0; i < dim; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < dim; ++j) acc += s[i * dim + j] * p.q[x_i + j];
        out.o[x_i + i] = acc;
      }
    }
  }
  return out;
}

Gradients64 ReferenceBackward64(const Delta64& p, std::span<const double> d_o,
                                std::span<const double> ds_final) {
  const DeltaDims& d = p.dims;
  const int64_t dim = d.head_dim, dd = dim * dim;
  Gradients64 g;
  g.dq.assign(d.TokenElems(), 0.0);
  g.dk.assign(d.TokenElems(), 0.0);
  g.dv.assign(d.TokenElems(), 0.0);
  g.dbeta.assign(d.GateElems(), 0.0);
  if (!p.log_gamma.empty()) g.dlog_gamma.assign(d.GateElems(), 0.0);
  g.ds0.assign(p.StateElems(), 0.0);
  std::vector<double> u(dim), pk(dim), delta(dim);
  std::vector<double> checkpoints, states;
  for (const Slice& slice : internal::MakeSlices(d.batch, d.seq_len, d.heads, p.cu_seqlens)) {
    const SliceIndex idx{d.seq_len, d.heads, dim, &slice};
    const int64_t len = slice.end - slice.begin;
    const int64_t num_segments = (len + kCheckpointEvery - 1) / kCheckpointEvery;
    // Forward: the state before each segment.
    checkpoints.assign((num_segments + 1) * dd, 0.0);
    if (!p.s0.empty()) std::copy_n(&p.s0[idx.state()], dd, checkpoints.data());
    std::vector<double> s(checkpoints.begin(), checkpoints.begin() + dd);
    for (int64_t t = slice.begin; t < slice.end; ++t) {
      const int64_t g_i = idx.gate(t), x_i = idx.token(t);
      Step(dim, &p.k[x_i], &p.v[x_i], p.beta[g_i], Gate(p, g_i), s.data(), u.data());
      if ((t - slice.begin + 1) % kCheckpointEvery == 0 || t + 1 == slice.end) {
        const int64_t seg = (t - slice.begin) / kCheckpointEvery + 1;
        std::copy_n(s.data(), dd, &checkpoints[seg * dd]);
      }
    }
    // Reverse, one segment at a time. ds = dL/dS_t for the current t.
    double* ds = &g.ds0[idx.state()];
    if (!ds_final.empty()) std::copy_n(&ds_final[idx.state()], dd, ds);
    for (int64_t seg = num_segments - 1; seg >= 0; --seg) {
      const int64_t t0 = slice.begin + seg * kCheckpointEvery;
      const int64_t n = std::min(kCheckpointEvery, slice.end - t0);
      // states[j] = S after j tokens of the segment (states[0] = checkpoint).
      states.assign((n + 1) * dd, 0.0);
      std::copy_n(&checkpoints[seg * dd], dd, states.data());
      for (int64_t j = 0; j < n; ++j) {
        const int64_t g_i = idx.gate(t0 + j), x_i = idx.token(t0 + j);
        std::copy_n(&states[j * dd], dd, &states[(j + 1) * dd]);
        Step(dim, &p.k[x_i], &p.v[x_i], p.beta[g_i], Gate(p, g_i), &states[(j + 1) * dd], u.data());
      }
      for (int64_t j = n - 1; j >= 0; --j) {
        const int64_t g_i = idx.gate(t0 + j), x_i = idx.token(t0 + j);
        const double* s_prev = &states[j * dd];
        const double* s_cur = &states[(j + 1) * dd];
        const double* q = &p.q[x_i];
        const double* k = &p.k[x_i];
        const double* v = &p.v[x_i];
        const double* e = &d_o[x_i];
        const double beta = p.beta[g_i], gate = Gate(p, g_i);
        // o_t = S_t q_t.
        for (int64_t i = 0; i < dim; ++i) {
          for (int64_t c = 0; c < dim; ++c) ds[i * dim + c] += e[i] * q[c];
        }
        for (int64_t c = 0; c < dim; ++c) {
          double acc = 0;
          for (int64_t i = 0; i < dim; ++i) acc += s_cur[i * dim + c] * e[i];
          g.dq[x_i + c] = acc;
        }
        // S_t = g S_{t-1} + beta delta k^T, delta = v - g S_{t-1} k.
        double dbeta = 0, pu = 0, ds_dot_s = 0;
        for (int64_t i = 0; i < dim; ++i) {
          double acc_p = 0, acc_u = 0;
          for (int64_t c = 0; c < dim; ++c) {
            acc_p += ds[i * dim + c] * k[c];
            acc_u += s_prev[i * dim + c] * k[c];
            ds_dot_s += ds[i * dim + c] * s_prev[i * dim + c];
          }
          pk[i] = acc_p;
          u[i] = acc_u;
          delta[i] = v[i] - gate * acc_u;
          dbeta += delta[i] * acc_p;
          pu += acc_p * acc_u;
          g.dv[x_i + i] = beta * acc_p;
        }
        g.dbeta[g_i] = dbeta;
        if (!g.dlog_gamma.empty()) g.dlog_gamma[g_i] = gate * (ds_dot_s - beta * pu);
        for (int64_t c = 0; c < dim; ++c) {
          double acc = 0;
          for (int64_t i = 0; i < dim; ++i) {
            acc += beta * ds[i * dim + c] * delta[i] - gate * beta * s_prev[i * dim + c] * pk[i];
          }
          g.dk[x_i + c] = acc;
        }
        for (int64_t i = 0; i < dim; ++i) {
          for (int64_t c = 0; c < dim; ++c) {
            ds[i * dim + c] = gate * (ds[i * dim + c] - beta * pk[i] * k[c]);
          }
        }
      }
    }
  }
  return g;
}

absl::Status DeltaReferenceForward(const DeltaInputs& in, const DeltaOptions& /*options*/,
                                   DeltaForwardOutputs* out) {
  const Forward64 r = ReferenceForward64(Delta64::FromInputs(in));
  std::copy(r.o.begin(), r.o.end(), out->o.begin());
  if (!out->s_final.empty()) std::copy(r.s_final.begin(), r.s_final.end(), out->s_final.begin());
  return absl::OkStatus();
}

absl::Status DeltaReferenceBackward(const DeltaInputs& in, const DeltaBackwardInputs& bwd,
                                    const DeltaOptions& /*options*/, DeltaGradients* grads) {
  const std::vector<double> d_o = ToDouble(bwd.d_o), ds_final = ToDouble(bwd.ds_final);
  const Gradients64 r = ReferenceBackward64(Delta64::FromInputs(in), d_o, ds_final);
  std::copy(r.dq.begin(), r.dq.end(), grads->dq.begin());
  std::copy(r.dk.begin(), r.dk.end(), grads->dk.begin());
  std::copy(r.dv.begin(), r.dv.end(), grads->dv.begin());
  std::copy(r.dbeta.begin(), r.dbeta.end(), grads->dbeta.begin());
  if (!grads->dlog_gamma.empty()) {
    std::copy(r.dlog_gamma.begin(), r.dlog_gamma.end(), grads->dlog_gamma.begin());
  }
  if (!grads->ds0.empty()) std::copy(r.ds0.begin(), r.ds0.end(), grads->ds0.begin());
  return absl::OkStatus();
}

}  // namespace mesa::kernels::deltanet
