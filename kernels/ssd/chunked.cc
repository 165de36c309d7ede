#include "kernels/ssd/chunked.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/parallel_for.h"
#include "kernels/ssd/gradient_sums.h"

namespace mesa::kernels::ssd {
namespace {

float Softplus(float z) { return z > 20.f ? z : std::log1p(std::exp(z)); }
float Sigmoid(float z) { return 1.f / (1.f + std::exp(-z)); }

// One head's view of one chunk of one row: the tokens' pointers and the decay structure.
struct Chunk {
  int64_t n = 0;                    // tokens
  std::vector<float> dt, u, cum;    // dt, softplus argument, cumulative log-decay (resets: 0)
  std::vector<int64_t> last_reset;  // per token: the last reset at or before it in the chunk, -1
  std::vector<const float*> x, b, c;

  // The decay over (i, r] (i <= r): 0 across a reset.
  float L(int64_t r, int64_t i) const {
    return last_reset[r] > i ? 0.f : std::exp(cum[r] - cum[i]);
  }
  // The decay over [0, r] (from the state before the chunk).
  float FromStart(int64_t r) const { return last_reset[r] >= 0 ? 0.f : std::exp(cum[r]); }
};

class Problem {
 public:
  Problem(const SsdInputs& in, int64_t chunk) : in_(in), d_(in.dims), q_(chunk) {}

  int64_t Chunks() const { return (d_.seq_len + q_ - 1) / q_; }

  void Load(int64_t b, int64_t h, int64_t ci, Chunk& k) const {
    const int64_t t0 = ci * q_, n = std::min(d_.seq_len - t0, q_), g = h / d_.HeadsPerGroup();
    const float a = -std::exp(in_.a_log[h]);
    k.n = n;
    k.dt.resize(n);
    k.u.resize(n);
    k.cum.resize(n);
    k.last_reset.resize(n);
    k.x.resize(n);
    k.b.resize(n);
    k.c.resize(n);
    float cum = 0;
    int64_t last = -1;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = t0 + r, bt = b * d_.seq_len + t;
      k.u[r] = in_.dt[bt * d_.heads + h] + in_.dt_bias[h];
      k.dt[r] = Softplus(k.u[r]);
      const bool reset = !in_.reset.empty() && in_.reset[bt] != 0;
      if (reset) {
        last = r;
      } else {
        cum += k.dt[r] * a;
      }
      k.cum[r] = cum;
      k.last_reset[r] = last;
      k.x[r] = &in_.x[(bt * d_.heads + h) * d_.head_dim];
      k.b[r] = &in_.b[(bt * d_.groups + g) * d_.state_dim];
      k.c[r] = &in_.c[(bt * d_.groups + g) * d_.state_dim];
    }
  }

  // S <- decay S + Σ_i L[n-1, i] dt_i x_i B_iᵀ.
  void Pass(const Chunk& k, std::vector<float>& s) const {
    const int64_t P = d_.head_dim, N = d_.state_dim;
    const float keep = k.FromStart(k.n - 1);
    for (float& v : s) v *= keep;
    for (int64_t i = 0; i < k.n; ++i) {
      const float w = k.L(k.n - 1, i) * k.dt[i];
      if (w == 0.f) continue;
      for (int64_t p = 0; p < P; ++p) {
        const float wx = w * k.x[i][p];
        float* row = &s[p * N];
        for (int64_t n = 0; n < N; ++n) row[n] += wx * k.b[i][n];
      }
    }
  }

  std::vector<float> Initial(int64_t b, int64_t h) const {
    std::vector<float> s(d_.head_dim * d_.state_dim, 0.f);
    if (!in_.s0.empty()) {
      std::copy_n(in_.s0.begin() + (b * d_.heads + h) * s.size(), s.size(), s.begin());
    }
    return s;
  }

  const SsdInputs& in() const { return in_; }
  const SsdDims& dims() const { return d_; }
  int64_t q() const { return q_; }

