#include "kernels/mlstm/recurrent.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/parallel_for.h"

namespace mesa::kernels::mlstm {
namespace {

template <typename T>
T LogSigmoid(T z) {
  return z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z));
}

template <typename T>
T Sigmoid(T z) {
  return T(1) / (T(1) + std::exp(-z));
}

// The state of one head: C' [Dv, Dk], n' [Dk], m.
template <typename T>
struct State {
  std::vector<T> c, n;
  T m = 0;
};

// The gates of one token.
template <typename T>
struct Gates {
  T m, fp, ip;  // the new stabiliser, f' and i'
  bool restart;
};

template <typename T>
Gates<T> TokenGates(T i_pre, T f_pre, T m_prev, bool restart) {
  Gates<T> g;
  g.restart = restart;
  if (restart) {  // f = 0 exactly: nothing of the earlier state survives
    g.m = i_pre;
    g.fp = 0;
    g.ip = 1;
    return g;
  }
  const T lf = LogSigmoid(f_pre);
  g.m = std::max(lf + m_prev, i_pre);
  g.fp = std::exp(lf + m_prev - g.m);
  g.ip = std::exp(i_pre - g.m);
  return g;
}

template <typename T>
using Problem = MlstmProblem<T>;
template <typename T>
using ForwardOut = MlstmForwardResult<T>;
template <typename T>
using BackwardIn = MlstmBackwardArgs<T>;
template <typename T>
using GradOut = MlstmGradientsOf<T>;

class Layout {
 public:
  explicit Layout(const MlstmDims& d) : d_(d) {}
  int64_t Key(int64_t b, int64_t t, int64_t h) const {
    return ((b * d_.seq_len + t) * d_.heads + h) * d_.key_dim;
  }
  int64_t Value(int64_t b, int64_t t, int64_t h) const {
    return ((b * d_.seq_len + t) * d_.heads + h) * d_.value_dim;
  }
  int64_t Gate(int64_t b, int64_t t, int64_t h) const {
    return (b * d_.seq_len + t) * d_.heads + h;
  }

 private:
  MlstmDims d_;
};

template <typename T>
State<T> InitialState(const Problem<T>& in, int64_t b, int64_t h) {
  const MlstmDims& d = in.dims;
  State<T> s;
  s.c.assign(d.value_dim * d.key_dim, T(0));
  s.n.assign(d.key_dim, T(0));
  if (!in.c0.empty()) {
    const int64_t bh = b * d.heads + h;
    std::copy_n(in.c0.begin() + bh * d.value_dim * d.key_dim, d.value_dim * d.key_dim, s.c.begin());
    std::copy_n(in.n0.begin() + bh * d.key_dim, d.key_dim, s.n.begin());
    s.m = in.m0[bh];
  }
  return s;
}

template <typename T>
bool Restart(const Problem<T>& in, int64_t b, int64_t t) {
  return !in.reset.empty() && in.reset[b * in.dims.seq_len + t] != 0;
}

// Advances `s` over token t and returns its gates.
template <typename T>
Gates<T> Advance(const Problem<T>& in, const Layout& at, int64_t b, int64_t t, int64_t h,
                 State<T>& s) {
  const MlstmDims& d = in.dims;
  const Gates<T> g =
      TokenGates<T>(in.i[at.Gate(b, t, h)], in.f[at.Gate(b, t, h)], s.m, Restart(in, b, t));
  const T* k = &in.k[at.Key(b, t, h)];
  const T* v = &in.v[at.Value(b, t, h)];
  for (int64_t r = 0; r < d.value_dim; ++r) {
    T* row = &s.c[r * d.key_dim];
    const T vr = g.ip * T(v[r]);
    for (int64_t j = 0; j < d.key_dim; ++j) row[j] = g.fp * row[j] + vr * T(k[j]);
  }
  for (int64_t j = 0; j < d.key_dim; ++j) s.n[j] = g.fp * s.n[j] + g.ip * T(k[j]);
  s.m = g.m;
  return g;
}

// The readout of token t from the state after it: num = C' q, den_raw = n'·q, den.
template <typename T>
struct Readout {
  std::vector<T> num;
  T den_raw, floor, den;
};

