// The SSD operator: the float64 recurrence against the quadratic (attention-like) form of the same
// map, its gradients against central differences, group broadcast, exact resets, extreme decay,
// the float32 recurrence against the oracle at several checkpoint intervals and thread counts,
// and the carried state.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ssd/recurrent.h"
#include "kernels/ssd/ssd_op.h"

namespace mesa::kernels::ssd {
namespace {

using Vec = std::vector<double>;

Vec Random(int64_t n, double lo, double hi, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec x(n);
  for (double& v : x) v = dist(rng);
  return x;
}

struct Problem {
  SsdDims dims;
  Vec x, dt, a_log, dt_bias, d, b, c, s0;
  std::vector<uint8_t> reset;
  SsdProblem<double> View() const { return {dims, x, dt, a_log, dt_bias, d, b, c, reset, s0}; }
};

Problem MakeProblem(SsdDims d, uint32_t seed, bool state) {
  std::mt19937 rng(seed);
  Problem p;
  p.dims = d;
  p.x = Random(d.XElems(), -1, 1, rng);
  p.dt = Random(d.GateElems(), -2, 1, rng);
  p.a_log = Random(d.heads, 0, std::log(16.0), rng);
  p.dt_bias = Random(d.heads, -3, 0, rng);
  p.d = Random(d.heads, 0.5, 1.5, rng);
  p.b = Random(d.BcElems(), -1, 1, rng);
  p.c = Random(d.BcElems(), -1, 1, rng);
  if (state) p.s0 = Random(d.StateElems(), -1, 1, rng);
  return p;
}

struct Out {
  Vec y, s;
};

Out Forward64(const Problem& p) {
  Out o{Vec(p.dims.XElems()), Vec(p.dims.StateElems())};
  SsdRecurrentForward<double>(p.View(), {.num_threads = 1}, {o.y, o.s});
  return o;
}

double Softplus(double z) { return std::log1p(std::exp(z)); }

// y_t = Σ_{s≤t} (Π_{s<r≤t} a_r) dt_s (C_t·B_s) x_s + (Π_{r≤t} a_r) S_0 C_t + D x_t: the map
// written as masked attention, without a running state.
Vec Quadratic(const Problem& p) {
  const SsdDims& d = p.dims;
  Vec y(d.XElems());
  const int64_t per = d.heads / d.groups;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      const int64_t g = h / per;
      auto dt = [&](int64_t t) {
        return Softplus(p.dt[(b * d.seq_len + t) * d.heads + h] + p.dt_bias[h]);
      };
      auto a = [&](int64_t t) {
        if (!p.reset.empty() && p.reset[b * d.seq_len + t]) return 0.0;
        return std::exp(-dt(t) * std::exp(p.a_log[h]));
      };
      auto bc = [&](const Vec& m, int64_t t) {
        return &m[((b * d.seq_len + t) * d.groups + g) * d.state_dim];
      };
      for (int64_t t = 0; t < d.seq_len; ++t) {
        const double* ct = bc(p.c, t);
        for (int64_t q = 0; q < d.head_dim; ++q) {
          double acc = p.d[h] * p.x[((b * d.seq_len + t) * d.heads + h) * d.head_dim + q];
          for (int64_t s = 0; s <= t; ++s) {
            double decay = 1;
            for (int64_t r = s + 1; r <= t; ++r) decay *= a(r);
            double cb = 0;
            for (int64_t n = 0; n < d.state_dim; ++n) cb += ct[n] * bc(p.b, s)[n];
            acc += decay * dt(s) * cb * p.x[((b * d.seq_len + s) * d.heads + h) * d.head_dim + q];
          }
          if (!p.s0.empty()) {
            double decay = 1;
            for (int64_t r = 0; r <= t; ++r) decay *= a(r);
            const double* s0 = &p.s0[((b * d.heads + h) * d.head_dim + q) * d.state_dim];
            for (int64_t n = 0; n < d.state_dim; ++n) acc += decay * s0[n] * ct[n];
          }
          y[((b * d.seq_len + t) * d.heads + h) * d.head_dim + q] = acc;
        }
      }
    }
  }
  return y;
}