 private:
  const SsdInputs& in_;
  SsdDims d_;
  int64_t q_;
};

float Dot(const float* a, const float* b, int64_t n) {
  float acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

}  // namespace

void SsdChunkedForward(const SsdInputs& in, const SsdOptions& options,
                       const SsdForwardOutputs& out) {
  const Problem pr(in, options.chunk_size);
  const SsdDims& d = in.dims;
  const int64_t P = d.head_dim, N = d.state_dim, tasks = d.batch * d.heads;
  ParallelFor(tasks, ResolveThreads(options.num_threads, tasks), [&](int64_t task, int) {
    const int64_t b = task / d.heads, h = task % d.heads;
    std::vector<float> s = pr.Initial(b, h), cb;
    Chunk k;
    for (int64_t ci = 0; ci < pr.Chunks(); ++ci) {
      pr.Load(b, h, ci, k);
      cb.assign(k.n * k.n, 0.f);  // M[r, i] = L[r, i] dt_i (C_r · B_i)
      for (int64_t r = 0; r < k.n; ++r) {
        for (int64_t i = 0; i <= r; ++i)
          cb[r * k.n + i] = k.L(r, i) * k.dt[i] * Dot(k.c[r], k.b[i], N);
      }
      for (int64_t r = 0; r < k.n; ++r) {
        const int64_t bt = b * d.seq_len + ci * pr.q() + r;
        float* y = &out.y[(bt * d.heads + h) * P];
        const float from = k.FromStart(r);
        for (int64_t p = 0; p < P; ++p) {
          float acc = in.d[h] * k.x[r][p];
          if (from != 0.f) acc += from * Dot(&s[p * N], k.c[r], N);
          for (int64_t i = 0; i <= r; ++i) acc += cb[r * k.n + i] * k.x[i][p];
          y[p] = acc;
        }
      }
      pr.Pass(k, s);
    }
    if (!out.s_final.empty()) std::copy(s.begin(), s.end(), out.s_final.begin() + task * P * N);
  });
}

void SsdChunkedBackward(const SsdInputs& in, const SsdOptions& options,
                        const SsdBackwardInputs& bwd, const SsdGradients& grads) {
  const Problem pr(in, options.chunk_size);
  const SsdDims& d = in.dims;
  const int64_t P = d.head_dim, N = d.state_dim, tasks = d.batch * d.heads;
  SsdPartialGradients<float> partial(d);
  ParallelFor(tasks, ResolveThreads(options.num_threads, tasks), [&](int64_t task, int) {
    const int64_t b = task / d.heads, h = task % d.heads;
    const float a = -std::exp(in.a_log[h]);
    // The state before every chunk.
    std::vector<std::vector<float>> starts;
    std::vector<float> s = pr.Initial(b, h);
    Chunk k;
    for (int64_t ci = 0; ci < pr.Chunks(); ++ci) {
      starts.push_back(s);
      pr.Load(b, h, ci, k);
      pr.Pass(k, s);
    }
    std::vector<float> sigma(P * N, 0.f), dstart(P * N);
    if (!bwd.ds_final.empty())
      std::copy_n(bwd.ds_final.begin() + task * P * N, P * N, sigma.begin());
    std::vector<float> g, dfrom, ddt_w, dl, ex;
    float da = 0, dbias = 0, dd = 0;
    for (int64_t ci = pr.Chunks() - 1; ci >= 0; --ci) {
      pr.Load(b, h, ci, k);
      const std::vector<float>& sc = starts[ci];
      const int64_t n = k.n, t0 = ci * pr.q();
      // g[r, i] = ∂L/∂L[r, i] · L[r, i] (for the decay gradients), dfrom[r] likewise for the
      // decay from the chunk start; the last row also takes the state pass's terms.
      g.assign(n * n, 0.f);
      dfrom.assign(n, 0.f);
      ddt_w.assign(n, 0.f);
      ex.assign(n * n, 0.f);  // E_r · x_i
      auto e_of = [&](int64_t r) {
        return &bwd.dy[(((b * d.seq_len + t0 + r) * d.heads) + h) * P];
      };
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t i = 0; i <= r; ++i) ex[r * n + i] = Dot(e_of(r), k.x[i], P);
      }
      // dstart = decay_end · sigma + Σ_r FromStart(r) E_r C_rᵀ.
      const float keep = k.FromStart(n - 1);
      for (int64_t j = 0; j < P * N; ++j) dstart[j] = keep * sigma[j];
      float sig_sc = 0;
      for (int64_t j = 0; j < P * N; ++j) sig_sc += sigma[j] * sc[j];
      float from_end_grad = sig_sc * keep;  // the state pass's decay term
      for (int64_t r = 0; r < n; ++r) {
        const int64_t bt = b * d.seq_len + t0 + r;
        const float* e = e_of(r);
        float* dx = &grads.dx[(bt * d.heads + h) * P];
        float* dc = &partial.dc_head[(bt * d.heads + h) * N];
        float* db = &partial.db_head[(bt * d.heads + h) * N];
        std::fill(dx, dx + P, 0.f);
        std::fill(dc, dc + N, 0.f);
        std::fill(db, db + N, 0.f);
        for (int64_t p = 0; p < P; ++p) {
          dx[p] = in.d[h] * e[p];
          dd += e[p] * k.x[r][p];
        }
        const float from = k.FromStart(r);
        if (from != 0.f) {
          // y_r += from S_c C_r: dC_r += from S_cᵀ e, dS_c += from e C_rᵀ.
          float e_sc = 0;
          for (int64_t p = 0; p < P; ++p) {
            const float* row = &sc[p * N];
            float* drow = &dstart[p * N];
            for (int64_t nn = 0; nn < N; ++nn) {
              dc[nn] += from * row[nn] * e[p];
              drow[nn] += from * e[p] * k.c[r][nn];
              e_sc += e[p] * row[nn] * k.c[r][nn];
            }
          }
          dfrom[r] = e_sc * from;
        }
      }
      // The intra-chunk part and the state pass's write terms.
      std::vector<float> sb(P);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t bt = b * d.seq_len + t0 + i;
        float* dx = &grads.dx[(bt * d.heads + h) * P];
        float* db = &partial.db_head[(bt * d.heads + h) * N];
        for (int64_t r = i; r < n; ++r) {
          const float l = k.L(r, i);
          if (l == 0.f) continue;
          const float cb = Dot(k.c[r], k.b[i], N);
          const float* e = e_of(r);
          const float coef = l * k.dt[i];
          for (int64_t p = 0; p < P; ++p) dx[p] += coef * cb * e[p];
          for (int64_t nn = 0; nn < N; ++nn) {
            db[nn] += coef * ex[r * n + i] * k.c[r][nn];
            partial.dc_head[((b * d.seq_len + t0 + r) * d.heads + h) * N + nn] +=
                coef * ex[r * n + i] * k.b[i][nn];
          }
          ddt_w[i] += l * cb * ex[r * n + i];
          if (r > i) g[r * n + i] += k.dt[i] * cb * ex[r * n + i] * l;
        }
        // The state pass: S_next += L[n-1, i] dt_i x_i B_iᵀ.
        const float l = k.L(n - 1, i);
        if (l != 0.f) {
          float xsb = 0;
          for (int64_t p = 0; p < P; ++p) {
            sb[p] = Dot(&sigma[p * N], k.b[i], N);
            xsb += k.x[i][p] * sb[p];
          }
          for (int64_t p = 0; p < P; ++p) dx[p] += l * k.dt[i] * sb[p];
          for (int64_t nn = 0; nn < N; ++nn) {
            float stx = 0;
            for (int64_t p = 0; p < P; ++p) stx += sigma[p * N + nn] * k.x[i][p];
            db[nn] += l * k.dt[i] * stx;
          }
          ddt_w[i] += l * xsb;
          if (i < n - 1) g[(n - 1) * n + i] += k.dt[i] * xsb * l;
        }
      }
      // Decay gradients: ℓ_s enters L[r, i] for i < s <= r, FromStart(r) for s <= r and the
      // pass's decay for every s. dl_s = Σ_{r>=s, i<s} g[r, i] + Σ_{r>=s} dfrom[r] + end.
      dl.assign(n, 0.f);
      float inner = 0;  // Σ_{r>=s, i<s} g[r, i], updated from s to s + 1
      float from_tail = 0;
      for (int64_t r = 0; r < n; ++r) from_tail += dfrom[r];
      for (int64_t s2 = 0; s2 < n; ++s2) {
        if (s2 > 0) {
          for (int64_t r = s2; r < n; ++r) inner += g[r * n + (s2 - 1)];
          for (int64_t i = 0; i < s2 - 1; ++i) inner -= g[(s2 - 1) * n + i];
        }
        dl[s2] = inner + from_tail + from_end_grad;
        from_tail -= dfrom[s2];
      }
      for (int64_t s2 = 0; s2 < n; ++s2) {
        const int64_t bt = b * d.seq_len + t0 + s2;
        const bool reset = k.last_reset[s2] == s2;
        float ddt = ddt_w[s2];
        if (!reset) {
          ddt += a * dl[s2];
          da += k.dt[s2] * dl[s2];
        }
        const float du = ddt * Sigmoid(k.u[s2]);
        grads.ddt[bt * d.heads + h] = du;
        dbias += du;
      }
      sigma.swap(dstart);
    }
    if (!grads.ds0.empty()) std::copy(sigma.begin(), sigma.end(), grads.ds0.begin() + task * P * N);
    partial.da_log[task] = da * a;  // dA/dA_log = A
    partial.dt_bias[task] = dbias;
    partial.skip[task] = dd;
  });
  partial.SumInto(d, grads.da_log, grads.ddt_bias, grads.dd, grads.db, grads.dc);
}

}  // namespace mesa::kernels::ssd
