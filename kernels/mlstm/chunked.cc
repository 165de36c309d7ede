#include "kernels/mlstm/chunked.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/parallel_for.h"

namespace mesa::kernels::mlstm {
namespace {

float LogSigmoid(float z) {
  return z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z));
}
float Sigmoid(float z) { return 1.f / (1.f + std::exp(-z)); }

float Dot(const float* a, const float* b, int64_t n) {
  float acc = 0;
  for (int64_t j = 0; j < n; ++j) acc += a[j] * b[j];
  return acc;
}

// The state of one head: C' [Dv, Dk], n' [Dk], m.
struct HeadState {
  std::vector<float> c, n;
  float m = 0;
};

// One head's view of one chunk of one row.
struct Chunk {
  int64_t t0 = 0, n = 0;
  float m_start = 0;                // m before the chunk
  std::vector<float> b, m, ig;      // cumulative log f (restarting at a reset), m_r, ĩ
  std::vector<int64_t> last_reset;  // per token: the last reset at or before it in the chunk, -1
  std::vector<const float*> q, k, v;

  // W[r, i] (i <= r): zero across a reset.
  float W(int64_t r, int64_t i) const {
    return last_reset[r] > i ? 0.f : std::exp(b[r] - b[i] + ig[i] - m[r]);
  }
  // g_r: the weight of the chunk-start state at row r.
  float FromStart(int64_t r) const {
    return last_reset[r] >= 0 ? 0.f : std::exp(b[r] + m_start - m[r]);
  }
};

class Problem {
 public:
  Problem(const MlstmInputs& in, int64_t chunk) : in_(in), d_(in.dims), q_(chunk) {}

  int64_t Chunks() const { return (d_.seq_len + q_ - 1) / q_; }
  int64_t Gate(int64_t b, int64_t t, int64_t h) const {
    return (b * d_.seq_len + t) * d_.heads + h;
  }

  void Load(int64_t b, int64_t h, int64_t ci, float m_start, Chunk& k) const {
    const int64_t t0 = ci * q_, n = std::min(d_.seq_len - t0, q_);
    k.t0 = t0;
    k.n = n;
    k.m_start = m_start;
    for (auto* v : {&k.b, &k.m, &k.ig}) v->resize(n);
    k.last_reset.resize(n);
    k.q.resize(n);
    k.k.resize(n);
    k.v.resize(n);
    float cum = 0, m = m_start;
    int64_t last = -1;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = t0 + r, g = Gate(b, t, h);
      const bool reset = !in_.reset.empty() && in_.reset[b * d_.seq_len + t] != 0;
      k.ig[r] = in_.i[g];
      if (reset) {  // f = 0 exactly
        last = r;
        cum = 0;
        m = k.ig[r];
      } else {
        const float lf = LogSigmoid(in_.f[g]);
        cum += lf;
        m = std::max(lf + m, k.ig[r]);
      }
      k.b[r] = cum;
      k.m[r] = m;
      k.last_reset[r] = last;
      k.q[r] = &in_.q[g * d_.key_dim];
      k.k[r] = &in_.k[g * d_.key_dim];
      k.v[r] = &in_.v[g * d_.value_dim];
    }
  }

  HeadState Initial(int64_t b, int64_t h) const {
    HeadState s;
    s.c.assign(d_.value_dim * d_.key_dim, 0.f);
    s.n.assign(d_.key_dim, 0.f);
    if (!in_.c0.empty()) {
      const int64_t bh = b * d_.heads + h;
      std::copy_n(in_.c0.begin() + bh * s.c.size(), s.c.size(), s.c.begin());
      std::copy_n(in_.n0.begin() + bh * s.n.size(), s.n.size(), s.n.begin());
      s.m = in_.m0[bh];
    }
    return s;
  }

  // C' <- G C' + Σ_i W[n-1, i] v_i k_iᵀ (n' likewise), m <- m_{n-1}.
  void Pass(const Chunk& k, HeadState& s) const {
    const int64_t K = d_.key_dim, V = d_.value_dim;
    const float keep = k.FromStart(k.n - 1);
    for (float& x : s.c) x *= keep;
    for (float& x : s.n) x *= keep;
    for (int64_t i = 0; i < k.n; ++i) {
      const float w = k.W(k.n - 1, i);
      if (w == 0.f) continue;
      for (int64_t r = 0; r < V; ++r) {
        const float wv = w * k.v[i][r];
        float* row = &s.c[r * K];
        for (int64_t j = 0; j < K; ++j) row[j] += wv * k.k[i][j];
      }
      for (int64_t j = 0; j < K; ++j) s.n[j] += w * k.k[i][j];
    }
    s.m = k.m[k.n - 1];
  }

  // Row r's numerator [Dv] and raw denominator (before the floor) from the chunk-start state.
  float Read(const Chunk& k, const HeadState& start, int64_t r, float* num) const {
    const int64_t K = d_.key_dim, V = d_.value_dim;
    const float g = k.FromStart(r);
    float den = 0;
    for (int64_t x = 0; x < V; ++x) num[x] = g == 0.f ? 0.f : g * Dot(&start.c[x * K], k.q[r], K);
    if (g != 0.f) den = g * Dot(start.n.data(), k.q[r], K);
    for (int64_t i = 0; i <= r; ++i) {
      const float w = k.W(r, i);
      if (w == 0.f) continue;
      const float s = w * Dot(k.q[r], k.k[i], K);
      den += s;
      for (int64_t x = 0; x < V; ++x) num[x] += s * k.v[i][x];
    }
    return den;
  }

  const MlstmDims& dims() const { return d_; }
  int64_t q() const { return q_; }

 private:
  const MlstmInputs& in_;
  MlstmDims d_;
  int64_t q_;
};

}  // namespace

