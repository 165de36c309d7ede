// The RG-LRU operator against its float64 oracle, the oracle against central differences, and the
// properties docs/math.md §8.8 names: gate ranges, the first-token rule, the clipped sqrt
// derivative, chunk-size invariance, document resets and the carried state.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/rglru/reference.h"
#include "kernels/rglru/rglru_gates.h"
#include "kernels/rglru/rglru_op.h"

namespace mesa::kernels::rglru {
namespace {

struct FloatProblem {
  RgLruDims dims;
  std::vector<float> u, rho, iota, p, h0;
  std::vector<uint8_t> started, reset;

  RgLruInputs Inputs() const { return {dims, u, rho, iota, p, h0, started, reset}; }
};

std::vector<float> Random(int64_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

// p such that a = sigmoid(-p)... the released initialisation: a in [0.9, 0.999], p = log(1/a - 1).
std::vector<float> DecayParams(int64_t d, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(0.9 * 0.9, 0.999 * 0.999);
  std::vector<float> p(d);
  for (float& v : p) {
    const double a = std::sqrt(dist(rng));
    v = static_cast<float>(std::log(1.0 / a - 1.0));
  }
  return p;
}

FloatProblem RandomProblem(int64_t B, int64_t T, int64_t D, uint32_t seed, bool with_state,
                           bool with_resets) {
  std::mt19937 rng(seed);
  FloatProblem pr;
  pr.dims = {B, T, D};
  pr.u = Random(B * T * D, -1.5f, 1.5f, rng);
  pr.rho = Random(B * T * D, -3.0f, 3.0f, rng);
  pr.iota = Random(B * T * D, -3.0f, 3.0f, rng);
  pr.p = DecayParams(D, rng);
  if (with_state) {
    pr.h0 = Random(B * D, -1.0f, 1.0f, rng);
    pr.started.resize(B);
    for (int64_t b = 0; b < B; ++b) pr.started[b] = b % 2 == 0;
  }
  if (with_resets) {
    pr.reset.assign(B * T, 0);
    std::bernoulli_distribution coin(0.1);
    for (uint8_t& r : pr.reset) r = coin(rng);
  }
  return pr;
}

RgLruProblem64 ToProblem64(const FloatProblem& f) {
  RgLruProblem64 p;
  p.dims = f.dims;
  p.u.assign(f.u.begin(), f.u.end());
  p.rho.assign(f.rho.begin(), f.rho.end());
  p.iota.assign(f.iota.begin(), f.iota.end());
  p.p.assign(f.p.begin(), f.p.end());
  p.h0.assign(f.h0.begin(), f.h0.end());
  p.started = f.started;
  p.reset = f.reset;
  return p;
}

struct Result {
  std::vector<float> h, h_final, du, drho, diota, dp, dh0;
};

Result RunOp(const FloatProblem& pr, RgLruImpl impl, int chunk, const std::vector<float>& dh,
             const std::vector<float>& dh_final) {
  const RgLruInputs in = pr.Inputs();
  const int64_t n = pr.dims.TokenElems(), s = pr.dims.StateElems();
  Result r;
  r.h.assign(n, 0.0f);
  r.h_final.assign(s, 0.0f);
  RgLruOptions options{.impl = impl, .num_threads = 3, .chunk_size = chunk};
  RgLruForwardOutputs out{r.h, r.h_final};
  EXPECT_TRUE(RgLruForward(in, options, &out).ok());
  r.du.assign(n, 0.0f);
  r.drho.assign(n, 0.0f);
  r.diota.assign(n, 0.0f);
  r.dp.assign(pr.dims.width, 0.0f);
  r.dh0.assign(s, 0.0f);
  RgLruGradients grads{r.du, r.drho, r.diota, r.dp, r.dh0};
  EXPECT_TRUE(RgLruBackward(in, options, {dh, dh_final}, &grads).ok());
  return r;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double rel,
                const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-6;
  for (float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * scale) << what << " at " << i;
  }
}

// L = Σ h ⊙ w + Σ h_final ⊙ wf for fixed random weights.
double Loss(const RgLruProblem64& p, const std::vector<double>& w, const std::vector<double>& wf) {
  const RgLruForward64 f = ReferenceForward64(p);
  double l = 0;
  for (size_t i = 0; i < w.size(); ++i) l += f.h[i] * w[i];
  for (size_t i = 0; i < wf.size(); ++i) l += f.h_final[i] * wf[i];
  return l;
}

TEST(RgLruReference, GradientsMatchCentralDifferences) {
  const FloatProblem f = RandomProblem(2, 7, 3, 11, /*with_state=*/true, /*with_resets=*/false);
  RgLruProblem64 p = ToProblem64(f);
  p.reset.assign(2 * 7, 0);
  p.reset[4] = 1;  // a document start inside row 0
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> w(p.u.size()), wf(p.h0.size());
  for (double& v : w) v = dist(rng);
  for (double& v : wf) v = dist(rng);
  const RgLruGradients64 g = ReferenceBackward64(p, w, wf);
  const double eps = 1e-6;
  auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* name) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double keep = x[i];
      x[i] = keep + eps;
      const double up = Loss(p, w, wf);
      x[i] = keep - eps;
      const double down = Loss(p, w, wf);
      x[i] = keep;
      const double fd = (up - down) / (2 * eps);
      EXPECT_NEAR(grad[i], fd, 1e-8 * std::max(1.0, std::abs(fd))) << name << "[" << i << "]";
    }
  };
  check(p.u, g.du, "u");
  check(p.rho, g.drho, "rho");
  check(p.iota, g.diota, "iota");
  check(p.p, g.dp, "p");
  check(p.h0, g.dh0, "h0");
}