double MaxRel(const Vec& a, const Vec& b) {
  double diff = 0, scale = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

TEST(SsdReference, RecurrenceEqualsTheQuadraticForm) {
  Problem p = MakeProblem({2, 19, 4, 3, 2, 5}, 1, true);
  p.reset.assign(2 * 19, 0);
  p.reset[7] = p.reset[19 + 12] = 1;
  EXPECT_LT(MaxRel(Forward64(p).y, Quadratic(p)), 1e-12);
}

TEST(SsdReference, GradientsMatchCentralDifferences) {
  Problem p = MakeProblem({2, 8, 4, 3, 2, 4}, 2, true);
  p.reset.assign(2 * 8, 0);
  p.reset[5] = 1;  // a document start in row 0
  std::mt19937 rng(3);
  const Vec wy = Random(p.dims.XElems(), -1, 1, rng), ws = Random(p.dims.StateElems(), -1, 1, rng);
  auto loss = [&]() {
    const Out o = Forward64(p);
    double l = 0;
    for (size_t i = 0; i < wy.size(); ++i) l += o.y[i] * wy[i];
    for (size_t i = 0; i < ws.size(); ++i) l += o.s[i] * ws[i];
    return l;
  };
  const SsdDims& d = p.dims;
  Vec dx(d.XElems()), ddt(d.GateElems()), da(d.heads), dbias(d.heads), dd(d.heads), db(d.BcElems()),
      dc(d.BcElems()), ds0(d.StateElems());
  SsdRecurrentBackward<double>(p.View(), {.num_threads = 2, .chunk_size = 3}, {wy, ws},
                               {dx, ddt, da, dbias, dd, db, dc, ds0});
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
  check(p.x, dx, "x");
  check(p.dt, ddt, "dt");
  check(p.a_log, da, "A_log");
  check(p.dt_bias, dbias, "dt_bias");
  check(p.d, dd, "D");
  check(p.b, db, "B");
  check(p.c, dc, "C");
  check(p.s0, ds0, "s0");
}

// G = 1 equals G = H with B and C given to every head.
TEST(SsdReference, OneGroupEqualsBAndCReplicatedPerHead) {
  const Problem one = MakeProblem({2, 11, 3, 4, 1, 5}, 4, false);
  Problem each = one;
  each.dims.groups = 3;
  each.b.clear();
  each.c.clear();
  for (int64_t bt = 0; bt < 2 * 11; ++bt) {
    for (int h = 0; h < 3; ++h) {
      each.b.insert(each.b.end(), one.b.begin() + bt * 5, one.b.begin() + (bt + 1) * 5);
      each.c.insert(each.c.end(), one.c.begin() + bt * 5, one.c.begin() + (bt + 1) * 5);
    }
  }
  EXPECT_LT(MaxRel(Forward64(one).y, Forward64(each).y), 1e-14);
}

// dt = 100 and A = -16 (dt·A = -1600): the state is forgotten, nothing overflows.
TEST(SsdReference, ExtremeDecayStaysFinite) {
  Problem p = MakeProblem({1, 6, 2, 3, 1, 4}, 5, true);
  for (double& x : p.dt) x = 100;
  for (double& x : p.a_log) x = std::log(16.0);
  const Out o = Forward64(p);
  for (double y : o.y) ASSERT_TRUE(std::isfinite(y));
  const SsdDims& d = p.dims;
  Vec dx(d.XElems()), ddt(d.GateElems()), da(d.heads), dbias(d.heads), dd(d.heads), db(d.BcElems()),
      dc(d.BcElems()), ds0(d.StateElems());
  const Vec dy(d.XElems(), 1.0);
  SsdRecurrentBackward<double>(p.View(), {.num_threads = 1}, {dy, {}},
                               {dx, ddt, da, dbias, dd, db, dc, ds0});
  for (const Vec* g : {&dx, &ddt, &da, &dbias, &db, &dc, &ds0}) {
    for (double v : *g) ASSERT_TRUE(std::isfinite(v));
  }
}

// A reset forgets exactly: the tokens after it equal a fresh run over them.
TEST(SsdReference, ResetsForgetExactly) {
  Problem p = MakeProblem({1, 12, 2, 3, 1, 4}, 6, true);
  p.reset.assign(12, 0);
  p.reset[5] = 1;
  const Out whole = Forward64(p);
  Problem tail = p;
  tail.dims.seq_len = 7;
  tail.s0.clear();
  tail.reset.clear();
  auto slice = [](const Vec& x, int64_t per) { return Vec(x.begin() + 5 * per, x.end()); };
  tail.x = slice(p.x, 2 * 3);
  tail.dt = slice(p.dt, 2);
  tail.b = slice(p.b, 4);
  tail.c = slice(p.c, 4);
  EXPECT_LT(MaxRel(Vec(whole.y.begin() + 5 * 6, whole.y.end()), Forward64(tail).y), 1e-15);
}

struct Floats {
  SsdDims dims;
  std::vector<float> x, dt, a_log, dt_bias, d, b, c, s0, dy, dsf;
  std::vector<uint8_t> reset;
  SsdInputs Inputs() const { return {dims, x, dt, a_log, dt_bias, d, b, c, reset, s0}; }
};

std::vector<float> F(const Vec& x) { return {x.begin(), x.end()}; }
Vec Dd(const std::vector<float>& x) { return {x.begin(), x.end()}; }

Floats ToFloats(const Problem& p, std::mt19937& rng) {
  Floats f{p.dims, F(p.x), F(p.dt), F(p.a_log), F(p.dt_bias), F(p.d), F(p.b), F(p.c), F(p.s0)};
  f.reset = p.reset;
  f.dy = F(Random(p.dims.XElems(), -1, 1, rng));
  if (!p.s0.empty()) f.dsf = F(Random(p.dims.StateElems(), -1, 1, rng));
  return f;
}

struct FloatResult {
  std::vector<float> y, s, dx, ddt, da, dbias, dd, db, dc, ds0;
};

FloatResult RunOp(const Floats& in, SsdImpl impl, int chunk, int threads = 2) {
  const SsdDims& d = in.dims;
  const bool state = !in.s0.empty();
  FloatResult r;
  r.y.resize(d.XElems());
  if (state) r.s.resize(d.StateElems());
  const SsdOptions options{.impl = impl, .num_threads = threads, .chunk_size = chunk};
  SsdForwardOutputs out{r.y, r.s};
  EXPECT_TRUE(SsdForward(in.Inputs(), options, &out).ok());
  r.dx.resize(d.XElems());
  r.ddt.resize(d.GateElems());
  r.da.resize(d.heads);
  r.dbias.resize(d.heads);
  r.dd.resize(d.heads);
  r.db.resize(d.BcElems());
  r.dc.resize(d.BcElems());
  if (state) r.ds0.resize(d.StateElems());
  SsdGradients g{r.dx, r.ddt, r.da, r.dbias, r.dd, r.db, r.dc, r.ds0};
  EXPECT_TRUE(SsdBackward(in.Inputs(), options, {in.dy, in.dsf}, &g).ok());
  return r;
}

TEST(SsdRecurrent, Float32MatchesTheOracleAtEveryCheckpointInterval) {
  std::mt19937 rng(7);
  Problem p = MakeProblem({2, 70, 4, 16, 2, 32}, 8, true);
  p.reset.assign(2 * 70, 0);
  p.reset[33] = p.reset[70 + 64] = 1;
  const Floats x = ToFloats(p, rng);
  const FloatResult ref = RunOp(x, SsdImpl::kReference, 64);
  for (int chunk : {1, 7, 64, 100}) {
    SCOPED_TRACE(chunk);
    const FloatResult got = RunOp(x, SsdImpl::kRecurrent, chunk, chunk == 7 ? 3 : 2);
    EXPECT_LT(MaxRel(Dd(got.y), Dd(ref.y)), 1e-5);
    EXPECT_LT(MaxRel(Dd(got.s), Dd(ref.s)), 1e-5);
    EXPECT_LT(MaxRel(Dd(got.dx), Dd(ref.dx)), 1e-4);
    EXPECT_LT(MaxRel(Dd(got.ddt), Dd(ref.ddt)), 1e-4);
    EXPECT_LT(MaxRel(Dd(got.da), Dd(ref.da)), 1e-4);
    EXPECT_LT(MaxRel(Dd(got.dbias), Dd(ref.dbias)), 1e-4);
    EXPECT_LT(MaxRel(Dd(got.dd), Dd(ref.dd)), 1e-4);
    EXPECT_LT(MaxRel(Dd(got.db), Dd(ref.db)), 1e-4);
    EXPECT_LT(MaxRel(Dd(got.dc), Dd(ref.dc)), 1e-4);
    EXPECT_LT(MaxRel(Dd(got.ds0), Dd(ref.ds0)), 1e-4);
  }
  // The thread count changes nothing, bit for bit.
  const FloatResult one = RunOp(x, SsdImpl::kRecurrent, 64, 1),
                    four = RunOp(x, SsdImpl::kRecurrent, 64, 4);
  EXPECT_EQ(one.db, four.db);
  EXPECT_EQ(one.da, four.da);
  EXPECT_EQ(one.y, four.y);
}

// The chunked form against the oracle: chunk sizes around the lengths (T = 1, Q - 1, Q + 1,
// 2Q + 3), resets (one at a chunk's first token), an initial state, two groups.
TEST(SsdChunked, MatchesTheOracleForEveryChunkSize) {
  std::mt19937 rng(11);
  for (int64_t T : {1, 15, 17, 35, 70}) {
    Problem p = MakeProblem({2, T, 4, 8, 2, 16}, 12 + T, true);
    p.reset.assign(2 * T, 0);
    if (T > 16) p.reset[16] = p.reset[T + 5] = 1;
    const Floats x = ToFloats(p, rng);
    const FloatResult ref = RunOp(x, SsdImpl::kReference, 64);
    for (int chunk : {1, 4, 16, 64}) {
      SCOPED_TRACE(::testing::Message() << "T=" << T << " Q=" << chunk);
      const FloatResult got = RunOp(x, SsdImpl::kChunked, chunk, 3);
      EXPECT_LT(MaxRel(Dd(got.y), Dd(ref.y)), 1e-5);
      EXPECT_LT(MaxRel(Dd(got.s), Dd(ref.s)), 1e-5);
      EXPECT_LT(MaxRel(Dd(got.dx), Dd(ref.dx)), 1e-4);
      EXPECT_LT(MaxRel(Dd(got.ddt), Dd(ref.ddt)), 1e-4);
      EXPECT_LT(MaxRel(Dd(got.da), Dd(ref.da)), 1e-4);
      EXPECT_LT(MaxRel(Dd(got.dbias), Dd(ref.dbias)), 1e-4);
      EXPECT_LT(MaxRel(Dd(got.dd), Dd(ref.dd)), 1e-4);
      EXPECT_LT(MaxRel(Dd(got.db), Dd(ref.db)), 1e-4);
      EXPECT_LT(MaxRel(Dd(got.dc), Dd(ref.dc)), 1e-4);
      EXPECT_LT(MaxRel(Dd(got.ds0), Dd(ref.ds0)), 1e-4);
    }
  }
}

// Two slices carrying S equal one pass, forward and backward.
TEST(SsdRecurrent, CarriedStateEqualsOnePass) {
  std::mt19937 rng(9);
  const int64_t B = 2, T = 30, H = 2, P = 4, G = 1, N = 8, cut = 13;
  Problem p = MakeProblem({B, T, H, P, G, N}, 10, false);
  p.s0.assign(p.dims.StateElems(), 0.0);  // explicit zero state: finals and their gradients
  const Floats whole = ToFloats(p, rng);
  const FloatResult one = RunOp(whole, SsdImpl::kRecurrent, 8);
  auto rows = [&](const std::vector<float>& x, int64_t per, int64_t t0, int64_t n) {
    std::vector<float> out;
    for (int64_t b = 0; b < B; ++b) {
      out.insert(out.end(), x.begin() + (b * T + t0) * per, x.begin() + (b * T + t0 + n) * per);
    }
    return out;
  };
  auto slice = [&](int64_t t0, int64_t n) {
    Floats s = whole;
    s.dims.seq_len = n;
    s.x = rows(whole.x, H * P, t0, n);
    s.dt = rows(whole.dt, H, t0, n);
    s.b = rows(whole.b, G * N, t0, n);
    s.c = rows(whole.c, G * N, t0, n);
    s.dy = rows(whole.dy, H * P, t0, n);
    return s;
  };
  Floats a = slice(0, cut), b = slice(cut, T - cut);
  a.dsf.assign(p.dims.StateElems(), 0.f);
  const FloatResult ra0 = RunOp(a, SsdImpl::kRecurrent, 8);
  b.s0 = ra0.s;
  const FloatResult rb = RunOp(b, SsdImpl::kRecurrent, 8);
  a.dsf = rb.ds0;
  const FloatResult ra = RunOp(a, SsdImpl::kRecurrent, 8);
  EXPECT_LT(MaxRel(Dd(rb.y), Dd(rows(one.y, H * P, cut, T - cut))), 1e-5);
  EXPECT_LT(MaxRel(Dd(rb.s), Dd(one.s)), 1e-5);
  EXPECT_LT(MaxRel(Dd(ra.dx), Dd(rows(one.dx, H * P, 0, cut))), 1e-4);
  EXPECT_LT(MaxRel(Dd(ra.ddt), Dd(rows(one.ddt, H, 0, cut))), 1e-4);
  EXPECT_LT(MaxRel(Dd(ra.db), Dd(rows(one.db, G * N, 0, cut))), 1e-4);
  std::vector<float> dd(H);
  for (int h = 0; h < H; ++h) dd[h] = ra.dd[h] + rb.dd[h];
  EXPECT_LT(MaxRel(Dd(dd), Dd(one.dd)), 1e-4);
}

TEST(SsdOp, RefusesBadInput) {
  std::mt19937 rng(1);
  Floats x = ToFloats(MakeProblem({1, 4, 2, 4, 1, 4}, 1, false), rng);
  std::vector<float> y(32);
  SsdForwardOutputs out{y};
  x.dt.pop_back();
  absl::Status s = SsdForward(x.Inputs(), {}, &out);
  EXPECT_NE(s.message().find("'dt'"), std::string::npos) << s;
  x = ToFloats(MakeProblem({1, 4, 2, 4, 1, 4}, 1, false), rng);
  x.b[3] = NAN;
  s = SsdForward(x.Inputs(), {}, &out);
  EXPECT_NE(s.message().find("non-finite"), std::string::npos) << s;
  x = ToFloats(MakeProblem({1, 4, 2, 4, 1, 4}, 1, false), rng);
  x.dims.groups = 3;  // 2 heads cannot share 3 groups
  s = SsdForward(x.Inputs(), {}, &out);
  EXPECT_NE(s.message().find("multiple of groups"), std::string::npos) << s;
}

}  // namespace
}  // namespace mesa::kernels::ssd
