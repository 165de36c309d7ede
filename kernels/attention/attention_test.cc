// The attention operator: CPU float32 vs the float64 reference on fresh random inputs, the
// reference's backward vs finite differences in double, window semantics, decoding, bad input.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/attention/attention_op.h"
#include "kernels/attention/reference.h"
#include "kernels/attention/test_util.h"
#include "kernels/mesa/mesa_test_util.h"

namespace mesa::kernels::attention {
namespace {

using ::mesa::kernels::attention::testing::Alone;
using ::mesa::kernels::attention::testing::Config;
using ::mesa::kernels::attention::testing::DocumentsOf;
using ::mesa::kernels::attention::testing::Problem;
using ::mesa::kernels::attention::testing::RandomProblem;
using ::mesa::kernels::attention::testing::ShiftKeyAndValue;
using ::mesa::kernels::attention::testing::TokenRow;
using ::mesa::kernels::attention::testing::Tokens;
using ::mesa::kernels::attention::testing::WithDocuments;
using ::mesa::kernels::testing::MaxRelError;

struct Case {
  Config config;
  int64_t window;
};

class CpuVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(CpuVsReference, ForwardAndBackwardMatch) {
  const Case& c = GetParam();
  const Problem p = RandomProblem(c.config);
  const AttnOptions cpu{.impl = AttnImpl::kCpu, .window = c.window, .num_threads = 2};
  AttnOptions ref = cpu;
  ref.impl = AttnImpl::kReference;
  auto f = AttentionForwardAlloc(p.Inputs(), cpu);
  auto fr = AttentionForwardAlloc(p.Inputs(), ref);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE(fr.ok()) << fr.status();
  EXPECT_LT(MaxRelError(f->o, fr->o), 1e-5);
  EXPECT_LT(MaxRelError(f->lse, fr->lse), 1e-5);
  auto g = AttentionBackwardAlloc(p.Inputs(), p.d_o, cpu, f->o, f->lse);
  auto g_recompute = AttentionBackwardAlloc(p.Inputs(), p.d_o, cpu);
  auto gr = AttentionBackwardAlloc(p.Inputs(), p.d_o, ref);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(g_recompute.ok()) << g_recompute.status();
  ASSERT_TRUE(gr.ok()) << gr.status();
  EXPECT_LT(MaxRelError(g->dq, gr->dq), 1e-4);
  EXPECT_LT(MaxRelError(g->dk, gr->dk), 1e-4);
  EXPECT_LT(MaxRelError(g->dv, gr->dv), 1e-4);
  EXPECT_EQ(g->dq, g_recompute->dq);
  EXPECT_EQ(g->dk, g_recompute->dk);
  EXPECT_EQ(g->dv, g_recompute->dv);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuVsReference,
    ::testing::Values(
        Case{{.batch = 2, .seq_len = 37, .heads = 3, .head_dim = 16, .seed = 1}, 0},
        Case{{.batch = 2, .seq_len = 37, .heads = 3, .head_dim = 16, .seed = 2}, 5},
        Case{{.batch = 1, .seq_len = 20, .heads = 2, .head_dim = 8, .seed = 3}, 1},
        Case{{.batch = 1, .seq_len = 64, .heads = 2, .head_dim = 32, .q_gain = 3.f, .seed = 4}, 17},
        Case{{.batch = 1, .seq_len = 1, .heads = 1, .head_dim = 5, .seed = 5}, 0}));

// Packed documents: each query of a row of documents (of 1, 5, 2 and 13 tokens, the 13 crossing
// the CPU operator's 64-query block) attends exactly as its document alone would, forward and
// backward, in float32 and in the float64 reference, global and windowed.
TEST(Documents, EachIsAttendedAsIfAlone) {
  const Problem p = WithDocuments(
      RandomProblem(
          {.batch = 2, .seq_len = 70, .heads = 2, .head_dim = 16, .q_gain = 2.f, .seed = 21}),
      {1, 5, 2, 13});
  const AttnDims lse_dims{p.dims.batch, p.dims.seq_len, p.dims.heads, 1};
  for (AttnImpl impl : {AttnImpl::kCpu, AttnImpl::kReference}) {
    for (int64_t window : {0, 4}) {
      const AttnOptions options{.impl = impl, .window = window, .num_threads = 2};
      auto f = AttentionForwardAlloc(p.Inputs(), options);
      ASSERT_TRUE(f.ok()) << f.status();
      auto g = AttentionBackwardAlloc(p.Inputs(), p.d_o, options, f->o, f->lse);
      ASSERT_TRUE(g.ok()) << g.status();
      const double tol = impl == AttnImpl::kCpu ? 1e-5 : 1e-12;
      for (const auto& doc : DocumentsOf(p)) {
        const Problem a = Alone(p, doc);
        auto fa = AttentionForwardAlloc(a.Inputs(), options);
        ASSERT_TRUE(fa.ok()) << fa.status();
        auto ga = AttentionBackwardAlloc(a.Inputs(), a.d_o, options, fa->o, fa->lse);
        ASSERT_TRUE(ga.ok()) << ga.status();
        const std::string what =
            absl::StrCat("row ", doc.row, " [", doc.begin, ", ", doc.end, ") window ", window,
                         " impl ", static_cast<int>(impl));
        EXPECT_LT(MaxRelError(Tokens(f->o, p.dims, doc), fa->o), tol) << what;
        EXPECT_LT(MaxRelError(Tokens(f->lse, lse_dims, doc), fa->lse), tol) << what;
        EXPECT_LT(MaxRelError(Tokens(g->dq, p.dims, doc), ga->dq), 10 * tol) << what;
        EXPECT_LT(MaxRelError(Tokens(g->dk, p.dims, doc), ga->dk), 10 * tol) << what;
        EXPECT_LT(MaxRelError(Tokens(g->dv, p.dims, doc), ga->dv), 10 * tol) << what;
      }
    }
  }
}

TEST(Documents, BadStartsAreRejected) {
  Problem p = WithDocuments(RandomProblem({.batch = 1, .seq_len = 6}), {2, 4});
  p.doc_start[3] = 4;  // past its own token
  auto f = AttentionForwardAlloc(p.Inputs(), {});
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("doc_start[3]"), std::string::npos) << f.status();
  p.doc_start[3] = 0;  // before the previous token's document
  EXPECT_EQ(AttentionForwardAlloc(p.Inputs(), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  p.doc_start.pop_back();
  EXPECT_EQ(AttentionForwardAlloc(p.Inputs(), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Loss L = sum do . o; central differences of the float64 forward vs the reference backward
// (also with packed documents).
TEST(ReferenceBackward, MatchesFiniteDifferences) {
  for (auto [window, documents] :
       {std::pair<int64_t, bool>{0, false}, {3, false}, {0, true}, {3, true}}) {
    Problem p = RandomProblem({.batch = 2,
                               .seq_len = 7,
                               .heads = 2,
                               .head_dim = 4,
                               .q_gain = 2.f,
                               .seed = 11 + static_cast<uint64_t>(window)});
    if (documents) p = WithDocuments(std::move(p), {3, 4});
    Attn64 base = Attn64::FromInputs(p.Inputs(), {.window = window});
    const std::vector<double> d_o(p.d_o.begin(), p.d_o.end());
    const Gradients64 g = ReferenceBackward64(base, d_o);
    auto loss = [&](const Attn64& x) {
      const Forward64 f = ReferenceForward64(x);
      return std::inner_product(f.o.begin(), f.o.end(), d_o.begin(), 0.0);
    };
    const double eps = 1e-6;
    for (auto [field, grad, name] : {std::tuple{&Attn64::q, &g.dq, "dq"},
                                     {&Attn64::k, &g.dk, "dk"},
                                     {&Attn64::v, &g.dv, "dv"}}) {
      double max_err = 0, max_ref = 0;
      for (size_t i = 0; i < grad->size(); ++i) {
        Attn64 plus = base, minus = base;
        (plus.*field)[i] += eps;
        (minus.*field)[i] -= eps;
        const double fd = (loss(plus) - loss(minus)) / (2 * eps);
        max_err = std::max(max_err, std::abs(fd - (*grad)[i]));
        max_ref = std::max(max_ref, std::abs(fd));
      }
      EXPECT_LT(max_err / max_ref, 1e-7) << name << " window " << window << " " << documents;
      EXPECT_GT(max_ref, 0.1) << name;
    }
  }
}

// A window that covers the whole sequence is global attention, bit for bit (same arithmetic).
TEST(Window, AtLeastSeqLenEqualsGlobal) {
  const Problem p = RandomProblem({.batch = 2, .seq_len = 23, .heads = 2, .head_dim = 8});
  for (AttnImpl impl : {AttnImpl::kCpu, AttnImpl::kReference}) {
    auto global = AttentionForwardAlloc(p.Inputs(), {.impl = impl, .window = 0});
    ASSERT_TRUE(global.ok()) << global.status();
    for (int64_t w : {23, 24, 1000}) {
      auto swa = AttentionForwardAlloc(p.Inputs(), {.impl = impl, .window = w});
      ASSERT_TRUE(swa.ok()) << swa.status();
      EXPECT_EQ(swa->o, global->o) << "window " << w;
      EXPECT_EQ(swa->lse, global->lse) << "window " << w;
    }
  }
  // ... and a window shorter than T is not.
  auto global = AttentionForwardAlloc(p.Inputs(), {.window = 0});
  auto swa = AttentionForwardAlloc(p.Inputs(), {.window = 22});
  ASSERT_TRUE(global.ok() && swa.ok());
  EXPECT_NE(swa->o, global->o);
}

// Token t sees t-W+1..t: perturbing k and v at t-W leaves o_t unchanged, at t-W+1 changes it.
TEST(Window, OutputSeesExactlyTheLastWTokens) {
  const int64_t kW = 5, t = 12;
  const Problem p = RandomProblem({.batch = 1, .seq_len = 20, .heads = 2, .head_dim = 8});
  for (AttnImpl impl : {AttnImpl::kCpu, AttnImpl::kReference}) {
    const AttnOptions opt{.impl = impl, .window = kW};
    auto base = AttentionForwardAlloc(p.Inputs(), opt);
    ASSERT_TRUE(base.ok()) << base.status();
    for (int64_t changed : {t - kW, t - kW + 1}) {
      auto f = AttentionForwardAlloc(ShiftKeyAndValue(p, changed).Inputs(), opt);
      ASSERT_TRUE(f.ok()) << f.status();
      const bool same = TokenRow(f->o, p.dims, t) == TokenRow(base->o, p.dims, t);
      EXPECT_EQ(same, changed == t - kW) << AttnImplName(impl) << " changed token " << changed;
    }
  }
}

// Decoding one query against a KV cache (slots in any order, a ring of W for SWA) equals the
// full forward's output at that position.
TEST(Decode, MatchesForwardOnCachedPrefix) {
  const int64_t kB = 2, kT = 30, kH = 3, kD = 16;
  const Problem p = RandomProblem({.batch = kB, .seq_len = kT, .heads = kH, .head_dim = kD});
  const int64_t row = kH * kD;
  for (int64_t window : {0, 7}) {
    auto f = AttentionForwardAlloc(p.Inputs(), {.window = window});
    ASSERT_TRUE(f.ok()) << f.status();
    const int64_t cap = window > 0 ? window : kT;
    // Row b decodes position pos[b]: the cache holds the keys it sees, slot = token % cap.
    const std::vector<int32_t> pos = {29, 4};
    std::vector<float> kc(kB * cap * row, NAN), vc(kB * cap * row, NAN), q(kB * row);
    std::vector<int32_t> lengths(kB);
    for (int64_t b = 0; b < kB; ++b) {
      for (int64_t j = WindowStart(pos[b], window); j <= pos[b]; ++j) {
        const int64_t src = (b * kT + j) * row, dst = (b * cap + j % cap) * row;
        std::copy_n(&p.k[src], row, &kc[dst]);
        std::copy_n(&p.v[src], row, &vc[dst]);
      }
      lengths[b] = static_cast<int32_t>(std::min<int64_t>(pos[b] + 1, cap));
      std::copy_n(&p.q[(b * kT + pos[b]) * row], row, &q[b * row]);
    }
    // Slots beyond the valid length stay NaN: the op must not read them.
    std::vector<float> o(kB * row);
    const AttnDecodeInputs in{.batch = kB,
                              .heads = kH,
                              .head_dim = kD,
                              .capacity = cap,
                              .q = q,
                              .k_cache = kc,
                              .v_cache = vc,
                              .lengths = lengths};
    ASSERT_TRUE(AttentionDecode(in, 0.f, o, 2).ok());
    for (int64_t b = 0; b < kB; ++b) {
      const std::vector<float> want(f->o.begin() + (b * kT + pos[b]) * row,
                                    f->o.begin() + (b * kT + pos[b] + 1) * row);
      const std::vector<float> got(o.begin() + b * row, o.begin() + (b + 1) * row);
      EXPECT_LT(MaxRelError(got, want), 1e-5) << "window " << window << " row " << b;
    }
  }
}

TEST(BadInput, ClearErrors) {
  const Problem p = RandomProblem({.batch = 1, .seq_len = 8, .heads = 2, .head_dim = 4});
  auto expect_error = [](const absl::Status& s, const char* needle) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(needle), absl::string_view::npos) << s;
  };
  AttnInputs in = p.Inputs();
  in.k = std::span<const float>(p.k).first(p.k.size() - 4);
  expect_error(AttentionForwardAlloc(in, {}).status(), "'k'");
  expect_error(AttentionForwardAlloc(p.Inputs(), {.window = -1}).status(), "window");
  AttnInputs bad_dims = p.Inputs();
  bad_dims.dims.head_dim = 0;
  expect_error(AttentionForwardAlloc(bad_dims, {}).status(), "head_dim");
  std::vector<float> nan_q = p.q;
  nan_q[5] = NAN;
  AttnInputs nan_in = p.Inputs();
  nan_in.q = nan_q;
  expect_error(AttentionForwardAlloc(nan_in, {}).status(), "non-finite");

  auto f = AttentionForwardAlloc(p.Inputs(), {});
  ASSERT_TRUE(f.ok());
  expect_error(AttentionBackwardAlloc(p.Inputs(), p.d_o, {}, f->o, {}).status(), "'lse'");
  expect_error(
      AttentionBackwardAlloc(p.Inputs(), std::span<const float>(p.d_o).first(3), {}).status(),
      "'do'");
  std::vector<float> small(3), o(p.q.size()), lse(p.dims.RowElems());
  AttnForwardOutputs out{.o = small};
  expect_error(AttentionForward(p.Inputs(), {}, &out), "'o'");
  out = {.o = o, .lse = small};
  expect_error(AttentionForward(p.Inputs(), {}, &out), "'lse'");
  AttnGradients grads{.dq = o, .dk = small, .dv = o};
  expect_error(AttentionBackward(p.Inputs(), {.d_o = p.d_o}, {}, &grads), "'dk'");

  std::vector<float> q(8), cache(8 * 3), dec_o(8);
  std::vector<int32_t> lengths = {4};
  AttnDecodeInputs dec{.batch = 1,
                       .heads = 2,
                       .head_dim = 4,
                       .capacity = 3,
                       .q = q,
                       .k_cache = cache,
                       .v_cache = cache,
                       .lengths = lengths};
  expect_error(AttentionDecode(dec, 0.f, dec_o), "lengths[0]");
  dec.lengths = {};
  dec.v_cache = std::span<const float>(cache).first(8);
  expect_error(AttentionDecode(dec, 0.f, dec_o), "'v_cache'");

  EXPECT_FALSE(ParseAttnImpl("flash").ok());
  EXPECT_EQ(*ParseAttnImpl("cpu"), AttnImpl::kCpu);
}

TEST(Cuda, WithoutBackendIsFailedPrecondition) {
  const Problem p = RandomProblem({});
  auto f = AttentionForwardAlloc(p.Inputs(), {.impl = AttnImpl::kCuda});
  EXPECT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition) << f.status();
}

}  // namespace
}  // namespace mesa::kernels::attention