TEST(RgLruReference, ClippedSqrtDerivativeStaysFinite) {
  // softplus(p) tiny: a = exp(-8 r sp) is within 1e-8 of 1, 1 - a² < 2.5e-7, so the clip applies.
  RgLruProblem64 p;
  p.dims = {1, 2, 1};
  p.u = {0.7, -0.4};
  p.rho = {0.3, 0.5};
  p.iota = {0.2, -0.1};
  p.p = {-20.0};
  const RgLruForward64 f = ReferenceForward64(p);
  const RgLruGradients64 g = ReferenceBackward64(p, {0.0, 1.0}, {});
  const double sp = RgSoftplus(p.p[0]), r = RgSigmoid(p.rho[1]), i = RgSigmoid(p.iota[1]);
  const double log_a = -kRgLruC * r * sp, a = std::exp(log_a);
  ASSERT_LT(1 - a * a, 2.5e-7);
  // ∂a = δh h_0 - 2a (δh i u) / sqrt(1e-6): the clipped formula, by hand.
  const double d_a = 1.0 * f.h[0] - 2 * a * (1.0 * i * p.u[1]) / std::sqrt(1e-6);
  const double d_rho = -kRgLruC * sp * (a * d_a) * r * (1 - r);
  EXPECT_TRUE(std::isfinite(g.drho[1]));
  EXPECT_NEAR(g.drho[1], d_rho, 1e-12 * std::max(1.0, std::abs(d_rho)));
  // In float32 too (a rounds to 1 there: the unclipped derivative would be infinite).
  FloatProblem fp;
  fp.dims = p.dims;
  fp.u = {0.7f, -0.4f};
  fp.rho = {0.3f, 0.5f};
  fp.iota = {0.2f, -0.1f};
  fp.p = {-20.0f};
  const Result r32 = RunOp(fp, RgLruImpl::kChunked, 64, {0.0f, 1.0f}, {0.0f});
  for (float v : r32.drho) EXPECT_TRUE(std::isfinite(v));
  for (float v : r32.dp) EXPECT_TRUE(std::isfinite(v));
}

TEST(RgLruGates, RangesAndLimits) {
  const double sp = RgSoftplus(std::log(1 / 0.95 - 1));  // base decay a = 0.95
  for (double rho : {-8.0, -1.0, 0.0, 1.0, 8.0}) {
    const RgLruGates<double> g = ComputeRgLruGates(rho, 0.0, sp, false);
    EXPECT_GT(g.a, 0.0);
    EXPECT_LT(g.a, 1.0);
    EXPECT_GT(g.m, 0.0);
    EXPECT_LE(g.m, 1.0);
  }
  // r → 1: a = 0.95^8; r → 0: a = 1 and m = 0.
  EXPECT_NEAR(ComputeRgLruGates(60.0, 0.0, sp, false).a, std::pow(0.95, 8), 1e-12);
  const RgLruGates<double> closed = ComputeRgLruGates(-60.0, 0.0, sp, false);
  EXPECT_NEAR(closed.a, 1.0, 1e-12);
  EXPECT_NEAR(closed.m, 0.0, 1e-6);
  // A restart forgets (a = e^-30) and writes at full strength (m = 1).
  const RgLruGates<double> restart = ComputeRgLruGates(0.0, 0.0, sp, true);
  EXPECT_EQ(restart.m, 1.0);
  EXPECT_LT(restart.a, 1e-12);
}

