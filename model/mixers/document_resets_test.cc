// The recurrent operators reset at a document's first token when its log γ is kResetLogGamma
// (what QkFeatures writes there, docs/math.md §8.6): a packed row then gives, forward and backward,
// what the operators' own varlen mode (cu_seqlens: each document a sequence of its own, from a
// zero state) gives. Mesa (chunked, the CPU backend's, and the float64 reference), Gated DeltaNet,
// and ungated DeltaNet, which runs the gated kernels with log γ = 0 but at resets.
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/deltanet/deltanet_op.h"
#include "kernels/deltanet/test_util.h"
#include "kernels/mesa/mesa_op.h"
#include "kernels/mesa/mesa_test_util.h"
#include "model/mixers/qk_features.h"

namespace mesa::model {
namespace {

namespace kt = ::mesa::kernels::testing;
namespace kd = ::mesa::kernels::deltanet;
namespace kdt = ::mesa::kernels::deltanet::testing;

// Documents of 30, 41 and 29 tokens: the second crosses the 64-token chunk boundary.
const std::vector<int32_t> kLengths = {30, 41, 29};
const std::vector<int> kResets = {30, 71};  // the later documents' first tokens

// log γ [T, H] with kResetLogGamma at every head of the resets.
std::vector<float> WithResets(std::vector<float> log_gamma, int64_t heads) {
  for (int t : kResets) {
    for (int64_t h = 0; h < heads; ++h) log_gamma[t * heads + h] = kResetLogGamma;
  }
  return log_gamma;
}

// Entries of a [T, H] gate tensor away from the resets (where the packed row's log γ is a
// constant, so its gradient is not the documents').
std::vector<float> OffResets(const std::vector<float>& x, int64_t heads) {
  std::vector<float> out;
  for (size_t i = 0; i < x.size(); ++i) {
    const int t = static_cast<int>(i / heads);
    if (t != kResets[0] && t != kResets[1]) out.push_back(x[i]);
  }
  return out;
}

TEST(DocumentResets, MesaResetGateIsEachDocumentAlone) {
  for (kernels::MesaImpl impl : {kernels::MesaImpl::kChunked, kernels::MesaImpl::kReference}) {
    const kt::Problem docs =
        kt::RandomProblem({.heads = 2, .head_dim = 16, .seq_lens = kLengths, .seed = 3});
    kt::Problem packed = docs;
    packed.cu_seqlens.clear();
    packed.log_gamma = WithResets(docs.log_gamma, docs.dims.heads);
    const kernels::MesaOptions options{.impl = impl, .num_threads = 1};
    auto f_docs = kernels::MesaForwardAlloc(docs.Inputs(), options);
    auto f_packed = kernels::MesaForwardAlloc(packed.Inputs(), options);
    ASSERT_TRUE(f_docs.ok() && f_packed.ok()) << f_docs.status() << f_packed.status();
    const std::string what = std::string(kernels::MesaImplName(impl));
    EXPECT_LT(kt::MaxRelError(f_packed->o, f_docs->o), 1e-5) << what;
    auto g_docs = kernels::MesaBackwardAlloc(docs.Inputs(), f_docs->q_star, docs.d_o, options);
    auto g_packed =
        kernels::MesaBackwardAlloc(packed.Inputs(), f_packed->q_star, packed.d_o, options);
    ASSERT_TRUE(g_docs.ok() && g_packed.ok()) << g_docs.status() << g_packed.status();
    EXPECT_LT(kt::MaxRelError(g_packed->dq, g_docs->dq), 1e-4) << what;
    EXPECT_LT(kt::MaxRelError(g_packed->dk, g_docs->dk), 1e-4) << what;
    EXPECT_LT(kt::MaxRelError(g_packed->dv, g_docs->dv), 1e-4) << what;
    EXPECT_LT(kt::MaxRelError(g_packed->dbeta, g_docs->dbeta), 1e-4) << what;
    EXPECT_LT(kt::MaxRelError(g_packed->dlambda, g_docs->dlambda), 1e-4) << what;
    EXPECT_LT(kt::MaxRelError(OffResets(g_packed->dlog_gamma, docs.dims.heads),
                              OffResets(g_docs->dlog_gamma, docs.dims.heads)),
              1e-4)
        << what;
  }
}

// `gated` false: the documents run ungated (log γ absent), the packed row gated with log γ = 0 but
// at the resets, as DeltaNetLayer runs it.
void CheckDeltaNet(bool gated) {
  const kdt::Problem docs = kdt::RandomProblem(
      {.heads = 2, .head_dim = 16, .gated = gated, .seq_lens = kLengths, .seed = 5});
  kdt::Problem packed = docs;
  packed.cu_seqlens.clear();
  packed.log_gamma = WithResets(gated ? docs.log_gamma : std::vector<float>(docs.beta.size(), 0.f),
                                docs.dims.heads);
  const kd::DeltaOptions options{.num_threads = 1};
  auto f_docs = kd::DeltaNetForwardAlloc(docs.Inputs(), options);
  auto f_packed = kd::DeltaNetForwardAlloc(packed.Inputs(), options);
  ASSERT_TRUE(f_docs.ok() && f_packed.ok()) << f_docs.status() << f_packed.status();
  EXPECT_LT(kdt::MaxRelError(f_packed->o, f_docs->o), 1e-5);
  auto g_docs = kd::DeltaNetBackwardAlloc(docs.Inputs(), docs.d_o, options);
  auto g_packed = kd::DeltaNetBackwardAlloc(packed.Inputs(), packed.d_o, options);
  ASSERT_TRUE(g_docs.ok() && g_packed.ok()) << g_docs.status() << g_packed.status();
  EXPECT_LT(kdt::MaxRelError(g_packed->dq, g_docs->dq), 1e-4);
  EXPECT_LT(kdt::MaxRelError(g_packed->dk, g_docs->dk), 1e-4);
  EXPECT_LT(kdt::MaxRelError(g_packed->dv, g_docs->dv), 1e-4);
  EXPECT_LT(kdt::MaxRelError(g_packed->dbeta, g_docs->dbeta), 1e-4);
  if (gated) {
    EXPECT_LT(kdt::MaxRelError(OffResets(g_packed->dlog_gamma, docs.dims.heads),
                               OffResets(g_docs->dlog_gamma, docs.dims.heads)),
              1e-4);
  }
}

TEST(DocumentResets, GatedDeltaNetResetGateIsEachDocumentAlone) { CheckDeltaNet(true); }
TEST(DocumentResets, DeltaNetThroughTheGatedPathIsEachDocumentAlone) { CheckDeltaNet(false); }

}  // namespace
}  // namespace mesa::model
