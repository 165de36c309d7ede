// The mLSTM operator: the stabilised float64 oracle against the unstabilised recurrence, its
// gradients against central differences, the float32 recurrence against the oracle, exact
// document resets, and the carried state.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mlstm/mlstm_op.h"
#include "kernels/mlstm/recurrent.h"

namespace mesa::kernels::mlstm {
namespace {

using Vec = std::vector<double>;

struct Problem {
  MlstmDims dims;
  Vec q, k, v, i, f, c0, n0, m0;
  std::vector<uint8_t> reset;
  MlstmProblem<double> View() const { return {dims, q, k, v, i, f, reset, c0, n0, m0}; }
};

Vec Random(int64_t n, double lo, double hi, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec x(n);
  for (double& v : x) v = dist(rng);
  return x;
}

Problem MakeProblem(MlstmDims d, uint32_t seed, bool state, double gate_spread = 3.0) {
  std::mt19937 rng(seed);
  Problem p;
  p.dims = d;
  p.q = Random(d.KeyElems(), -1, 1, rng);
  p.k = Random(d.KeyElems(), -1, 1, rng);
  for (double& x : p.k) x /= std::sqrt(double(d.key_dim));
  p.v = Random(d.ValueElems(), -1, 1, rng);
  p.i = Random(d.GateElems(), -gate_spread, gate_spread, rng);
  p.f = Random(d.GateElems(), 0.0, 4.0, rng);
  if (state) {
    p.c0 = Random(d.CElems(), -1, 1, rng);
    p.n0 = Random(d.NElems(), -1, 1, rng);
    p.m0 = Random(d.MElems(), -1, 1, rng);
  }
  return p;
}

struct Out {
  Vec h, c, n, m;
};

Out Forward64(const Problem& p, double eps) {
  Out o{Vec(p.dims.ValueElems()), Vec(p.dims.CElems()), Vec(p.dims.NElems()), Vec(p.dims.MElems())};
  ReferenceForward64(p.View(), eps, {o.h, o.c, o.n, o.m});
  return o;
}

// The unstabilised recurrence (C, n with the exponential gates; readout / max(|n·q|, 1)).
Vec Unstabilised(const Problem& p) {
  const MlstmDims& d = p.dims;
  Vec h(d.ValueElems());
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t hh = 0; hh < d.heads; ++hh) {
      Vec c(d.value_dim * d.key_dim, 0.0), n(d.key_dim, 0.0);
      for (int64_t t = 0; t < d.seq_len; ++t) {
        const int64_t g = (b * d.seq_len + t) * d.heads + hh;
        const double f = 1 / (1 + std::exp(-p.f[g])), ig = std::exp(p.i[g]);
        const double* q = &p.q[g * d.key_dim];
        const double* k = &p.k[g * d.key_dim];
        const double* v = &p.v[g * d.value_dim];
        for (int64_t r = 0; r < d.value_dim; ++r) {
          for (int64_t j = 0; j < d.key_dim; ++j) {
            c[r * d.key_dim + j] = f * c[r * d.key_dim + j] + ig * v[r] * k[j];
          }
        }
        double nq = 0;
        for (int64_t j = 0; j < d.key_dim; ++j) nq += (n[j] = f * n[j] + ig * k[j]) * q[j];
        const double den = std::max(std::abs(nq), 1.0);
        for (int64_t r = 0; r < d.value_dim; ++r) {
          double acc = 0;
          for (int64_t j = 0; j < d.key_dim; ++j) acc += c[r * d.key_dim + j] * q[j];
          h[g * d.value_dim + r] = acc / den;
        }
      }
    }
  }
  return h;
}