TEST(RgLruReference, FirstTokenWritesWithoutTheSqrtFactor) {
  RgLruProblem64 p;
  p.dims = {1, 2, 1};
  p.u = {0.8, 0.5};
  p.rho = {0.1, 0.2};
  p.iota = {0.4, 0.3};
  p.p = {-1.0};
  const RgLruForward64 f = ReferenceForward64(p);
  EXPECT_DOUBLE_EQ(f.h[0], RgSigmoid(0.4) * 0.8);
  const RgLruGates<double> g = ComputeRgLruGates(0.2, 0.3, RgSoftplus(-1.0), false);
  EXPECT_NEAR(f.h[1], g.a * f.h[0] + g.m * g.i * 0.5, 1e-15);
  EXPECT_LT(g.m, 1.0);
}

TEST(RgLruChunked, MatchesReferenceAndIsChunkSizeInvariant) {
  for (int64_t T : {1, 31, 32, 33, 67, 2048}) {
    const int64_t D = T == 2048 ? 5 : 9;
    const FloatProblem pr = RandomProblem(2, T, D, 100 + T, true, true);
    std::mt19937 rng(7);
    const std::vector<float> dh = Random(pr.dims.TokenElems(), -1, 1, rng);
    const std::vector<float> dh_final = Random(pr.dims.StateElems(), -1, 1, rng);
    const Result ref = RunOp(pr, RgLruImpl::kReference, 64, dh, dh_final);
    const Result c32 = RunOp(pr, RgLruImpl::kChunked, 32, dh, dh_final);
    for (int chunk : {32, 64, 128}) {
      SCOPED_TRACE(testing::Message() << "T=" << T << " chunk=" << chunk);
      const Result got = chunk == 32 ? c32 : RunOp(pr, RgLruImpl::kChunked, chunk, dh, dh_final);
      ExpectNear(got.h, ref.h, 1e-5, "h");
      ExpectNear(got.h_final, ref.h_final, 1e-5, "h_final");
      ExpectNear(got.du, ref.du, 1e-5, "du");
      ExpectNear(got.drho, ref.drho, 1e-5, "drho");
      ExpectNear(got.diota, ref.diota, 1e-5, "diota");
      ExpectNear(got.dp, ref.dp, 1e-4, "dp");
      ExpectNear(got.dh0, ref.dh0, 1e-5, "dh0");
      ExpectNear(got.h, c32.h, 1e-6, "h across chunk sizes");
      ExpectNear(got.du, c32.du, 1e-6, "du across chunk sizes");
    }
  }
}

// A packed row with document starts equals its documents run as separate rows from zero.
TEST(RgLruChunked, ResetsEqualSeparateDocuments) {
  const int64_t D = 4, T = 40;
  // Documents of 8 (chunk 8: starts at a chunk's first row), 7, 1, 9 (starts at a chunk's last
  // row, t = 15... 16), then the rest.
  const std::vector<int64_t> starts = {0, 8, 15, 16, 25, T};
  const FloatProblem packed_base = RandomProblem(1, T, D, 3, false, false);
  FloatProblem packed = packed_base;
  packed.reset.assign(T, 0);
  for (size_t k = 0; k + 1 < starts.size(); ++k) packed.reset[starts[k]] = 1;
  std::mt19937 rng(9);
  const std::vector<float> dh = Random(T * D, -1, 1, rng);
  const Result whole = RunOp(packed, RgLruImpl::kChunked, 8, dh, std::vector<float>(D, 0.0f));
  std::vector<float> dp_sum(D, 0.0f);
  for (size_t k = 0; k + 1 < starts.size(); ++k) {
    const int64_t t0 = starts[k], n = starts[k + 1] - t0;
    FloatProblem doc;
    doc.dims = {1, n, D};
    auto slice = [&](const std::vector<float>& x) {
      return std::vector<float>(x.begin() + t0 * D, x.begin() + (t0 + n) * D);
    };
    doc.u = slice(packed.u);
    doc.rho = slice(packed.rho);
    doc.iota = slice(packed.iota);
    doc.p = packed.p;
    const Result part = RunOp(doc, RgLruImpl::kChunked, 8, slice(dh), std::vector<float>(D, 0.0f));
    ExpectNear(slice(whole.h), part.h, 1e-5, "h");
    ExpectNear(slice(whole.du), part.du, 1e-4, "du");
    ExpectNear(slice(whole.drho), part.drho, 1e-4, "drho");
    ExpectNear(slice(whole.diota), part.diota, 1e-4, "diota");
    for (int64_t d = 0; d < D; ++d) dp_sum[d] += part.dp[d];
  }
  ExpectNear(whole.dp, dp_sum, 1e-4, "dp");
}

