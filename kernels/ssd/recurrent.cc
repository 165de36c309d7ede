#include "kernels/ssd/recurrent.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/parallel_for.h"
#include "kernels/ssd/gradient_sums.h"

namespace mesa::kernels::ssd {
namespace {

template <typename T>
T Softplus(T z) {
  return z > T(20) ? z : std::log1p(std::exp(z));
}

template <typename T>
T Sigmoid(T z) {
  return T(1) / (T(1) + std::exp(-z));
}

class Layout {
 public:
  explicit Layout(const SsdDims& d) : d_(d) {}
  int64_t X(int64_t b, int64_t t, int64_t h) const {
    return ((b * d_.seq_len + t) * d_.heads + h) * d_.head_dim;
  }
  int64_t Gate(int64_t b, int64_t t, int64_t h) const {
    return (b * d_.seq_len + t) * d_.heads + h;
  }
  // B and C of head h's group.
  int64_t Bc(int64_t b, int64_t t, int64_t h) const {
    return ((b * d_.seq_len + t) * d_.groups + h / d_.HeadsPerGroup()) * d_.state_dim;
  }
  // Per-head B and C gradient rows (summed over the group afterwards).
  int64_t HeadBc(int64_t b, int64_t t, int64_t h) const {
    return ((b * d_.seq_len + t) * d_.heads + h) * d_.state_dim;
  }
  int64_t State(int64_t b, int64_t h) const {
    return (b * d_.heads + h) * d_.head_dim * d_.state_dim;
  }