void ChunkedForward(const MlstmInputs& in, const MlstmOptions& options,
                    const MlstmForwardOutputs& out) {
  const Problem pr(in, options.chunk_size);
  const MlstmDims& d = in.dims;
  const int64_t V = d.value_dim, K = d.key_dim, tasks = d.batch * d.heads;
  const float eps = static_cast<float>(options.eps);
  ParallelFor(tasks, ResolveThreads(options.num_threads, tasks), [&](int64_t task, int) {
    const int64_t b = task / d.heads, h = task % d.heads;
    HeadState s = pr.Initial(b, h);
    Chunk k;
    std::vector<float> num(V);
    for (int64_t ci = 0; ci < pr.Chunks(); ++ci) {
      pr.Load(b, h, ci, s.m, k);
      for (int64_t r = 0; r < k.n; ++r) {
        const float den = pr.Read(k, s, r, num.data());
        const float scale = 1.f / (std::max(std::abs(den), std::exp(-k.m[r])) + eps);
        float* o = &out.h[pr.Gate(b, k.t0 + r, h) * V];
        for (int64_t x = 0; x < V; ++x) o[x] = num[x] * scale;
      }
      pr.Pass(k, s);
    }
    if (!out.c_final.empty()) {
      std::copy(s.c.begin(), s.c.end(), out.c_final.begin() + task * V * K);
      std::copy(s.n.begin(), s.n.end(), out.n_final.begin() + task * K);
      out.m_final[task] = s.m;
    }
  });
}