double MaxRel(const Vec& a, const Vec& b) {
  double diff = 0, scale = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

TEST(MlstmReference, StabilisedEqualsTheUnstabilisedFormWithoutEps) {
  const Problem p = MakeProblem({2, 37, 2, 5, 4}, 1, false, 5.0);
  EXPECT_LT(MaxRel(Forward64(p, 0.0).h, Unstabilised(p)), 1e-12);
}

TEST(MlstmReference, GradientsMatchCentralDifferences) {
  Problem p = MakeProblem({2, 9, 2, 3, 4}, 2, true);
  p.reset.assign(2 * 9, 0);
  p.reset[4] = 1;  // a document start in row 0
  std::mt19937 rng(3);
  const Vec w = Random(p.dims.ValueElems(), -1, 1, rng);
  auto loss = [&]() {
    const Out o = Forward64(p, 0.0);
    double l = 0;
    for (size_t x = 0; x < w.size(); ++x) l += o.h[x] * w[x];
    return l;
  };
  // Through h only: h does not depend on the stabiliser m (stop-gradient is exact there); the
  // finals C', n' are scaled by e^{-m} and carry the gradient of the next slice, checked by
  // CarriedStateEqualsOnePass.
  Vec dq(p.q.size()), dk(p.k.size()), dv(p.v.size()), di(p.i.size()), df(p.f.size()),
      dc0(p.c0.size()), dn0(p.n0.size());
  ReferenceBackward64(p.View(), 0.0, {w, {}, {}}, {dq, dk, dv, di, df, dc0, dn0});
  const double eps = 1e-6;
  auto check = [&](Vec& x, const Vec& grad, const char* name) {
    for (size_t j = 0; j < x.size(); ++j) {
      const double keep = x[j];
      x[j] = keep + eps;
      const double up = loss();
      x[j] = keep - eps;
      const double down = loss();
      x[j] = keep;
      const double fd = (up - down) / (2 * eps);
      EXPECT_NEAR(grad[j], fd, 1e-7 * std::max(1.0, std::abs(fd))) << name << "[" << j << "]";
    }
  };
  check(p.q, dq, "q");
  check(p.k, dk, "k");
  check(p.v, dv, "v");
  check(p.i, di, "i");
  check(p.f, df, "f");
  check(p.c0, dc0, "c0");
  check(p.n0, dn0, "n0");
}

// A reset forgets exactly even when the old memory is huge (m ≈ 40): the -30 trick of the other
// mixers would leave e^10 of it.
TEST(MlstmReference, ResetsForgetExactly) {
  Problem p = MakeProblem({1, 12, 1, 4, 3}, 4, false);
  for (int t = 0; t < 6; ++t) p.i[t] = 40.0;  // a large input gate grows m
  p.reset.assign(12, 0);
  p.reset[6] = 1;
  const Out whole = Forward64(p, kMlstmEps);
  Problem tail = p;
  tail.dims.seq_len = 6;
  auto slice = [](const Vec& x, int64_t from, int64_t per) {
    return Vec(x.begin() + from * per, x.begin() + (from + 6) * per);
  };
  tail.q = slice(p.q, 6, 4);
  tail.k = slice(p.k, 6, 4);
  tail.v = slice(p.v, 6, 3);
  tail.i = slice(p.i, 6, 1);
  tail.f = slice(p.f, 6, 1);
  tail.reset.clear();
  const Out alone = Forward64(tail, kMlstmEps);
  EXPECT_LT(MaxRel(Vec(whole.h.begin() + 18, whole.h.end()), alone.h), 1e-12);
}

struct Floats {
  std::vector<float> q, k, v, i, f, c0, n0, m0, dh, dcf, dnf;
  std::vector<uint8_t> reset;
  MlstmDims dims;
  MlstmInputs Inputs() const { return {dims, q, k, v, i, f, reset, c0, n0, m0}; }
};

std::vector<float> F(const Vec& x) { return {x.begin(), x.end()}; }
Vec Dd(const std::vector<float>& x) { return {x.begin(), x.end()}; }

Floats ToFloats(const Problem& p, std::mt19937& rng) {
  Floats f{F(p.q), F(p.k), F(p.v), F(p.i), F(p.f), F(p.c0), F(p.n0), F(p.m0)};
  f.dims = p.dims;
  f.reset = p.reset;
  f.dh = F(Random(p.dims.ValueElems(), -1, 1, rng));
  if (!p.c0.empty()) {
    f.dcf = F(Random(p.dims.CElems(), -1, 1, rng));
    f.dnf = F(Random(p.dims.NElems(), -1, 1, rng));
  }
  return f;
}

struct FloatResult {
  std::vector<float> h, c, n, m, dq, dk, dv, di, df, dc0, dn0;
};

FloatResult RunOp(const Floats& x, MlstmImpl impl, int chunk) {
  const MlstmDims& d = x.dims;
  const bool state = !x.c0.empty();
  FloatResult r;
  r.h.resize(d.ValueElems());
  if (state) {
    r.c.resize(d.CElems());
    r.n.resize(d.NElems());
    r.m.resize(d.MElems());
  }
  const MlstmOptions options{.impl = impl, .num_threads = 2, .chunk_size = chunk};
  MlstmForwardOutputs out{r.h, r.c, r.n, r.m};
  EXPECT_TRUE(MlstmForward(x.Inputs(), options, &out).ok());
  r.dq.resize(d.KeyElems());
  r.dk.resize(d.KeyElems());
  r.dv.resize(d.ValueElems());
  r.di.resize(d.GateElems());
  r.df.resize(d.GateElems());
  if (state) {
    r.dc0.resize(d.CElems());
    r.dn0.resize(d.NElems());
  }
  MlstmGradients g{r.dq, r.dk, r.dv, r.di, r.df, r.dc0, r.dn0};
  EXPECT_TRUE(MlstmBackward(x.Inputs(), options, {x.dh, x.dcf, x.dnf}, &g).ok());
  return r;
}

TEST(MlstmRecurrent, Float32MatchesTheOracleAtEveryCheckpointInterval) {
  std::mt19937 rng(5);
  Problem p = MakeProblem({2, 70, 3, 16, 8}, 6, true);
  p.reset.assign(2 * 70, 0);
  p.reset[33] = p.reset[70 + 64] = 1;
  const Floats x = ToFloats(p, rng);
  const FloatResult ref = RunOp(x, MlstmImpl::kReference, 64);
  for (int chunk : {1, 7, 64, 100}) {
    SCOPED_TRACE(chunk);
    const FloatResult got = RunOp(x, MlstmImpl::kRecurrent, chunk);
    EXPECT_LT(MaxRel(Dd(got.h), Dd(ref.h)), 1e-5);
    EXPECT_LT(MaxRel(Dd(got.c), Dd(ref.c)), 1e-5);
    EXPECT_LT(MaxRel(Dd(got.dq), Dd(ref.dq)), 1e-4);
    EXPECT_LT(MaxRel(Dd(got.dk), Dd(ref.dk)), 1e-4);
    EXPECT_LT(MaxRel(Dd(got.dv), Dd(ref.dv)), 1e-4);
    EXPECT_LT(MaxRel(Dd(got.di), Dd(ref.di)), 1e-4);
    EXPECT_LT(MaxRel(Dd(got.df), Dd(ref.df)), 1e-4);
    EXPECT_LT(MaxRel(Dd(got.dc0), Dd(ref.dc0)), 1e-4);
  }
}

void ExpectClose(const FloatResult& got, const FloatResult& ref, double fwd_tol, double bwd_tol) {
  EXPECT_LT(MaxRel(Dd(got.h), Dd(ref.h)), fwd_tol);
  EXPECT_LT(MaxRel(Dd(got.c), Dd(ref.c)), fwd_tol);
  EXPECT_LT(MaxRel(Dd(got.n), Dd(ref.n)), fwd_tol);
  EXPECT_LT(MaxRel(Dd(got.m), Dd(ref.m)), fwd_tol);
  EXPECT_LT(MaxRel(Dd(got.dq), Dd(ref.dq)), bwd_tol);
  EXPECT_LT(MaxRel(Dd(got.dk), Dd(ref.dk)), bwd_tol);
  EXPECT_LT(MaxRel(Dd(got.dv), Dd(ref.dv)), bwd_tol);
  EXPECT_LT(MaxRel(Dd(got.di), Dd(ref.di)), bwd_tol);
  EXPECT_LT(MaxRel(Dd(got.df), Dd(ref.df)), bwd_tol);
  EXPECT_LT(MaxRel(Dd(got.dc0), Dd(ref.dc0)), bwd_tol);
  EXPECT_LT(MaxRel(Dd(got.dn0), Dd(ref.dn0)), bwd_tol);
}

// The chunked form against the oracle at lengths around the chunk size C, with a carried state,
// final-state gradients and document starts inside a chunk and on a chunk's first token.
TEST(MlstmChunked, MatchesTheOracleAroundTheChunkSize) {
  const int C = 8;
  for (int64_t T : {1, C - 1, C, C + 1, 2 * C + 3, 5 * C}) {
    SCOPED_TRACE(T);
    std::mt19937 rng(10 + T);
    Problem p = MakeProblem({2, T, 3, 16, 8}, 11 + T, true);
    p.reset.assign(2 * T, 0);
    if (T > 3) p.reset[3] = 1;
    if (T > C) p.reset[T + C] = 1;  // row 1, the second chunk's first token
    const Floats x = ToFloats(p, rng);
    ExpectClose(RunOp(x, MlstmImpl::kChunked, C), RunOp(x, MlstmImpl::kReference, C), 1e-5, 1e-4);
  }
}

// Where the chunk-start state dominates a row (large input gates early, small ones later, slow
// forgetting), the row stabiliser is the inter-chunk term; and one huge input gate (ĩ = 80) or
// all tiny ones (ĩ = −80, the floor e^{−m} active) stay finite and exact.
TEST(MlstmChunked, StabiliserCoversTheStartStateAndExtremeGates) {
  const int C = 8;
  std::mt19937 rng(21);
  Problem p = MakeProblem({1, 4 * C, 2, 8, 4}, 22, false);
  for (int64_t t = 0; t < 4 * C; ++t) {
    for (int64_t h = 0; h < 2; ++h) {
      p.i[t * 2 + h] = t < C ? 12.0 : -6.0;
      p.f[t * 2 + h] = 6.0;
    }
  }
  p.i[2 * C * 2 + 1] = 80.0;  // head 1, token 2C
  const Floats x = ToFloats(p, rng);
  ExpectClose(RunOp(x, MlstmImpl::kChunked, C), RunOp(x, MlstmImpl::kReference, C), 1e-5, 1e-4);
  Problem tiny = MakeProblem({1, 3 * C, 2, 8, 4}, 23, false);
  for (double& i : tiny.i) i = -80.0;
  const Floats y = ToFloats(tiny, rng);
  const FloatResult got = RunOp(y, MlstmImpl::kChunked, C);
  for (float v : got.h) ASSERT_TRUE(std::isfinite(v));
  ExpectClose(got, RunOp(y, MlstmImpl::kReference, C), 1e-5, 1e-4);
}

// Two slices carrying (C', n', m) equal one pass, forward and backward.
TEST(MlstmRecurrent, CarriedStateEqualsOnePass) {
  std::mt19937 rng(8);
  const int64_t B = 2, T = 30, H = 2, K = 8, V = 4, cut = 13;
  Problem p = MakeProblem({B, T, H, K, V}, 9, false);
  p.c0.assign(p.dims.CElems(), 0.0);  // an explicit zero state: finals and their gradients
  p.n0.assign(p.dims.NElems(), 0.0);
  p.m0.assign(p.dims.MElems(), 0.0);
  const Floats whole = ToFloats(p, rng);
  const FloatResult one = RunOp(whole, MlstmImpl::kRecurrent, 8);
  auto rows = [&](const std::vector<float>& x, int64_t per, int64_t t0, int64_t n) {
    std::vector<float> out;
    for (int64_t b = 0; b < B; ++b) {
      out.insert(out.end(), x.begin() + (b * T + t0) * per, x.begin() + (b * T + t0 + n) * per);
    }
    return out;
  };
  auto slice = [&](int64_t t0, int64_t n) {
    Floats s;
    s.dims = {B, n, H, K, V};
    s.q = rows(whole.q, H * K, t0, n);
    s.k = rows(whole.k, H * K, t0, n);
    s.v = rows(whole.v, H * V, t0, n);
    s.i = rows(whole.i, H, t0, n);
    s.f = rows(whole.f, H, t0, n);
    s.dh = rows(whole.dh, H * V, t0, n);
    return s;
  };
  Floats a = slice(0, cut), b = slice(cut, T - cut);
  a.c0 = whole.c0;
  a.n0 = whole.n0;
  a.m0 = whole.m0;
  a.dcf.assign(p.dims.CElems(), 0.f);
  a.dnf.assign(p.dims.NElems(), 0.f);
  const FloatResult ra0 = RunOp(a, MlstmImpl::kRecurrent, 8);
  b.c0 = ra0.c;
  b.n0 = ra0.n;
  b.m0 = ra0.m;
  b.dcf = whole.dcf;
  b.dnf = whole.dnf;
  const FloatResult rb = RunOp(b, MlstmImpl::kRecurrent, 8);
  a.dcf = rb.dc0;
  a.dnf = rb.dn0;
  const FloatResult ra = RunOp(a, MlstmImpl::kRecurrent, 8);
  EXPECT_LT(MaxRel(Dd(rb.h), Dd(rows(one.h, H * V, cut, T - cut))), 1e-5);
  EXPECT_LT(MaxRel(Dd(rb.c), Dd(one.c)), 1e-5);
  EXPECT_LT(MaxRel(Dd(ra.dq), Dd(rows(one.dq, H * K, 0, cut))), 1e-4);
  EXPECT_LT(MaxRel(Dd(ra.df), Dd(rows(one.df, H, 0, cut))), 1e-4);
  EXPECT_LT(MaxRel(Dd(rb.di), Dd(rows(one.di, H, cut, T - cut))), 1e-4);
}

TEST(MlstmOp, RefusesBadInput) {
  std::mt19937 rng(1);
  Floats x = ToFloats(MakeProblem({1, 4, 1, 4, 4}, 1, false), rng);
  std::vector<float> h(16);
  MlstmForwardOutputs out{h};
  x.i.pop_back();
  absl::Status s = MlstmForward(x.Inputs(), {}, &out);
  EXPECT_NE(s.message().find("'i'"), std::string::npos) << s;
  x = ToFloats(MakeProblem({1, 4, 1, 4, 4}, 1, false), rng);
  x.v[3] = NAN;
  s = MlstmForward(x.Inputs(), {}, &out);
  EXPECT_NE(s.message().find("non-finite"), std::string::npos) << s;
  x = ToFloats(MakeProblem({1, 4, 1, 4, 4}, 1, false), rng);
  x.c0.assign(16, 0.f);  // c0 without n0 and m0
  s = MlstmForward(x.Inputs(), {}, &out);
  EXPECT_NE(s.message().find("all of them or none"), std::string::npos) << s;
}

}  // namespace
}  // namespace mesa::kernels::mlstm