template <typename T>
void Read(const Problem<T>& in, const Layout& at, int64_t b, int64_t t, int64_t h,
          const State<T>& s, T eps, Readout<T>& out) {
  const MlstmDims& d = in.dims;
  const T* q = &in.q[at.Key(b, t, h)];
  out.num.assign(d.value_dim, T(0));
  for (int64_t r = 0; r < d.value_dim; ++r) {
    const T* row = &s.c[r * d.key_dim];
    T acc = 0;
    for (int64_t j = 0; j < d.key_dim; ++j) acc += row[j] * T(q[j]);
    out.num[r] = acc;
  }
  T nq = 0;
  for (int64_t j = 0; j < d.key_dim; ++j) nq += s.n[j] * T(q[j]);
  out.den_raw = nq;
  out.floor = std::exp(-s.m);
  out.den = std::max(std::abs(nq), out.floor) + eps;
}

template <typename T>
void Forward(const Problem<T>& in, const MlstmOptions& options, ForwardOut<T>& out) {
  const MlstmDims& d = in.dims;
  const Layout at(d);
  const int64_t tasks = d.batch * d.heads;
  ParallelFor(tasks, ResolveThreads(options.num_threads, tasks), [&](int64_t task, int) {
    const int64_t b = task / d.heads, h = task % d.heads;
    State<T> s = InitialState<T>(in, b, h);
    Readout<T> r;
    for (int64_t t = 0; t < d.seq_len; ++t) {
      Advance(in, at, b, t, h, s);
      Read(in, at, b, t, h, s, T(options.eps), r);
      T* o = &out.h[at.Value(b, t, h)];
      for (int64_t v = 0; v < d.value_dim; ++v) o[v] = r.num[v] / r.den;
    }
    if (!out.c_final.empty()) {
      const int64_t bh = b * d.heads + h;
      std::copy(s.c.begin(), s.c.end(), out.c_final.begin() + bh * d.value_dim * d.key_dim);
      std::copy(s.n.begin(), s.n.end(), out.n_final.begin() + bh * d.key_dim);
      out.m_final[bh] = s.m;
    }
  });
}

template <typename T>
void Backward(const Problem<T>& in, const MlstmOptions& options, const BackwardIn<T>& bwd,
              GradOut<T>& grads) {
  const MlstmDims& d = in.dims;
  const Layout at(d);
  const int64_t tasks = d.batch * d.heads, chunk = options.chunk_size;
  const int64_t chunks = (d.seq_len + chunk - 1) / chunk;
  const int64_t dv = d.value_dim, dk = d.key_dim;
  ParallelFor(tasks, ResolveThreads(options.num_threads, tasks), [&](int64_t task, int) {
    const int64_t b = task / d.heads, h = task % d.heads, bh = b * d.heads + h;
    // The state at the start of every chunk.
    std::vector<State<T>> starts;
    State<T> s = InitialState<T>(in, b, h);
    for (int64_t t = 0; t < d.seq_len; ++t) {
      if (t % chunk == 0) starts.push_back(s);
      Advance(in, at, b, t, h, s);
    }
    std::vector<T> dc(dv * dk, T(0)), dn(dk, T(0));
    if (!bwd.dc_final.empty()) {
      for (int64_t x = 0; x < dv * dk; ++x) dc[x] = bwd.dc_final[bh * dv * dk + x];
      for (int64_t j = 0; j < dk; ++j) dn[j] = bwd.dn_final[bh * dk + j];
    }
    std::vector<State<T>> states;  // states[r]: before token t0 + r; states[n]: after the chunk
    std::vector<Gates<T>> gates;
    Readout<T> rd;
    std::vector<T> dnum(dv);
    for (int64_t c = chunks - 1; c >= 0; --c) {
      const int64_t t0 = c * chunk, t1 = std::min(d.seq_len, t0 + chunk);
      states.assign(1, starts[c]);
      gates.clear();
      for (int64_t t = t0; t < t1; ++t) {
        State<T> next = states.back();
        gates.push_back(Advance(in, at, b, t, h, next));
        states.push_back(std::move(next));
      }
      for (int64_t t = t1 - 1; t >= t0; --t) {
        const State<T>& prev = states[t - t0];
        const State<T>& cur = states[t - t0 + 1];
        const Gates<T>& g = gates[t - t0];
        Read(in, at, b, t, h, cur, T(options.eps), rd);
        const T* q = &in.q[at.Key(b, t, h)];
        const T* k = &in.k[at.Key(b, t, h)];
        const T* v = &in.v[at.Value(b, t, h)];
        const T* e = &bwd.dh[at.Value(b, t, h)];
        // h = num / den: dnum = e / den, dden = -(e·h) / den, through |den_raw| where above
        // the floor.
        T e_h = 0;
        for (int64_t r = 0; r < dv; ++r) {
          dnum[r] = T(e[r]) / rd.den;
          e_h += T(e[r]) * rd.num[r] / rd.den;
        }
        const T dden = -e_h / rd.den;
        const T dden_raw =
            std::abs(rd.den_raw) > rd.floor ? (rd.den_raw >= 0 ? dden : -dden) : T(0);
        // dq = C'ᵀ dnum + dden_raw n'; then this token's terms into dC', dn'.
        T* dq = &grads.dq[at.Key(b, t, h)];
        for (int64_t j = 0; j < dk; ++j) {
          T acc = dden_raw * cur.n[j];
          for (int64_t r = 0; r < dv; ++r) acc += cur.c[r * dk + j] * dnum[r];
          dq[j] = acc;
        }
        for (int64_t r = 0; r < dv; ++r) {
          for (int64_t j = 0; j < dk; ++j) dc[r * dk + j] += dnum[r] * T(q[j]);
        }
        for (int64_t j = 0; j < dk; ++j) dn[j] += dden_raw * T(q[j]);
        // C' = f' C'_prev + i' v kᵀ, n' = f' n'_prev + i' k.
        T* dvv = &grads.dv[at.Value(b, t, h)];
        T* dkk = &grads.dk[at.Key(b, t, h)];
        T dip = 0;
        for (int64_t r = 0; r < dv; ++r) {
          T acc = 0;
          for (int64_t j = 0; j < dk; ++j) acc += dc[r * dk + j] * T(k[j]);
          dvv[r] = g.ip * acc;
          dip += T(v[r]) * acc;
        }
        for (int64_t j = 0; j < dk; ++j) {
          T acc = dn[j];
          for (int64_t r = 0; r < dv; ++r) acc += dc[r * dk + j] * T(v[r]);
          dkk[j] = g.ip * acc;
          dip += dn[j] * T(k[j]);
        }
        grads.di[at.Gate(b, t, h)] = dip * g.ip;
        T dlf = 0;
        if (!g.restart) {
          T dfp = 0;
          for (int64_t x = 0; x < dv * dk; ++x) dfp += dc[x] * prev.c[x];
          for (int64_t j = 0; j < dk; ++j) dfp += dn[j] * prev.n[j];
          dlf = dfp * g.fp;
        }
        const T f_pre = in.f[at.Gate(b, t, h)];
        grads.df[at.Gate(b, t, h)] = dlf * (T(1) - Sigmoid(f_pre));
        for (T& x : dc) x *= g.fp;
        for (T& x : dn) x *= g.fp;
      }
    }
    if (!grads.dc0.empty()) {
      std::copy(dc.begin(), dc.end(), grads.dc0.begin() + bh * dv * dk);
      std::copy(dn.begin(), dn.end(), grads.dn0.begin() + bh * dk);
    }
  });
}

}  // namespace

