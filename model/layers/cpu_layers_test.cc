// Finite-difference gradient checks of every layer, in double.
#include "model/layers/cpu_layers.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace mesa::model::cpu {
namespace {

using Vec = std::vector<double>;

Vec Random(size_t n, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> dist(0.0, scale);
  Vec v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares `analytic` with central differences of `loss` with respect to `var`.
void ExpectGradient(const std::function<double()>& loss, Vec& var, const Vec& analytic,
                    const char* what, double tol = 1e-6) {
  ASSERT_EQ(var.size(), analytic.size());
  const double h = 1e-5;
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < var.size(); ++i) {
    const double saved = var[i];
    var[i] = saved + h;
    const double up = loss();
    var[i] = saved - h;
    const double down = loss();
    var[i] = saved;
    const double numeric = (up - down) / (2 * h);
    max_err = std::max(max_err, std::abs(numeric - analytic[i]));
    max_ref = std::max(max_ref, std::abs(numeric));
  }
  EXPECT_GT(max_ref, 0.0) << what << ": gradient is identically zero";
  EXPECT_LT(max_err, tol * std::max(1.0, max_ref)) << what;
}

TEST(CpuLayersTest, LinearGradients) {
  std::mt19937 rng(1);
  const int m = 5, k = 4, n = 3;
  Vec in = Random(m * k, rng), w = Random(n * k, rng), r = Random(m * n, rng);
  auto loss = [&] {
    Vec out(m * n);
    LinearForward(in.data(), w.data(), out.data(), m, k, n);
    return Dot(out, r);
  };
  Vec d_in(m * k, 0.0), d_w(n * k, 0.0);
  LinearBackward(in.data(), w.data(), r.data(), d_in.data(), d_w.data(), m, k, n);
  ExpectGradient(loss, in, d_in, "d_in");
  ExpectGradient(loss, w, d_w, "d_weight");
}

TEST(CpuLayersTest, EmbeddingGradients) {
  std::mt19937 rng(2);
  const int v = 6, c = 3;
  std::vector<int32_t> tokens = {1, 4, 1, 0, 5};
  Vec table = Random(v * c, rng), r = Random(tokens.size() * c, rng);
  auto loss = [&] {
    Vec out(tokens.size() * c);
    EmbeddingForward(tokens.data(), table.data(), out.data(), tokens.size(), c, 1.7);
    return Dot(out, r);
  };
  Vec d_table(v * c, 0.0);
  EmbeddingBackward(tokens.data(), r.data(), d_table.data(), tokens.size(), c, 1.7);
  ExpectGradient(loss, table, d_table, "d_table");
}

TEST(CpuLayersTest, RmsNormGradients) {
  std::mt19937 rng(3);
  const int rows = 4, c = 5;
  Vec x = Random(rows * c, rng), w = Random(c, rng), r = Random(rows * c, rng);
  auto loss = [&] {
    Vec out(rows * c), rstd(rows);
    RmsNormForward(x.data(), w.data(), out.data(), rstd.data(), rows, c, 1e-5);
    return Dot(out, r);
  };
  Vec out(rows * c), rstd(rows), d_x(rows * c, 0.0), d_w(c, 0.0);
  RmsNormForward(x.data(), w.data(), out.data(), rstd.data(), rows, c, 1e-5);
  RmsNormBackward(x.data(), w.data(), rstd.data(), r.data(), d_x.data(), d_w.data(), rows, c);
  ExpectGradient(loss, x, d_x, "d_x");
  ExpectGradient(loss, w, d_w, "d_weight");
  // Unit weight: output rows have unit RMS.
  Vec ones(c, 1.0);
  RmsNormForward(x.data(), ones.data(), out.data(), rstd.data(), rows, c, 0.0);
  double sq = 0;
  for (int j = 0; j < c; ++j) sq += out[j] * out[j];
  EXPECT_NEAR(sq / c, 1.0, 1e-12);
}

TEST(CpuLayersTest, CausalConvGradientsAndCausality) {
  std::mt19937 rng(4);
  const int b = 2, t = 6, ch = 3, w = 4;
  Vec x = Random(b * t * ch, rng), wt = Random(ch * w, rng), r = Random(b * t * ch, rng);
  auto loss = [&] {
    Vec out(b * t * ch);
    CausalConvForward(x.data(), wt.data(), out.data(), b, t, ch, w);
    return Dot(out, r);
  };
  Vec d_x(x.size(), 0.0), d_w(wt.size(), 0.0);
  CausalConvBackward(x.data(), wt.data(), r.data(), d_x.data(), d_w.data(), b, t, ch, w);
  ExpectGradient(loss, x, d_x, "d_x");
  ExpectGradient(loss, wt, d_w, "d_weight");
  // Changing a future token (or the other sequence) leaves earlier outputs unchanged; the last tap
  // multiplies the current token.
  Vec out1(x.size()), out2(x.size());
  CausalConvForward(x.data(), wt.data(), out1.data(), b, t, ch, w);
  x[3 * ch + 1] += 1.0;
  CausalConvForward(x.data(), wt.data(), out2.data(), b, t, ch, w);
  for (int i = 0; i < 3 * ch; ++i) EXPECT_EQ(out1[i], out2[i]);
  EXPECT_NEAR(out2[3 * ch + 1] - out1[3 * ch + 1], wt[1 * w + 3], 1e-12);
  for (int i = t * ch; i < b * t * ch; ++i) EXPECT_EQ(out1[i], out2[i]);
}

// Packed documents: the convolution of a row with document starts equals that of each document
// alone (rows of 1, 2 and 5 tokens, shorter and longer than the taps), and its backward is the
// finite-difference gradient of that forward.
TEST(CpuLayersTest, CausalConvWithDocumentStartsIsEachDocumentAlone) {
  std::mt19937 rng(15);
  const int b = 2, t = 8, ch = 3, w = 4;
  // Row 0: documents [0, 1), [1, 3), [3, 8); row 1: one document.
  const std::vector<int32_t> starts = {0, 1, 1, 3, 3, 3, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0};
  Vec x = Random(b * t * ch, rng), wt = Random(ch * w, rng), r = Random(b * t * ch, rng);
  Vec out(b * t * ch);
  CausalConvForward(x.data(), wt.data(), out.data(), b, t, ch, w, starts.data());
  for (auto [row, begin, end] : {std::tuple{0, 0, 1}, {0, 1, 3}, {0, 3, 8}, {1, 0, 8}}) {
    const int n = end - begin;
    const Vec alone_x(x.begin() + (row * t + begin) * ch, x.begin() + (row * t + end) * ch);
    Vec alone(n * ch);
    CausalConvForward(alone_x.data(), wt.data(), alone.data(), 1, n, ch, w);
    for (int i = 0; i < n * ch; ++i) {
      EXPECT_NEAR(out[(row * t + begin) * ch + i], alone[i], 1e-14) << row << " " << begin;
    }
  }
  auto loss = [&] {
    Vec o(b * t * ch);
    CausalConvForward(x.data(), wt.data(), o.data(), b, t, ch, w, starts.data());
    return Dot(o, r);
  };
  Vec d_x(x.size(), 0.0), d_w(wt.size(), 0.0);
  CausalConvBackward(x.data(), wt.data(), r.data(), d_x.data(), d_w.data(), b, t, ch, w,
                     starts.data());
  ExpectGradient(loss, x, d_x, "d_x");
  ExpectGradient(loss, wt, d_w, "d_weight");
}

TEST(CpuLayersTest, FillAtDocumentStartsWritesTheirRowsOnly) {
  const std::vector<int32_t> starts = {0, 0, 2, 0, 1, 1};  // 2 rows of 3
  std::vector<float> x(6 * 2, 1.f);
  FillAtDocumentStarts(x.data(), starts.data(), 2, 3, 2, -30.f);
  EXPECT_EQ(x, (std::vector<float>{-30, -30, 1, 1, -30, -30, -30, -30, -30, -30, 1, 1}));
}

// A slice continued from the w - 1 inputs before it and handing its last w - 1 on: the tail terms
// plus CausalConvBackward are the finite-difference gradient of the convolution of [tail; x] (its
// outputs over the slice) plus a readout of the slice's last inputs.
TEST(CpuLayersTest, CausalConvTailGradients) {
  std::mt19937 rng(14);
  const int b = 2, t = 5, ch = 3, w = 4, tw = w - 1;
  Vec x = Random(b * t * ch, rng), tail = Random(b * tw * ch, rng), wt = Random(ch * w, rng);
  const Vec r = Random(b * t * ch, rng), r_tail = Random(b * tw * ch, rng);
  auto loss = [&] {
    const int te = t + tw;
    Vec ext(b * te * ch), out(b * te * ch);
    for (int bi = 0; bi < b; ++bi) {
      std::copy_n(&tail[bi * tw * ch], tw * ch, &ext[bi * te * ch]);
      std::copy_n(&x[bi * t * ch], t * ch, &ext[(bi * te + tw) * ch]);
    }
    CausalConvForward(ext.data(), wt.data(), out.data(), b, te, ch, w);
    double sum = 0;
    for (int bi = 0; bi < b; ++bi) {
      for (int i = 0; i < t * ch; ++i) sum += out[(bi * te + tw) * ch + i] * r[bi * t * ch + i];
      for (int i = 0; i < tw * ch; ++i) {
        sum += x[(bi * t + t - tw) * ch + i] * r_tail[bi * tw * ch + i];
      }
    }
    return sum;
  };
  Vec d_x(x.size(), 0.0), d_w(wt.size(), 0.0), d_tail(tail.size(), 7.0);
  CausalConvBackward(x.data(), wt.data(), r.data(), d_x.data(), d_w.data(), b, t, ch, w);
  CausalConvTailBackward(tail.data(), r_tail.data(), wt.data(), r.data(), d_x.data(), d_tail.data(),
                         d_w.data(), b, t, ch, w);
  ExpectGradient(loss, x, d_x, "d_x");
  ExpectGradient(loss, tail, d_tail, "d_tail");
  ExpectGradient(loss, wt, d_w, "d_weight");
}

TEST(CpuLayersTest, SiluL2NormGradients) {
  std::mt19937 rng(5);
  const int groups = 3, d = 4;
  Vec x = Random(groups * d, rng), r = Random(groups * d, rng);
  auto loss = [&] {
    Vec y(x.size());
    SiluL2NormForward(x.data(), y.data(), groups, d);
    return Dot(y, r);
  };
  Vec d_x(x.size(), 0.0);
  SiluL2NormBackward(x.data(), r.data(), d_x.data(), groups, d);
  ExpectGradient(loss, x, d_x, "d_x");
}

TEST(CpuLayersTest, GatesGradientsAndCap) {
  std::mt19937 rng(6);
  const int n = 7;
  const double cap = 0.0025;
  Vec a = Random(n, rng, 3.0), b = Random(n, rng, 3.0);
  Vec r1 = Random(n, rng), r2 = Random(n, rng);
  auto loss = [&] {
    Vec beta(n), lg(n);
    GatesForward(a.data(), b.data(), beta.data(), lg.data(), n, cap);
    return Dot(beta, r1) + Dot(lg, r2);
  };
  Vec d_a(n), d_b(n);
  GatesBackward(a.data(), b.data(), r1.data(), r2.data(), d_a.data(), d_b.data(), n, cap);
  ExpectGradient(loss, a, d_a, "d_a_pre");
  ExpectGradient(loss, b, d_b, "d_b_pre");
  // gamma = sigmoid(a) (1 - cap beta^2); with a, b large gamma <= 1 - cap.
  Vec big(1, 40.0), beta(1), lg(1);
  GatesForward(big.data(), big.data(), beta.data(), lg.data(), 1, cap);
  EXPECT_NEAR(std::exp(lg[0]), 1.0 - cap, 1e-12);
  Vec very_negative(1, -200.0);
  GatesForward(very_negative.data(), big.data(), beta.data(), lg.data(), 1, cap);
  EXPECT_TRUE(std::isfinite(lg[0]));
  EXPECT_NEAR(lg[0], -200.0 + std::log1p(-cap), 1e-9);
}

TEST(CpuLayersTest, LambdaAndSwiGluGradients) {
  std::mt19937 rng(7);
  const int n = 6;
  Vec p = Random(n, rng), r = Random(n, rng);
  auto lambda_loss = [&] {
    Vec l(n);
    LambdaForward(p.data(), l.data(), n, 0.25);
    return Dot(l, r);
  };
  Vec d_p(n, 0.0);
  LambdaBackward(p.data(), r.data(), d_p.data(), n);
  ExpectGradient(lambda_loss, p, d_p, "d_lambda_param");
  Vec one(1, std::log(std::expm1(0.75))), lam(1);
  LambdaForward(one.data(), lam.data(), 1, 0.25);
  EXPECT_NEAR(lam[0], 1.0, 1e-12);

  Vec g = Random(n, rng), u = Random(n, rng);
  auto glu_loss = [&] {
    Vec h(n);
    SwiGluForward(g.data(), u.data(), h.data(), n);
    return Dot(h, r);
  };
  Vec d_g(n), d_u(n);
  SwiGluBackward(g.data(), u.data(), r.data(), d_g.data(), d_u.data(), n);
  ExpectGradient(glu_loss, g, d_g, "d_gate");
  ExpectGradient(glu_loss, u, d_u, "d_up");
}

// Hawk's GeLU gate: the tanh form (not the erf form: about 1e-4 apart at z = 1, Griffin's choice),
// and its gradients over the range where the cubic term matters.
TEST(CpuLayersTest, GeluGateIsTheTanhFormWithItsGradients) {
  const int n = 9;
  Vec y(n), x(n), r(n), out(n);
  std::mt19937 rng(17);
  for (int i = 0; i < n; ++i) y[i] = -4.0 + i;  // -4 .. 4
  x = Random(n, rng);
  r = Random(n, rng);
  Vec one = {1.0}, unit = {1.0}, gelu(1);
  GeluGateForward(one.data(), unit.data(), gelu.data(), 1);
  const double erf_form = 0.5 * (1.0 + std::erf(1.0 / std::sqrt(2.0)));
  EXPECT_NEAR(gelu[0], 0.5 * (1 + std::tanh(std::sqrt(2 / M_PI) * (1 + 0.044715))), 1e-15);
  EXPECT_GT(std::abs(gelu[0] - erf_form), 1e-5);
  auto loss = [&] {
    GeluGateForward(y.data(), x.data(), out.data(), n);
    return Dot(out, r);
  };
  Vec d_y(n), d_x(n);
  GeluGateBackward(y.data(), x.data(), r.data(), d_y.data(), d_x.data(), n);
  ExpectGradient(loss, y, d_y, "d_y_pre");
  ExpectGradient(loss, x, d_x, "d_x");
}

// SiLU of Mamba-2's convolution output, x * sigmoid(x), and its gradient.
TEST(CpuLayersTest, SiluAndItsGradient) {
  const int n = 9;
  Vec x(n), r(n), y(n);
  std::mt19937 rng(23);
  for (int i = 0; i < n; ++i) x[i] = -4.0 + i;
  r = Random(n, rng);
  SiluForward(x.data(), y.data(), n);
  EXPECT_NEAR(y[5], 1.0 / (1.0 + std::exp(-1.0)), 1e-15);  // x = 1
  auto loss = [&] {
    SiluForward(x.data(), y.data(), n);
    return Dot(y, r);
  };
  Vec d_x(n, 7.0);  // overwritten
  SiluBackward(x.data(), r.data(), d_x.data(), n);
  ExpectGradient(loss, x, d_x, "d_x");
}

// Block-diagonal: each column block maps through its own matrix, and nothing crosses blocks.
TEST(CpuLayersTest, BlockDiagonalLinearGradientsAndBlocks) {
  std::mt19937 rng(19);
  const int m = 4, blocks = 3, width = 2, k = blocks * width;
  Vec in = Random(m * k, rng), w = Random(blocks * width * width, rng), r = Random(m * k, rng);
  auto loss = [&] {
    Vec out(m * k);
    BlockDiagonalLinearForward(in.data(), w.data(), out.data(), m, blocks, width, false);
    return Dot(out, r);
  };
  Vec d_in(m * k, 0.0), d_w(blocks * width * width, 0.0);
  BlockDiagonalLinearBackward(in.data(), w.data(), r.data(), d_in.data(), d_w.data(), m, blocks,
                              width, false);
  ExpectGradient(loss, in, d_in, "d_in");
  ExpectGradient(loss, w, d_w, "d_weight");
  // Against the dense map with the blocks on the diagonal.
  Vec dense(k * k, 0.0), want(m * k), got(m * k);
  for (int j = 0; j < blocks; ++j) {
    for (int a = 0; a < width; ++a) {
      for (int b = 0; b < width; ++b) {
        dense[(j * width + a) * k + j * width + b] = w[(j * width + a) * width + b];
      }
    }
  }
  LinearForward(in.data(), dense.data(), want.data(), m, k, k);
  BlockDiagonalLinearForward(in.data(), w.data(), got.data(), m, blocks, width, false);
  for (int i = 0; i < m * k; ++i) EXPECT_NEAR(got[i], want[i], 1e-12);
}

TEST(CpuLayersTest, SoftcapCrossEntropyGradientsSkipBos) {
  std::mt19937 rng(8);
  const int rows = 4, v = 5;
  const int32_t bos = 4;
  std::vector<int32_t> targets = {1, bos, 3, 0};
  Vec logits = Random(rows * v, rng, 20.0);
  auto loss = [&] {
    Vec losses(rows);
    return 0.5 * SoftcapCrossEntropyForward(logits.data(), targets.data(), losses.data(), rows, v,
                                            v, 30.0, bos);
  };
  Vec grad = logits;
  SoftcapCrossEntropyBackward(grad.data(), targets.data(), rows, v, v, 30.0, bos, 0.5);
  ExpectGradient(loss, logits, grad, "d_logits");
  for (int j = 0; j < v; ++j) EXPECT_EQ(grad[1 * v + j], 0.0);  // BOS target row.
  // Soft-cap: a huge logit behaves like 30.
  Vec huge = {1e6, 0, 0, 0, 0}, losses(1);
  std::vector<int32_t> t0 = {1};
  const double l =
      SoftcapCrossEntropyForward(huge.data(), t0.data(), losses.data(), 1, v, v, 30.0, bos);
  EXPECT_NEAR(l, std::log(std::exp(30.0) + 4.0), 1e-9);
}

// cap 0: no soft-cap, plain cross entropy (FLA's MesaNet), against float64 log-sum-exp.
TEST(CpuLayersTest, CrossEntropyWithoutSoftcap) {
  std::mt19937 rng(9);
  const int rows = 3, v = 6;
  const int32_t bos = 5;
  std::vector<int32_t> targets = {2, bos, 0};
  Vec logits = Random(rows * v, rng, 40.0);
  auto loss = [&] {
    Vec losses(rows);
    return SoftcapCrossEntropyForward(logits.data(), targets.data(), losses.data(), rows, v, v, 0.0,
                                      bos);
  };
  double want = 0;
  for (int r : {0, 2}) {
    double sum = 0;
    for (int j = 0; j < v; ++j) sum += std::exp(logits[r * v + j]);
    want += std::log(sum) - logits[r * v + targets[r]];
  }
  EXPECT_NEAR(loss(), want, 1e-9 * std::abs(want));
  Vec grad = logits;
  SoftcapCrossEntropyBackward(grad.data(), targets.data(), rows, v, v, 0.0, bos, 1.0);
  ExpectGradient(loss, logits, grad, "d_logits");
  std::vector<int32_t> tokens(rows);
  Vec logprobs(rows);
  SoftcapArgmax(logits.data(), rows, v, v, 0.0, tokens.data(), logprobs.data());
  EXPECT_EQ(tokens[0], std::max_element(logits.begin(), logits.begin() + v) - logits.begin());
}

// Padded row strides (MesaNet's logits): same bits as the dense layout, padding never touched.
TEST(CpuLayersTest, StridedLinearAndCrossEntropyMatchDense) {
  std::mt19937 rng(11);
  const int64_t m = 7, k = 5, n = 9, ld = 16;
  const double pad = 12345.0;  // sentinel in columns [n, ld)
  auto to_strided = [&](const Vec& dense, int64_t rows) {
    Vec s(rows * ld, pad);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) s[r * ld + j] = dense[r * n + j];
    }
    return s;
  };
  auto expect_same = [&](const Vec& strided, const Vec& dense, int64_t rows, const char* what) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < ld; ++j) {
        EXPECT_EQ(strided[r * ld + j], j < n ? dense[r * n + j] : pad)
            << what << " " << r << "," << j;
      }
    }
  };
  const Vec in = Random(m * k, rng), w = Random(n * k, rng), acc = Random(m * n, rng);
  for (bool accumulate : {false, true}) {
    Vec dense = acc, strided = to_strided(acc, m);
    LinearForward(in.data(), w.data(), dense.data(), m, k, n, accumulate);
    LinearForwardStrided(in.data(), w.data(), strided.data(), ld, m, k, n, accumulate);
    expect_same(strided, dense, m, accumulate ? "forward accumulate" : "forward");
  }
  const Vec d_out = Random(m * n, rng), d_in0 = Random(m * k, rng), d_w0 = Random(n * k, rng);
  const Vec d_out_s = to_strided(d_out, m);
  Vec d_in = d_in0, d_w = d_w0, d_in_s = d_in0, d_w_s = d_w0;
  LinearBackward(in.data(), w.data(), d_out.data(), d_in.data(), d_w.data(), m, k, n);
  LinearBackwardStrided(in.data(), w.data(), d_out_s.data(), ld, d_in_s.data(), d_w_s.data(), m, k,
                        n);
  EXPECT_EQ(d_in, d_in_s);
  EXPECT_EQ(d_w, d_w_s);

  const int32_t bos = 2;
  std::vector<int32_t> targets = {0, bos, 8, 3, 1, 5, 7};
  const Vec logits = Random(m * n, rng, 20.0);
  Vec losses(m), losses_s(m);
  const double sum =
      SoftcapCrossEntropyForward(logits.data(), targets.data(), losses.data(), m, n, n, 30.0, bos);
  Vec logits_s = to_strided(logits, m);
  const double sum_s = SoftcapCrossEntropyForward(logits_s.data(), targets.data(), losses_s.data(),
                                                  m, n, ld, 30.0, bos);
  EXPECT_EQ(sum, sum_s);
  EXPECT_EQ(losses, losses_s);
  Vec grad = logits;
  SoftcapCrossEntropyBackward(grad.data(), targets.data(), m, n, n, 30.0, bos, 0.25);
  SoftcapCrossEntropyBackward(logits_s.data(), targets.data(), m, n, ld, 30.0, bos, 0.25);
  expect_same(logits_s, grad, m, "d_logits");
}

}  // namespace
}  // namespace mesa::model::cpu