 private:
  SsdDims d_;
};

// The scalars of one token: dt, the decay a (0 at a reset) and the softplus argument.
template <typename T>
struct Step {
  T dt, a, u;
  bool restart;
};

template <typename T>
Step<T> TokenStep(const SsdProblem<T>& in, const Layout& at, int64_t b, int64_t t, int64_t h) {
  Step<T> s;
  s.u = in.dt[at.Gate(b, t, h)] + in.dt_bias[h];
  s.dt = Softplus(s.u);
  s.restart = !in.reset.empty() && in.reset[b * in.dims.seq_len + t] != 0;
  s.a = s.restart ? T(0) : std::exp(-s.dt * std::exp(in.a_log[h]));
  return s;
}

// S = a S + dt x Bᵀ over token t; returns the token's scalars.
template <typename T>
Step<T> Advance(const SsdProblem<T>& in, const Layout& at, int64_t b, int64_t t, int64_t h,
                std::vector<T>& s) {
  const SsdDims& d = in.dims;
  const Step<T> st = TokenStep(in, at, b, t, h);
  const T* x = &in.x[at.X(b, t, h)];
  const T* bb = &in.b[at.Bc(b, t, h)];
  for (int64_t p = 0; p < d.head_dim; ++p) {
    T* row = &s[p * d.state_dim];
    const T w = st.dt * x[p];
    for (int64_t n = 0; n < d.state_dim; ++n) row[n] = st.a * row[n] + w * bb[n];
  }
  return st;
}

template <typename T>
std::vector<T> InitialState(const SsdProblem<T>& in, const Layout& at, int64_t b, int64_t h) {
  const int64_t elems = in.dims.head_dim * in.dims.state_dim;
  std::vector<T> s(elems, T(0));
  if (!in.s0.empty()) std::copy_n(in.s0.begin() + at.State(b, h), elems, s.begin());
  return s;
}

}  // namespace

template <typename T>
void SsdRecurrentForward(const SsdProblem<T>& in, const SsdOptions& options,
                         const SsdForwardResult<T>& out) {
  const SsdDims& d = in.dims;
  const Layout at(d);
  const int64_t tasks = d.batch * d.heads;
  ParallelFor(tasks, ResolveThreads(options.num_threads, tasks), [&](int64_t task, int) {
    const int64_t b = task / d.heads, h = task % d.heads;
    std::vector<T> s = InitialState(in, at, b, h);
    for (int64_t t = 0; t < d.seq_len; ++t) {
      Advance(in, at, b, t, h, s);
      const T* x = &in.x[at.X(b, t, h)];
      const T* c = &in.c[at.Bc(b, t, h)];
      T* y = &out.y[at.X(b, t, h)];
      for (int64_t p = 0; p < d.head_dim; ++p) {
        const T* row = &s[p * d.state_dim];
        T acc = 0;
        for (int64_t n = 0; n < d.state_dim; ++n) acc += row[n] * c[n];
        y[p] = acc + in.d[h] * x[p];
      }
    }
    if (!out.s_final.empty()) std::copy(s.begin(), s.end(), out.s_final.begin() + at.State(b, h));
  });
}

template <typename T>
void SsdRecurrentBackward(const SsdProblem<T>& in, const SsdOptions& options,
                          const SsdBackwardArgs<T>& bwd, const SsdGradientsOf<T>& grads) {
  const SsdDims& d = in.dims;
  const Layout at(d);
  const int64_t tasks = d.batch * d.heads, chunk = options.chunk_size;
  const int64_t chunks = (d.seq_len + chunk - 1) / chunk;
  const int64_t P = d.head_dim, N = d.state_dim;
  SsdPartialGradients<T> partial(d);
  ParallelFor(tasks, ResolveThreads(options.num_threads, tasks), [&](int64_t task, int) {
    const int64_t b = task / d.heads, h = task % d.heads;
    const T A = -std::exp(in.a_log[h]);
    std::vector<std::vector<T>> starts;
    std::vector<T> s = InitialState(in, at, b, h);
    for (int64_t t = 0; t < d.seq_len; ++t) {
      if (t % chunk == 0) starts.push_back(s);
      Advance(in, at, b, t, h, s);
    }
    // sigma = dL/dS_t, flowing backwards.
    std::vector<T> sigma(P * N, T(0));
    if (!bwd.ds_final.empty()) {
      std::copy_n(bwd.ds_final.begin() + at.State(b, h), P * N, sigma.begin());
    }
    std::vector<std::vector<T>> states;  // states[r]: before token t0 + r
    std::vector<Step<T>> steps;
    T da = 0, dbias = 0, dd = 0;
    for (int64_t ci = chunks - 1; ci >= 0; --ci) {
      const int64_t t0 = ci * chunk, t1 = std::min(d.seq_len, t0 + chunk);
      states.assign(1, starts[ci]);
      steps.clear();
      for (int64_t t = t0; t < t1; ++t) {
        std::vector<T> next = states.back();
        steps.push_back(Advance(in, at, b, t, h, next));
        states.push_back(std::move(next));
      }
      for (int64_t t = t1 - 1; t >= t0; --t) {
        const std::vector<T>& prev = states[t - t0];
        const std::vector<T>& cur = states[t - t0 + 1];
        const Step<T>& st = steps[t - t0];
        const T* x = &in.x[at.X(b, t, h)];
        const T* bb = &in.b[at.Bc(b, t, h)];
        const T* c = &in.c[at.Bc(b, t, h)];
        const T* e = &bwd.dy[at.X(b, t, h)];
        T* dc = &partial.dc_head[at.HeadBc(b, t, h)];
        T* db = &partial.db_head[at.HeadBc(b, t, h)];
        T* dx = &grads.dx[at.X(b, t, h)];
        // y = S C + D x: dC = Sᵀ e, sigma += e Cᵀ, dD += e·x.
        std::fill(dc, dc + N, T(0));
        for (int64_t p = 0; p < P; ++p) {
          const T* row = &cur[p * N];
          T* srow = &sigma[p * N];
          for (int64_t n = 0; n < N; ++n) {
            dc[n] += row[n] * e[p];
            srow[n] += e[p] * c[n];
          }
          dd += e[p] * x[p];
        }
        // S = a S_prev + dt x Bᵀ: dx = D e + dt sigma B, dB = dt sigmaᵀ x, ddt = xᵀ sigma B.
        std::fill(db, db + N, T(0));
        T ddt = 0;
        for (int64_t p = 0; p < P; ++p) {
          const T* srow = &sigma[p * N];
          T sb = 0;
          for (int64_t n = 0; n < N; ++n) {
            sb += srow[n] * bb[n];
            db[n] += st.dt * srow[n] * x[p];
          }
          dx[p] = in.d[h] * e[p] + st.dt * sb;
          ddt += x[p] * sb;
        }
        if (!st.restart) {
          // a = exp(dt A): dL/d(dt A) = a <sigma, S_prev>.
          T dprev = 0;
          for (int64_t k = 0; k < P * N; ++k) dprev += sigma[k] * prev[k];
          const T dl = dprev * st.a;
          ddt += A * dl;
          da += st.dt * dl;  // dL/dA
        }
        const T du = ddt * Sigmoid(st.u);
        grads.ddt[at.Gate(b, t, h)] = du;
        dbias += du;
        for (T& v : sigma) v *= st.a;
      }
    }
    if (!grads.ds0.empty())
      std::copy(sigma.begin(), sigma.end(), grads.ds0.begin() + at.State(b, h));
    partial.da_log[task] = da * A;  // dA/dA_log = A
    partial.dt_bias[task] = dbias;
    partial.skip[task] = dd;
  });
  partial.SumInto(d, grads.da_log, grads.ddt_bias, grads.dd, grads.db, grads.dc);
}

template void SsdRecurrentForward<float>(const SsdProblem<float>&, const SsdOptions&,
                                         const SsdForwardResult<float>&);
template void SsdRecurrentForward<double>(const SsdProblem<double>&, const SsdOptions&,
                                          const SsdForwardResult<double>&);
template void SsdRecurrentBackward<float>(const SsdProblem<float>&, const SsdOptions&,
                                          const SsdBackwardArgs<float>&,
                                          const SsdGradientsOf<float>&);
template void SsdRecurrentBackward<double>(const SsdProblem<double>&, const SsdOptions&,
                                           const SsdBackwardArgs<double>&,
                                           const SsdGradientsOf<double>&);

}  // namespace mesa::kernels::ssd