absl::Status RecurrentForward(const MlstmInputs& in, const MlstmOptions& options,
                              MlstmForwardOutputs* out) {
  MlstmProblem<float> p{in.dims, in.q, in.k, in.v, in.i, in.f, in.reset, in.c0, in.n0, in.m0};
  MlstmForwardResult<float> o{out->h, out->c_final, out->n_final, out->m_final};
  Forward(p, options, o);
  return absl::OkStatus();
}

absl::Status RecurrentBackward(const MlstmInputs& in, const MlstmOptions& options,
                               const MlstmBackwardInputs& bwd, MlstmGradients* grads) {
  MlstmProblem<float> p{in.dims, in.q, in.k, in.v, in.i, in.f, in.reset, in.c0, in.n0, in.m0};
  MlstmBackwardArgs<float> b{bwd.dh, bwd.dc_final, bwd.dn_final};
  MlstmGradientsOf<float> g{grads->dq, grads->dk,  grads->dv, grads->di,
                            grads->df, grads->dc0, grads->dn0};
  Backward(p, options, b, g);
  return absl::OkStatus();
}

void ReferenceForward64(const MlstmProblem<double>& in, double eps,
                        const MlstmForwardResult<double>& out) {
  MlstmOptions options{.impl = MlstmImpl::kReference, .num_threads = 1, .eps = eps};
  MlstmForwardResult<double> o = out;
  Forward(in, options, o);
}

void ReferenceBackward64(const MlstmProblem<double>& in, double eps,
                         const MlstmBackwardArgs<double>& bwd,
                         const MlstmGradientsOf<double>& grads) {
  MlstmOptions options{.impl = MlstmImpl::kReference, .num_threads = 1, .eps = eps};
  MlstmGradientsOf<double> g = grads;
  Backward(in, options, bwd, g);
}

}  // namespace mesa::kernels::mlstm
