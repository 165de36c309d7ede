#include "kernels/rglru/chunked.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/parallel_for.h"
#include "kernels/rglru/rglru_gates.h"

namespace mesa::kernels::rglru {
namespace {

struct Plan {
  int64_t B, T, D, C, chunks;
  int threads;
};

Plan MakePlan(const RgLruInputs& in, const RgLruOptions& options) {
  Plan p;
  p.B = in.dims.batch;
  p.T = in.dims.seq_len;
  p.D = in.dims.width;
  p.C = options.chunk_size;
  p.chunks = (p.T + p.C - 1) / p.C;
  p.threads = ResolveThreads(options.num_threads, static_cast<size_t>(p.B * p.chunks));
  return p;
}

std::vector<float> SoftplusOf(std::span<const float> p) {
  std::vector<float> out(p.size());
  for (size_t d = 0; d < p.size(); ++d) out[d] = RgSoftplus(p[d]);
  return out;
}

// Scans tokens [t0, t1) of row b from `state` (D values, updated in place); writes h when `h` is
// not empty and adds the chunk's log decay into `log_decay` when not null.
void ScanChunk(const RgLruInputs& in, const std::vector<float>& sp, int64_t b, int64_t t0,
               int64_t t1, float* state, float* log_decay, std::span<float> h) {
  const int64_t T = in.dims.seq_len, D = in.dims.width;
  for (int64_t t = t0; t < t1; ++t) {
    const bool restart = in.Restart(b, t);
    const int64_t row = (b * T + t) * D;
    for (int64_t d = 0; d < D; ++d) {
      const RgLruGates<float> g =
          ComputeRgLruGates(in.rho[row + d], in.iota[row + d], sp[d], restart);
      state[d] = g.a * state[d] + g.m * g.i * in.u[row + d];
      if (log_decay != nullptr) log_decay[d] += g.log_a;
      if (!h.empty()) h[row + d] = state[d];
    }
  }
}

// Phases 1 and 2 of the forward: the state carried into every chunk, [B, chunks + 1, D] (the
// last entry of a row is its final state).
std::vector<float> CarriedStates(const RgLruInputs& in, const Plan& p,
                                 const std::vector<float>& sp) {
  std::vector<float> end_state(p.B * p.chunks * p.D, 0.0f), end_decay(p.B * p.chunks * p.D, 0.0f);
  ParallelFor(p.B * p.chunks, p.threads, [&](int64_t task, int) {
    const int64_t b = task / p.chunks, c = task % p.chunks;
    ScanChunk(in, sp, b, c * p.C, std::min(p.T, (c + 1) * p.C), &end_state[task * p.D],
              &end_decay[task * p.D], {});
  });
  std::vector<float> carried(p.B * (p.chunks + 1) * p.D);
  for (int64_t b = 0; b < p.B; ++b) {
    float* row = &carried[b * (p.chunks + 1) * p.D];
    for (int64_t d = 0; d < p.D; ++d) row[d] = in.h0.empty() ? 0.0f : in.h0[b * p.D + d];
    for (int64_t c = 0; c < p.chunks; ++c) {
      const int64_t s = (b * p.chunks + c) * p.D;
      for (int64_t d = 0; d < p.D; ++d) {
        row[(c + 1) * p.D + d] = std::exp(end_decay[s + d]) * row[c * p.D + d] + end_state[s + d];
      }
    }
  }
  return carried;
}

}  // namespace

absl::Status ChunkedForward(const RgLruInputs& in, const RgLruOptions& options,
                            RgLruForwardOutputs* out) {
  const Plan p = MakePlan(in, options);
  const std::vector<float> sp = SoftplusOf(in.p);
  const std::vector<float> carried = CarriedStates(in, p, sp);
  ParallelFor(p.B * p.chunks, p.threads, [&](int64_t task, int) {
    const int64_t b = task / p.chunks, c = task % p.chunks;
    std::vector<float> state(&carried[(b * (p.chunks + 1) + c) * p.D],
                             &carried[(b * (p.chunks + 1) + c + 1) * p.D]);
    ScanChunk(in, sp, b, c * p.C, std::min(p.T, (c + 1) * p.C), state.data(), nullptr, out->h);
  });
  if (!out->h_final.empty()) {
    for (int64_t b = 0; b < p.B; ++b) {
      std::copy_n(&carried[(b * (p.chunks + 1) + p.chunks) * p.D], p.D, &out->h_final[b * p.D]);
    }
  }
  return absl::OkStatus();
}

absl::Status ChunkedBackward(const RgLruInputs& in, const RgLruOptions& options,
                             const RgLruBackwardInputs& bwd, RgLruGradients* grads) {
  const Plan p = MakePlan(in, options);
  const int64_t B = p.B, T = p.T, D = p.D, C = p.C, chunks = p.chunks;
  const std::vector<float> sp = SoftplusOf(in.p);
  std::vector<float> sig_p(D);
  for (int64_t d = 0; d < D; ++d) sig_p[d] = RgSigmoid(in.p[d]);
  const std::vector<float> carried = CarriedStates(in, p, sp);

  // Phase 1 (reverse): every chunk scans δ from zero at its end; keeps a_first·δ̂_first and the
  // product of its decays.
  std::vector<float> start_grad(B * chunks * D, 0.0f), total_decay(B * chunks * D, 0.0f);
  ParallelFor(B * chunks, p.threads, [&](int64_t task, int) {
    const int64_t b = task / chunks, c = task % chunks;
    const int64_t t0 = c * C, t1 = std::min(T, (c + 1) * C);
    std::vector<float> delta(D, 0.0f), log_decay(D, 0.0f);
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const bool restart = in.Restart(b, t);
      const int64_t row = (b * T + t) * D;
      for (int64_t d = 0; d < D; ++d) {
        const RgLruGates<float> g =
            ComputeRgLruGates(in.rho[row + d], in.iota[row + d], sp[d], restart);
        delta[d] = g.a * (bwd.dh[row + d] + delta[d]);  // a_t δ̂_t: what flows to t-1
        log_decay[d] += g.log_a;
      }
    }
    std::copy(delta.begin(), delta.end(), &start_grad[task * D]);
    std::copy(log_decay.begin(), log_decay.end(), &total_decay[task * D]);
  });
  // Phase 2: the gradient flowing into every chunk from its right, [B, chunks + 1, D]; entry c is
  // a_{first of chunk c}·δh_{first of chunk c}, entry `chunks` is dh_final; entry 0 is dh0.
  std::vector<float> incoming(B * (chunks + 1) * D);
  for (int64_t b = 0; b < B; ++b) {
    float* row = &incoming[b * (chunks + 1) * D];
    for (int64_t d = 0; d < D; ++d) {
      row[chunks * D + d] = bwd.dh_final.empty() ? 0.0f : bwd.dh_final[b * D + d];
    }
    for (int64_t c = chunks - 1; c >= 0; --c) {
      const int64_t s = (b * chunks + c) * D;
      for (int64_t d = 0; d < D; ++d) {
        row[c * D + d] = std::exp(total_decay[s + d]) * row[(c + 1) * D + d] + start_grad[s + d];
      }
    }
    if (!grads->dh0.empty()) std::copy_n(row, D, &grads->dh0[b * D]);
  }
  // Phase 3: every chunk recomputes its h from the carried-in state, then runs δ backwards from
  // the carried-in gradient; dp partial sums per (row, chunk), reduced in order below.
  std::vector<float> dp_partial(B * chunks * D, 0.0f);
  ParallelFor(B * chunks, p.threads, [&](int64_t task, int) {
    const int64_t b = task / chunks, c = task % chunks;
    const int64_t t0 = c * C, t1 = std::min(T, (c + 1) * C), n = t1 - t0;
    std::vector<float> h((n + 1) * D);  // h[0] = carried in, h[r + 1] = h_{t0 + r}
    std::copy_n(&carried[(b * (chunks + 1) + c) * D], D, h.data());
    for (int64_t r = 0; r < n; ++r) {
      const int64_t row = (b * T + t0 + r) * D;
      const bool restart = in.Restart(b, t0 + r);
      for (int64_t d = 0; d < D; ++d) {
        const RgLruGates<float> g =
            ComputeRgLruGates(in.rho[row + d], in.iota[row + d], sp[d], restart);
        h[(r + 1) * D + d] = g.a * h[r * D + d] + g.m * g.i * in.u[row + d];
      }
    }
    std::vector<float> flow(&incoming[(b * (chunks + 1) + c + 1) * D],
                            &incoming[(b * (chunks + 1) + c + 2) * D]);
    float* dp = &dp_partial[task * D];
    for (int64_t r = n - 1; r >= 0; --r) {
      const int64_t row = (b * T + t0 + r) * D;
      const bool restart = in.Restart(b, t0 + r);
      for (int64_t d = 0; d < D; ++d) {
        const RgLruGates<float> g =
            ComputeRgLruGates(in.rho[row + d], in.iota[row + d], sp[d], restart);
        const float dh = bwd.dh[row + d] + flow[d];
        const RgLruTokenGrads<float> tg =
            RgLruTokenBackward(g, in.u[row + d], h[r * D + d], dh, sp[d], sig_p[d], restart);
        grads->du[row + d] = tg.d_u;
        grads->drho[row + d] = tg.d_rho;
        grads->diota[row + d] = tg.d_iota;
        dp[d] += tg.d_p;
        flow[d] = g.a * dh;
      }
    }
  });
  std::fill(grads->dp.begin(), grads->dp.end(), 0.0f);
  for (int64_t task = 0; task < B * chunks; ++task) {
    for (int64_t d = 0; d < D; ++d) grads->dp[d] += dp_partial[task * D + d];
  }
  return absl::OkStatus();
}

}  // namespace mesa::kernels::rglru