// Two slices with the carried state (h, started) equal one pass, forward and backward.
TEST(RgLruChunked, CarriedStateEqualsOnePass) {
  const int64_t B = 2, T = 50, D = 6, cut = 23;
  const FloatProblem whole = RandomProblem(B, T, D, 21, false, true);
  std::mt19937 rng(4);
  const std::vector<float> dh = Random(B * T * D, -1, 1, rng);
  const std::vector<float> dh_final = Random(B * D, -1, 1, rng);
  const Result one = RunOp(whole, RgLruImpl::kChunked, 16, dh, dh_final);
  auto slice = [&](const FloatProblem& src, int64_t t0, int64_t n) {
    FloatProblem s;
    s.dims = {B, n, D};
    for (int64_t b = 0; b < B; ++b) {
      for (auto [from, to] : {std::pair{&src.u, &s.u}, {&src.rho, &s.rho}, {&src.iota, &s.iota}}) {
        to->insert(to->end(), from->begin() + (b * T + t0) * D,
                   from->begin() + (b * T + t0 + n) * D);
      }
      for (int64_t t = t0; t < t0 + n; ++t) s.reset.push_back(src.reset[b * T + t]);
    }
    s.p = src.p;
    return s;
  };
  auto rows = [&](const std::vector<float>& x, int64_t t0, int64_t n) {
    std::vector<float> out;
    for (int64_t b = 0; b < B; ++b) {
      out.insert(out.end(), x.begin() + (b * T + t0) * D, x.begin() + (b * T + t0 + n) * D);
    }
    return out;
  };
  FloatProblem first = slice(whole, 0, cut), second = slice(whole, cut, T - cut);
  // Forward of the first slice gives the carried state; the second continues it.
  const Result a0 =
      RunOp(first, RgLruImpl::kChunked, 16, rows(dh, 0, cut), std::vector<float>(B * D, 0));
  second.h0 = a0.h_final;
  second.started.assign(B, 1);
  const Result b = RunOp(second, RgLruImpl::kChunked, 16, rows(dh, cut, T - cut), dh_final);
  // The first slice's backward receives the second's dh0 as its dh_final.
  const Result a = RunOp(first, RgLruImpl::kChunked, 16, rows(dh, 0, cut), b.dh0);
  ExpectNear(a.h, rows(one.h, 0, cut), 1e-6, "h first");
  ExpectNear(b.h, rows(one.h, cut, T - cut), 1e-5, "h second");
  ExpectNear(b.h_final, one.h_final, 1e-5, "h_final");
  ExpectNear(a.du, rows(one.du, 0, cut), 1e-5, "du first");
  ExpectNear(b.du, rows(one.du, cut, T - cut), 1e-5, "du second");
  ExpectNear(a.drho, rows(one.drho, 0, cut), 1e-5, "drho first");
  std::vector<float> dp(D);
  for (int64_t d = 0; d < D; ++d) dp[d] = a.dp[d] + b.dp[d];
  ExpectNear(dp, one.dp, 1e-4, "dp");
  // Without the started flag the second slice would restart: a different result.
  FloatProblem restarted = second;
  restarted.started.clear();
  const Result c = RunOp(restarted, RgLruImpl::kChunked, 16, rows(dh, cut, T - cut), dh_final);
  double diff = 0;
  for (size_t i = 0; i < c.h.size(); ++i) diff = std::max(diff, std::abs(double(c.h[i] - b.h[i])));
  EXPECT_GT(diff, 1e-3);
}

TEST(RgLruOp, RefusesBadInput) {
  FloatProblem pr = RandomProblem(1, 4, 3, 1, false, false);
  std::vector<float> h(12), hf(3);
  RgLruForwardOutputs out{h, hf};
  pr.rho.pop_back();
  absl::Status s = RgLruForward(pr.Inputs(), {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'r'"), std::string::npos) << s;
  pr = RandomProblem(1, 4, 3, 1, false, false);
  pr.u[5] = std::nanf("");
  s = RgLruForward(pr.Inputs(), {}, &out);
  EXPECT_NE(s.message().find("non-finite"), std::string::npos) << s;
  pr = RandomProblem(1, 4, 3, 1, false, false);
  s = RgLruForward(pr.Inputs(), {.chunk_size = 0}, &out);
  EXPECT_NE(s.message().find("chunk_size"), std::string::npos) << s;
  s = RgLruForward(pr.Inputs(), {.impl = RgLruImpl::kCuda}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace mesa::kernels::rglru