void ChunkedBackward(const MlstmInputs& in, const MlstmOptions& options,
                     const MlstmBackwardInputs& bwd, const MlstmGradients& grads) {
  const Problem pr(in, options.chunk_size);
  const MlstmDims& d = in.dims;
  const int64_t V = d.value_dim, K = d.key_dim, T = d.seq_len, tasks = d.batch * d.heads;
  const float eps = static_cast<float>(options.eps);
  ParallelFor(tasks, ResolveThreads(options.num_threads, tasks), [&](int64_t task, int) {
    const int64_t b = task / d.heads, h = task % d.heads;
    std::vector<HeadState> starts;
    HeadState s = pr.Initial(b, h);
    Chunk k;
    for (int64_t ci = 0; ci < pr.Chunks(); ++ci) {
      starts.push_back(s);
      pr.Load(b, h, ci, s.m, k);
      pr.Pass(k, s);
    }
    // dC', dn': the gradient of the state after the current chunk.
    std::vector<float> dc(V * K, 0.f), dn(K, 0.f), dc_prev(V * K), dn_prev(K);
    // Φ_final = <dC'_T, C'_T> + dn'_T·n'_T: the final state's share of every ∂log f.
    double phi_final = 0;
    if (!bwd.dc_final.empty()) {
      std::copy_n(bwd.dc_final.begin() + task * V * K, V * K, dc.begin());
      std::copy_n(bwd.dn_final.begin() + task * K, K, dn.begin());
      for (int64_t x = 0; x < V * K; ++x) phi_final += double(dc[x]) * s.c[x];
      for (int64_t j = 0; j < K; ++j) phi_final += double(dn[j]) * s.n[j];
    }
    // Per token: R_t = ê_t·num_t + δden_t den_t (the readout's response to a rescaled memory)
    // and ∂ĩ_t; ∂log f_t = Σ_{s ≥ t, same document} (R_s − ∂ĩ_s) + Φ_final.
    std::vector<double> rescale(T), dig(T);
    std::vector<float> num(V), e_hat, dden, a, sx;
    for (int64_t ci = pr.Chunks() - 1; ci >= 0; --ci) {
      const HeadState& start = starts[ci];
      pr.Load(b, h, ci, start.m, k);
      const int64_t n = k.n;
      e_hat.assign(n * V, 0.f);
      dden.assign(n, 0.f);
      for (int64_t r = 0; r < n; ++r) {
        const float den = pr.Read(k, start, r, num.data());
        const float floor = std::exp(-k.m[r]);
        const float scale = 1.f / (std::max(std::abs(den), floor) + eps);
        const float* e = &bwd.dh[pr.Gate(b, k.t0 + r, h) * V];
        float e_h = 0;
        for (int64_t x = 0; x < V; ++x) {
          e_hat[r * V + x] = e[x] * scale;
          e_h += e[x] * num[x] * scale;
        }
        if (std::abs(den) > floor) dden[r] = (den >= 0 ? -e_h : e_h) * scale;
        rescale[k.t0 + r] = double(e_h) + double(dden[r]) * den;
      }
      // A[r, i] = W (ê_r·v_i + δden_r) = ∂L/∂(q_r·k_i); sx[r, i] = W (q_r·k_i).
      a.assign(n * n, 0.f);
      sx.assign(n * n, 0.f);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t i = 0; i <= r; ++i) {
          const float w = k.W(r, i);
          if (w == 0.f) continue;
          a[r * n + i] = w * (Dot(&e_hat[r * V], k.v[i], V) + dden[r]);
          sx[r * n + i] = w * Dot(k.q[r], k.k[i], K);
        }
      }
      for (int64_t r = 0; r < n; ++r) {
        const int64_t g = pr.Gate(b, k.t0 + r, h);
        float* dq = &grads.dq[g * K];
        std::fill(dq, dq + K, 0.f);
        const float from = k.FromStart(r);
        if (from != 0.f) {  // o_r += g_r C'_c q_r: dq += g_r (C'_cᵀ ê_r + δden_r n'_c)
          for (int64_t j = 0; j < K; ++j) {
            float acc = dden[r] * start.n[j];
            for (int64_t x = 0; x < V; ++x) acc += start.c[x * K + j] * e_hat[r * V + x];
            dq[j] = from * acc;
          }
        }
        for (int64_t i = 0; i <= r; ++i) {
          const float c = a[r * n + i];
          if (c == 0.f) continue;
          for (int64_t j = 0; j < K; ++j) dq[j] += c * k.k[i][j];
        }
      }
      for (int64_t i = 0; i < n; ++i) {
        const int64_t g = pr.Gate(b, k.t0 + i, h);
        float* dk = &grads.dk[g * K];
        float* dv = &grads.dv[g * V];
        std::fill(dk, dk + K, 0.f);
        std::fill(dv, dv + V, 0.f);
        const float w = k.W(n - 1, i);  // the state pass's write of token i
        if (w != 0.f) {
          for (int64_t j = 0; j < K; ++j) {
            float acc = dn[j];
            for (int64_t x = 0; x < V; ++x) acc += dc[x * K + j] * k.v[i][x];
            dk[j] = w * acc;
          }
          for (int64_t x = 0; x < V; ++x) dv[x] = w * Dot(&dc[x * K], k.k[i], K);
        }
        for (int64_t r = i; r < n; ++r) {
          const float c = a[r * n + i], sc = sx[r * n + i];
          if (c != 0.f) {
            for (int64_t j = 0; j < K; ++j) dk[j] += c * k.q[r][j];
          }
          if (sc != 0.f) {
            for (int64_t x = 0; x < V; ++x) dv[x] += sc * e_hat[r * V + x];
          }
        }
        const float di = Dot(dk, k.k[i], K);
        grads.di[g] = di;
        dig[k.t0 + i] = di;
      }
      // The carry to the chunk before: dC'_c = G dC' + Σ_r g_r ê_r q_rᵀ, dn'_c likewise.
      const float keep = k.FromStart(n - 1);
      for (int64_t x = 0; x < V * K; ++x) dc_prev[x] = keep * dc[x];
      for (int64_t j = 0; j < K; ++j) dn_prev[j] = keep * dn[j];
      for (int64_t r = 0; r < n; ++r) {
        const float from = k.FromStart(r);
        if (from == 0.f) continue;
        for (int64_t x = 0; x < V; ++x) {
          const float ce = from * e_hat[r * V + x];
          for (int64_t j = 0; j < K; ++j) dc_prev[x * K + j] += ce * k.q[r][j];
        }
        for (int64_t j = 0; j < K; ++j) dn_prev[j] += from * dden[r] * k.q[r][j];
      }
      dc.swap(dc_prev);
      dn.swap(dn_prev);
    }
    if (!grads.dc0.empty()) {
      std::copy(dc.begin(), dc.end(), grads.dc0.begin() + task * V * K);
      std::copy(dn.begin(), dn.end(), grads.dn0.begin() + task * K);
    }
    double acc = phi_final;
    for (int64_t t = T - 1; t >= 0; --t) {
      const int64_t g = pr.Gate(b, t, h);
      acc += rescale[t] - dig[t];
      const bool reset = !in.reset.empty() && in.reset[b * T + t] != 0;
      grads.df[g] = reset ? 0.f : static_cast<float>(acc) * Sigmoid(-in.f[g]);
      // A document's own sum is zero in exact arithmetic (its first state is its own write):
      // restart, so that its rounding does not reach the documents before it.
      if (reset) acc = 0;
    }
  });
}

}  // namespace mesa::kernels::mlstm
