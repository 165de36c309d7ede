// Float32 recurrent step of the Mesa operator (kernels/mesa/step.h). Each (sequence, head) row
// is independent: O((steps + 3) D^2) work on its own D x D state, so rows are spread over threads
// as they come.
#include "kernels/mesa/step.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/dot.h"
#include "kernels/common/parallel_for.h"
#include "kernels/common/tensor_checks.h"

namespace mesa::kernels::cpu {
namespace {

inline double Dot(const float* a, const float* b, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(a[i]) * b[i];
  return sum;
}

// out = M x for a D x D row-major matrix (float accumulation, like the chunked op's GEMMs).
inline void MatVec(const float* m, const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = LaneDot(m + i * n, x, n);
}

// X <- gamma X + beta a k^T.
inline void RankOneUpdate(float gamma, float beta, const float* a, const float* k, int64_t n,
                          float* x) {
  for (int64_t i = 0; i < n; ++i) {
    float* row = x + i * n;
    const float ba = beta * a[i];
    for (int64_t j = 0; j < n; ++j) row[j] = gamma * row[j] + ba * k[j];
  }
}

// Scratch for one solve.
struct CgScratch {
  explicit CgScratch(int64_t n) : r(n), p(n), w(n) {}
  std::vector<float> r, p, w;
};

// Solves (h + diag lambda) x = rhs with the CG of kernels/mesa/mesa_types.h, in the float32 /
// float64 mix of ChunkCg (kernels/mesa/chunked.cc): vectors in float32, dot products and the
// scalars d_old, d0 in float64, alpha and the direction ratio rounded to float32. Returns the steps
// taken.
int Cg(const float* h, const float* lambda, const float* rhs, int64_t n, const CgOptions& cg,
       CgScratch& ws, float* x) {
  if (cg.max_steps == 0) {  // GLA readout: q* = q.
    std::copy_n(rhs, n, x);
    return 0;
  }
  std::fill_n(x, n, 0.f);
  std::copy_n(rhs, n, ws.r.data());
  std::copy_n(rhs, n, ws.p.data());
  double d_old = Dot(rhs, rhs, n);
  const double d0 = d_old;
  const double tol2 = double(cg.tolerance) * cg.tolerance;
  int steps = 0;
  if (!(d_old > 0)) return 0;  // q = 0: x = 0 is exact.
  for (int step = 0; step < cg.max_steps; ++step) {
    MatVec(h, ws.p.data(), n, ws.w.data());
    for (int64_t i = 0; i < n; ++i) ws.w[i] += ws.p[i] * lambda[i];
    const double pw = Dot(ws.p.data(), ws.w.data(), n);
    if (!(pw > 0)) break;  // lost positivity to rounding: freeze
    const float alpha = static_cast<float>(d_old / pw);
    for (int64_t i = 0; i < n; ++i) {
      x[i] += alpha * ws.p[i];
      ws.r[i] -= alpha * ws.w[i];
    }
    const double d_new = Dot(ws.r.data(), ws.r.data(), n);
    ++steps;
    if ((cg.tolerance > 0 && d_new <= tol2 * d0) || !(d_new > 0)) break;
    const float ratio = static_cast<float>(d_new / d_old);
    for (int64_t i = 0; i < n; ++i) ws.p[i] = ws.r[i] + ratio * ws.p[i];
    d_old = d_new;
  }
  return steps;
}

}  // namespace

absl::Status ValidateMesaStep(const MesaStepInputs& in, const CgOptions& cg,
                              const MesaStepState& state, const MesaStepOutputs& out) {
  const MesaStepDims& d = in.dims;
  if (auto s = ValidateMesaShape(MesaDims{d.batch, 1, d.heads, d.head_dim}, cg); !s.ok()) {
    return s;
  }
  for (auto [name, size, expected] : {std::tuple{"q", in.q.size(), d.TokenElems()},
                                      {"k", in.k.size(), d.TokenElems()},
                                      {"v", in.v.size(), d.TokenElems()},
                                      {"log_gamma", in.log_gamma.size(), d.GateElems()},
                                      {"beta", in.beta.size(), d.GateElems()},
                                      {"lambda", in.lambda.size(), d.heads * d.head_dim},
                                      {"g", state.g.size(), d.StateElems()},
                                      {"o", out.o.size(), d.TokenElems()}}) {
    if (auto s = CheckSize(name, size, expected); !s.ok()) return s;
  }
  if (cg.max_steps > 0 || !state.h.empty()) {
    if (auto s = CheckSize("h", state.h.size(), d.StateElems()); !s.ok()) {
      return cg.max_steps > 0
                 ? absl::InvalidArgumentError(absl::StrCat(
                       s.message(), " (h may be empty only with 0 CG steps, the GLA readout)"))
                 : s;
    }
  }
  if (auto s = CheckOptionalSize("q_star", out.q_star.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("cg_steps", out.cg_steps.size(), d.GateElems()); !s.ok()) {
    return s;
  }
  for (auto [name, data] : {std::pair{"q", in.q},
                            {"k", in.k},
                            {"v", in.v},
                            {"log_gamma", in.log_gamma},
                            {"beta", in.beta},
                            {"lambda", in.lambda}}) {
    if (auto s = CheckFinite(name, data); !s.ok()) return s;
  }
  for (size_t i = 0; i < in.lambda.size(); ++i) {
    if (!(in.lambda[i] > 0.f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("lambda must be > 0 everywhere, got ", in.lambda[i], " at flat index ", i));
    }
  }
  return absl::OkStatus();
}

absl::Status MesaStep(const MesaStepInputs& in, const CgOptions& cg, MesaStepState state,
                      MesaStepOutputs out, int num_threads) {
  if (auto s = ValidateMesaStep(in, cg, state, out); !s.ok()) return s;
  if (num_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_threads must be >= 0, got ", num_threads));
  }
  const int64_t n = in.dims.head_dim, dd = n * n, rows = in.dims.GateElems();
  const int threads = ResolveThreads(num_threads, rows);
  std::vector<CgScratch> scratch(threads, CgScratch(n));
  std::vector<std::vector<float>> solution(threads, std::vector<float>(n));
  ParallelFor(rows, threads, [&](int64_t row, int worker) {  // row = b * H + head
    const int64_t head = row % in.dims.heads;
    const float* q = &in.q[row * n];
    const float* k = &in.k[row * n];
    const float gamma = static_cast<float>(std::exp(double(in.log_gamma[row])));
    const float beta = in.beta[row];
    float* x = solution[worker].data();
    float* g = &state.g[row * dd];
    RankOneUpdate(gamma, beta, &in.v[row * n], k, n, g);
    int steps = 0;
    if (state.h.empty()) {
      std::copy_n(q, n, x);
    } else {
      float* h = &state.h[row * dd];
      RankOneUpdate(gamma, beta, k, k, n, h);
      steps = Cg(h, &in.lambda[head * n], q, n, cg, scratch[worker], x);
    }
    MatVec(g, x, n, &out.o[row * n]);
    if (!out.q_star.empty()) std::copy_n(x, n, &out.q_star[row * n]);
    if (!out.cg_steps.empty()) out.cg_steps[row] = steps;
  });
  return absl::OkStatus();
}

}  // namespace mesa::kernels::cpu
