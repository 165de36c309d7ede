// GPU test of the CUDA attention operator (tags gpu/manual): on fresh random inputs (seed
// printed), every output and gradient against the float64 reference and against the CPU float32
// op, relative error ||x - ref|| / ||ref|| per tensor (bf16 tensor-core operands: expected between
// 1e-3 and 1e-2). fp32 I/O through the host seam (outputs poisoned with NaN first) and bf16 I/O
// through the device API; window semantics; single-query decoding against the CPU decode.
#include "kernels/attention/cuda/attention_cuda.h"
#include "kernels/attention/cuda/cudnn_attention.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/attention/attention_op.h"
#include "kernels/attention/cuda/attention_kernels.h"
#include "kernels/attention/test_util.h"
#include "kernels/common/cuda/cuda_host_util.h"

namespace mesa::kernels::attention::cuda {
namespace {

using ::mesa::kernels::attention::testing::Problem;
using ::mesa::kernels::attention::testing::RandomProblem;
using ::mesa::kernels::attention::testing::ShiftKeyAndValue;
using ::mesa::kernels::attention::testing::TokenRow;
using ::mesa::kernels::attention::testing::WithDocuments;
using ::mesa::kernels::cuda::NewDeviceCopy;

constexpr double kTol = 2e-2;

// ||x - ref|| / max(||ref||, kRmsFloor sqrt(n)); infinite when x holds a NaN or infinity (an
// unwritten poisoned entry). The floor matters only where the exact tensor is (near) zero: with a
// window of 1 (or T = 1) every row has one key, P = 1 and dq = dk = 0 exactly, while bf16 rounding
// of do . v against do . o leaves ~1e-3 per entry; the inputs' entries are O(1).
constexpr double kRmsFloor = 0.25;
double RelL2(const std::vector<float>& x, const std::vector<float>& ref) {
  if (x.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    const double d = static_cast<double>(x[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, kRmsFloor * kRmsFloor * static_cast<double>(x.size())));
}

struct Results {
  std::vector<float> o, lse, dq, dk, dv;
};

Results RunOp(const Problem& p, AttnImpl impl, int64_t window, bool reuse_forward = true) {
  const AttnOptions opt{.impl = impl, .window = window};
  auto f = AttentionForwardAlloc(p.Inputs(), opt);
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return {};
  auto g = reuse_forward ? AttentionBackwardAlloc(p.Inputs(), p.d_o, opt, f->o, f->lse)
                         : AttentionBackwardAlloc(p.Inputs(), p.d_o, opt);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return {};
  return {f->o, f->lse, g->dq, g->dk, g->dv};
}

void Compare(const std::string& what, const Results& got, const Results& ref, double tol) {
  const std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>>
      pairs[] = {{"o", {&got.o, &ref.o}},
                 {"lse", {&got.lse, &ref.lse}},
                 {"dq", {&got.dq, &ref.dq}},
                 {"dk", {&got.dk, &ref.dk}},
                 {"dv", {&got.dv, &ref.dv}}};
  std::string line = what + ":";
  for (const auto& [name, pr] : pairs) {
    const double e = RelL2(*pr.first, *pr.second);
    char buf[64];
    std::snprintf(buf, sizeof(buf), " %s %.2e", name, e);
    line += buf;
    EXPECT_LE(e, tol) << what << " " << name;
  }
  std::printf("%s\n", line.c_str());
}

struct Case {
  int64_t b, t, h, d, window;
  float q_gain;
};

// Each case on fresh random inputs (with packed documents of `documents` tokens in turn when not
// empty): CUDA against the float64 reference and the CPU, also with the backward recomputing the
// forward on the device.
void CheckCases(std::span<const Case> cases, const std::vector<int64_t>& documents) {
  uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  for (const Case& c : cases) {
    Problem p = RandomProblem({.batch = c.b,
                               .seq_len = c.t,
                               .heads = c.h,
                               .head_dim = c.d,
                               .q_gain = c.q_gain,
                               .seed = seed++});
    if (!documents.empty()) p = WithDocuments(std::move(p), documents);
    char name[128];
    std::snprintf(name, sizeof(name), "%sB%ld T%ld H%ld D%ld W%ld",
                  documents.empty() ? "" : "documents ", c.b, c.t, c.h, c.d, c.window);
    const Results gpu = RunOp(p, AttnImpl::kCuda, c.window);
    Compare(std::string(name) + " vs f64", gpu, RunOp(p, AttnImpl::kReference, c.window), kTol);
    Compare(std::string(name) + " vs cpu", gpu, RunOp(p, AttnImpl::kCpu, c.window), kTol);
    // The backward that recomputes the forward on the device gives the same gradients.
    const Results recompute = RunOp(p, AttnImpl::kCuda, c.window, /*reuse_forward=*/false);
    Compare(std::string(name) + " recompute vs cpu", recompute, RunOp(p, AttnImpl::kCpu, c.window),
            kTol);
  }
}

TEST(AttentionCuda, MatchesReferenceAndCpu) {
  ASSERT_TRUE(DeviceAvailable().ok());
  const Case cases[] = {
      {2, 1, 2, 64, 0, 1.f},     {2, 63, 2, 16, 0, 1.f},   {2, 64, 2, 64, 0, 2.f},
      {2, 65, 3, 128, 0, 1.f},   {1, 700, 2, 128, 0, 2.f}, {1, 700, 2, 64, 100, 2.f},
      {1, 300, 2, 96, 64, 1.f},  {1, 300, 2, 48, 1, 1.f},  {2, 257, 2, 128, 65, 3.f},
      {1, 200, 1, 32, 500, 1.f},
  };
  CheckCases(cases, {});
}

// Packed documents: query rows see no key before their document's start, inside tiles and across
// them (documents of 1, 2, 37, 64 and 130 tokens), global and windowed.
TEST(AttentionCuda, DocumentsMatchReferenceAndCpu) {
  ASSERT_TRUE(DeviceAvailable().ok());
  const Case cases[] = {
      {2, 300, 2, 64, 0, 2.f}, {1, 700, 2, 128, 100, 2.f}, {2, 257, 2, 32, 65, 1.f}};
  CheckCases(cases, {1, 37, 2, 130, 64});
}

// A window >= T is global attention bit for bit; W = T - 1 is not.
TEST(AttentionCuda, WindowAtLeastSeqLenEqualsGlobal) {
  const Problem p = RandomProblem(
      {.batch = 1, .seq_len = 150, .heads = 2, .head_dim = 64, .seed = std::random_device{}()});
  const AttnInputs in = p.Inputs();
  auto global = AttentionForwardAlloc(in, {.impl = AttnImpl::kCuda, .window = 0});
  auto swa = AttentionForwardAlloc(in, {.impl = AttnImpl::kCuda, .window = 150});
  auto wide = AttentionForwardAlloc(in, {.impl = AttnImpl::kCuda, .window = 4096});
  auto narrow = AttentionForwardAlloc(in, {.impl = AttnImpl::kCuda, .window = 149});
  ASSERT_TRUE(global.ok() && swa.ok() && wide.ok() && narrow.ok());
  EXPECT_EQ(swa->o, global->o);
  EXPECT_EQ(wide->o, global->o);
  EXPECT_NE(narrow->o, global->o);
}

// Token t sees t-W+1..t: changing k, v at t-W leaves o_t unchanged; at t-W+1 it changes it.
TEST(AttentionCuda, WindowEdge) {
  const int64_t kW = 70, t = 150;
  const Problem p = RandomProblem(
      {.batch = 1, .seq_len = 200, .heads = 2, .head_dim = 64, .seed = std::random_device{}()});
  const AttnOptions opt{.impl = AttnImpl::kCuda, .window = kW};
  auto base = AttentionForwardAlloc(p.Inputs(), opt);
  ASSERT_TRUE(base.ok()) << base.status();
  for (int64_t changed : {t - kW, t - kW + 1}) {
    auto f = AttentionForwardAlloc(ShiftKeyAndValue(p, changed).Inputs(), opt);
    ASSERT_TRUE(f.ok()) << f.status();
    const bool same = TokenRow(f->o, p.dims, t) == TokenRow(base->o, p.dims, t);
    EXPECT_EQ(same, changed == t - kW) << "changed token " << changed;
  }
}

std::vector<float> Download(const void* ptr, size_t n, bool bf16) {
  std::vector<float> f(n);
  if (bf16) {
    std::vector<__nv_bfloat16> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), ptr, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  } else {
    CHECK_CUDA(cudaMemcpy(f.data(), ptr, n * 4, cudaMemcpyDeviceToHost));
  }
  return f;
}

// The rounding to bf16 that the device API's inputs go through.
std::vector<float> RoundBf16(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = __bfloat162float(__float2bfloat16(x[i]));
  return y;
}

// bf16 I/O through the device API (what the trainer uses) with `engine`, against the float64
// reference on the bf16-rounded inputs.
void CheckBf16DeviceApi(AttnEngine engine, const char* name, int64_t seq_len, int64_t head_dim,
                        int64_t window, const std::vector<int64_t>& doc_lengths = {},
                        bool deterministic = false) {
  Problem p = RandomProblem({.batch = 2,
                             .seq_len = seq_len,
                             .heads = 3,
                             .head_dim = head_dim,
                             .q_gain = 2.f,
                             .seed = std::random_device{}()});
  if (!doc_lengths.empty()) p = WithDocuments(p, doc_lengths);
  for (auto* x : {&p.q, &p.k, &p.v, &p.d_o}) *x = RoundBf16(*x);
  const Results ref = RunOp(p, AttnImpl::kReference, window);
  const size_t n = p.q.size(), rows = p.dims.RowElems();
  void* q = NewDeviceCopy(p.q, true);
  void* k = NewDeviceCopy(p.k, true);
  void* v = NewDeviceCopy(p.v, true);
  void* d_o = NewDeviceCopy(p.d_o, true);
  void *o, *dq, *dk, *dv;
  float* lse;
  for (void** ptr : {&o, &dq, &dk, &dv}) {
    CHECK_CUDA(cudaMalloc(ptr, n * 2));
    CHECK_CUDA(cudaMemset(*ptr, 0xFF, n * 2));  // bf16 NaN
  }
  CHECK_CUDA(cudaMalloc(&lse, rows * 4));
  CHECK_CUDA(cudaMemset(lse, 0xFF, rows * 4));
  int32_t* doc_start = nullptr;
  if (!p.doc_start.empty()) {
    CHECK_CUDA(cudaMalloc(&doc_start, p.doc_start.size() * sizeof(int32_t)));
    CHECK_CUDA(cudaMemcpy(doc_start, p.doc_start.data(), p.doc_start.size() * sizeof(int32_t),
                          cudaMemcpyHostToDevice));
  }
  const DeviceProblem prob{.dims = p.dims,
                           .window = window,
                           .dtype = DType::kBF16,
                           .doc_start = doc_start,
                           .engine = engine,
                           .deterministic = deterministic};
  Workspace ws;
  const absl::Status f = ForwardDevice(prob, {q, k, v}, o, lse, nullptr);
  ASSERT_TRUE(f.ok()) << name << ": " << f;
  const absl::Status b = BackwardDevice(prob, {q, k, v}, o, lse, d_o, dq, dk, dv, &ws, nullptr);
  ASSERT_TRUE(b.ok()) << name << ": " << b;
  CHECK_CUDA(cudaDeviceSynchronize());
  const Results gpu{Download(o, n, true), Download(lse, rows, false), Download(dq, n, true),
                    Download(dk, n, true), Download(dv, n, true)};
  Compare(
      absl::StrCat(name, deterministic ? " deterministic" : "", " bf16 device API T", seq_len, " D",
                   head_dim, " W", window, doc_lengths.empty() ? "" : " documents", " vs f64"),
      gpu, ref, kTol);
  for (void* ptr :
       {q, k, v, d_o, o, dq, dk, dv, static_cast<void*>(lse), static_cast<void*>(doc_start)}) {
    cudaFree(ptr);
  }
}

TEST(AttentionCuda, Bf16DeviceApi) {
  for (int64_t window : {0, 96}) {
    CheckBf16DeviceApi(AttnEngine::kOwn, "own", 333, 128, window);
    CheckBf16DeviceApi(AttnEngine::kOwn, "own", 333, 128, window, {1, 37, 2, 130, 64});
  }
}

// cuDNN's fused attention (kCudnn fails rather than falling back) on the same checks: global,
// windows inside and beyond the sequence, a length off every tile size, two head dims. The GPU
// machine has libcudnn.so.9; this test fails where it is missing.
TEST(AttentionCuda, CudnnMatchesReference) {
  ASSERT_TRUE(CudnnAvailable().ok()) << CudnnAvailable();
  for (int64_t window : {0, 1, 96, 400}) {
    CheckBf16DeviceApi(AttnEngine::kCudnn, "cudnn", 333, 128, window);
  }
  CheckBf16DeviceApi(AttnEngine::kCudnn, "cudnn", 257, 64, 0);
  CheckBf16DeviceApi(AttnEngine::kCudnn, "cudnn", 512, 64, 128);
  // Packed documents (a per-query lower bound on the keys, with and without a window).
  for (int64_t window : {0, 96}) {
    CheckBf16DeviceApi(AttnEngine::kCudnn, "cudnn", 333, 128, window, {1, 37, 2, 130, 64});
  }
}

// training.deterministic's backward (dQ summed in a fixed order) on the checks above: our kernels,
// and cuDNN's deterministic engine where the library is present.
TEST(AttentionCuda, DeterministicBackwardMatchesReference) {
  std::vector<std::pair<AttnEngine, const char*>> engines = {{AttnEngine::kOwn, "own"}};
  if (CudnnAvailable().ok()) engines.push_back({AttnEngine::kCudnn, "cudnn"});
  for (const auto& [engine, name] : engines) {
    for (int64_t window : {0, 96}) {
      CheckBf16DeviceApi(engine, name, 333, 128, window, {}, true);
      CheckBf16DeviceApi(engine, name, 333, 64, window, {1, 37, 2, 130, 64}, true);
    }
    CheckBf16DeviceApi(engine, name, 1000, 128, 0, {}, true);
  }
}

// The point of training.deterministic: dq, dk and dv repeat bit for bit however the blocks are
// scheduled. Five backwards at the training shape (B4 T2048 H6 D128), each beside another backward
// on a second stream that takes SMs at changing moments, must give the same bits; the atomic
// path's runs are printed for comparison (they may or may not differ), and its dq must agree with
// the ordered one to rounding.
TEST(AttentionCuda, DeterministicBackwardRepeatsBitForBit) {
  std::vector<std::pair<AttnEngine, const char*>> engines = {{AttnEngine::kOwn, "own"}};
  if (CudnnAvailable().ok()) engines.push_back({AttnEngine::kCudnn, "cudnn"});
  const uint32_t seed = std::random_device{}();
  const Problem p = RandomProblem(
      {.batch = 4, .seq_len = 2048, .heads = 6, .head_dim = 128, .q_gain = 2.f, .seed = seed});
  const size_t n = p.q.size(), rows = p.dims.RowElems();
  void* q = NewDeviceCopy(p.q, true);
  void* k = NewDeviceCopy(p.k, true);
  void* v = NewDeviceCopy(p.v, true);
  void* d_o = NewDeviceCopy(p.d_o, true);
  void *o, *dq, *dk, *dv, *other_dq, *other_dk, *other_dv;
  for (void** ptr : {&o, &dq, &dk, &dv, &other_dq, &other_dk, &other_dv}) {
    CHECK_CUDA(cudaMalloc(ptr, n * 2));
  }
  float* lse;
  CHECK_CUDA(cudaMalloc(&lse, rows * 4));
  cudaStream_t main_stream, other_stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&main_stream, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&other_stream, cudaStreamNonBlocking));
  auto bits = [&](void* ptr) {
    std::vector<uint16_t> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), ptr, n * 2, cudaMemcpyDeviceToHost));
    return h;
  };
  for (const auto& [engine, name] : engines) {
    std::vector<float> dq_by_mode[2];
    for (const bool deterministic : {true, false}) {
      const DeviceProblem prob{
          .dims = p.dims, .dtype = DType::kBF16, .engine = engine, .deterministic = deterministic};
      Workspace ws, other_ws;
      ASSERT_TRUE(ForwardDevice(prob, {q, k, v}, o, lse, main_stream).ok());
      CHECK_CUDA(cudaStreamSynchronize(main_stream));
      std::vector<uint16_t> first[3];
      int differing = 0;
      for (int run = 0; run < 5; ++run) {
        // The other backward first, so that the measured one starts on whatever SMs it leaves.
        ASSERT_TRUE(BackwardDevice(prob, {q, k, v}, o, lse, d_o, other_dq, other_dk, other_dv,
                                   &other_ws, other_stream)
                        .ok());
        ASSERT_TRUE(
            BackwardDevice(prob, {q, k, v}, o, lse, d_o, dq, dk, dv, &ws, main_stream).ok());
        CHECK_CUDA(cudaDeviceSynchronize());
        std::vector<uint16_t> got[3] = {bits(dq), bits(dk), bits(dv)};
        if (run == 0) {
          for (int i = 0; i < 3; ++i) first[i] = got[i];
          dq_by_mode[deterministic ? 0 : 1] = Download(dq, n, true);
        } else if (got[0] != first[0] || got[1] != first[1] || got[2] != first[2]) {
          ++differing;
        }
      }
      std::printf("%s %s backward, seed %u: %d of 4 repeats differ from the first\n", name,
                  deterministic ? "deterministic" : "atomic", seed, differing);
      if (deterministic) {
        EXPECT_EQ(differing, 0) << name << " seed " << seed;
      }
    }
    const double rel = RelL2(dq_by_mode[0], dq_by_mode[1]);
    std::printf("%s dq ordered vs atomic: rel %.2e\n", name, rel);
    EXPECT_LE(rel, 1e-2) << name;
  }
  for (void* ptr :
       {q, k, v, d_o, o, dq, dk, dv, other_dq, other_dk, other_dv, static_cast<void*>(lse)}) {
    cudaFree(ptr);
  }
  cudaStreamDestroy(main_stream);
  cudaStreamDestroy(other_stream);
}

// Plans and variant packs are cached per shape and pointer set: calling again on the same buffers
// with another scale must use the new scale (the by-value scalars are re-read each call).
TEST(AttentionCuda, CudnnReusedBuffersTakeNewScale) {
  ASSERT_TRUE(CudnnAvailable().ok()) << CudnnAvailable();
  Problem p = RandomProblem(
      {.batch = 1, .seq_len = 200, .heads = 2, .head_dim = 64, .seed = std::random_device{}()});
  for (auto* x : {&p.q, &p.k, &p.v}) *x = RoundBf16(*x);
  const size_t n = p.q.size(), rows = p.dims.RowElems();
  void* q = NewDeviceCopy(p.q, true);
  void* k = NewDeviceCopy(p.k, true);
  void* v = NewDeviceCopy(p.v, true);
  void* o = NewDeviceCopy(std::vector<float>(n, 0.f), true);
  float* lse = static_cast<float*>(NewDeviceCopy(std::vector<float>(rows, 0.f), false));
  for (float scale : {0.f, 0.05f, 0.3f, 0.05f}) {
    const DeviceProblem prob{
        .dims = p.dims, .scale = scale, .dtype = DType::kBF16, .engine = AttnEngine::kCudnn};
    ASSERT_TRUE(ForwardDevice(prob, {q, k, v}, o, lse, nullptr).ok());
    CHECK_CUDA(cudaDeviceSynchronize());
    auto ref = AttentionForwardAlloc(p.Inputs(), {.impl = AttnImpl::kReference, .scale = scale});
    ASSERT_TRUE(ref.ok()) << ref.status();
    const double eo = RelL2(Download(o, n, true), ref->o);
    const double el = RelL2(Download(lse, rows, false), ref->lse);
    std::printf("cudnn reused buffers, scale %g vs f64: o %.2e lse %.2e\n", scale, eo, el);
    EXPECT_LE(eo, kTol) << "scale " << scale;
    EXPECT_LE(el, kTol) << "scale " << scale;
  }
  for (void* ptr : {q, k, v, o, static_cast<void*>(lse)}) cudaFree(ptr);
}

// The forward without lse (inference, prefill) is a graph of its own (cuDNN's stats virtual): its
// o must be the training forward's, for the global and the windowed mask.
TEST(AttentionCuda, CudnnForwardWithoutLseMatches) {
  ASSERT_TRUE(CudnnAvailable().ok()) << CudnnAvailable();
  for (int64_t window : {0, 64}) {
    Problem p = RandomProblem(
        {.batch = 2, .seq_len = 300, .heads = 2, .head_dim = 128, .seed = std::random_device{}()});
    for (auto* x : {&p.q, &p.k, &p.v}) *x = RoundBf16(*x);
    const size_t n = p.q.size(), rows = p.dims.RowElems();
    void* q = NewDeviceCopy(p.q, true);
    void* k = NewDeviceCopy(p.k, true);
    void* v = NewDeviceCopy(p.v, true);
    void* o_train = NewDeviceCopy(std::vector<float>(n, 0.f), true);
    void* o_infer = NewDeviceCopy(std::vector<float>(n, 0.f), true);
    float* lse = static_cast<float*>(NewDeviceCopy(std::vector<float>(rows, 0.f), false));
    const DeviceProblem prob{
        .dims = p.dims, .window = window, .dtype = DType::kBF16, .engine = AttnEngine::kCudnn};
    const absl::Status with = ForwardDevice(prob, {q, k, v}, o_train, lse, nullptr);
    ASSERT_TRUE(with.ok()) << with;
    const absl::Status without = ForwardDevice(prob, {q, k, v}, o_infer, nullptr, nullptr);
    ASSERT_TRUE(without.ok()) << without;
    CHECK_CUDA(cudaDeviceSynchronize());
    auto ref = AttentionForwardAlloc(p.Inputs(), {.impl = AttnImpl::kReference, .window = window});
    ASSERT_TRUE(ref.ok()) << ref.status();
    const double e_infer = RelL2(Download(o_infer, n, true), ref->o);
    const double e_same = RelL2(Download(o_infer, n, true), Download(o_train, n, true));
    std::printf("cudnn forward without lse W%ld: o vs f64 %.2e, vs with lse %.2e\n", window,
                e_infer, e_same);
    EXPECT_LE(e_infer, kTol);
    EXPECT_LE(e_same, 1e-2);
    for (void* ptr : {q, k, v, o_train, o_infer, static_cast<void*>(lse)}) cudaFree(ptr);
  }
}

// kAuto with fp32 I/O runs our kernels (cuDNN's fused attention is bf16), and kCudnn refuses.
TEST(AttentionCuda, CudnnRefusesWhatItCannotExpress) {
  const DeviceProblem fp32{
      .dims = {1, 16, 1, 64}, .dtype = DType::kF32, .engine = AttnEngine::kCudnn};
  EXPECT_FALSE(CudnnExpresses(fp32));
  void* buf = nullptr;
  CHECK_CUDA(cudaMalloc(&buf, 16 * 64 * 4 * 4));
  float* lse = nullptr;
  CHECK_CUDA(cudaMalloc(&lse, 16 * 4));
  const absl::Status s = ForwardDevice(fp32, {buf, buf, buf}, buf, lse, nullptr);
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  cudaFree(buf);
  cudaFree(lse);
}

// The deterministic backward's workspace ([B,H,T,T] bf16) past kMaxDeterministicWorkspaceBytes:
// cuDNN refuses before touching memory (B1 H16 T32768: 32 GiB), so kAuto would run our ordered
// kernels; forced cuDNN says why.
TEST(AttentionCuda, CudnnRefusesAnOversizedDeterministicWorkspace) {
  ASSERT_TRUE(CudnnAvailable().ok()) << CudnnAvailable();
  const DeviceProblem big{.dims = {1, 32768, 16, 128},
                          .dtype = DType::kBF16,
                          .engine = AttnEngine::kCudnn,
                          .deterministic = true};
  void* buf = nullptr;
  CHECK_CUDA(cudaMalloc(&buf, 256));
  float* lse = static_cast<float*>(buf);
  Workspace ws;
  const absl::Status s =
      BackwardDevice(big, {buf, buf, buf}, buf, lse, buf, buf, buf, buf, &ws, nullptr);
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_NE(s.message().find("deterministic"), absl::string_view::npos) << s;
  cudaFree(buf);
}

// Float64 decode of one (b, h): softmax over the given cache slots (order does not matter).
std::vector<double> Decode64(const std::vector<float>& q, const std::vector<float>& kc,
                             const std::vector<float>& vc, int64_t b, int64_t h, int64_t heads,
                             int64_t dim, int64_t capacity, const std::vector<int64_t>& slots) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  std::vector<double> s(slots.size()), out(dim, 0.0);
  double mx = -INFINITY, sum = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t off = ((b * capacity + slots[i]) * heads + h) * dim;
    double dot = 0;
    for (int64_t d = 0; d < dim; ++d) dot += double{q[(b * heads + h) * dim + d]} * kc[off + d];
    s[i] = scale * dot;
    mx = std::max(mx, s[i]);
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    const double p = std::exp(s[i] - mx);
    sum += p;
    const int64_t off = ((b * capacity + slots[i]) * heads + h) * dim;
    for (int64_t d = 0; d < dim; ++d) out[d] += p * vc[off + d];
  }
  for (double& x : out) x /= sum;
  return out;
}

struct DecodeCase {
  int64_t capacity, heads, dim;
  std::vector<int32_t> lengths;  // per batch row
  int64_t ring_start = -1;       // >= 0: row b holds tokens [ring_start, ring_start + C) ring-wise
};

// Split-K decoding against a KV cache vs the CPU decode and a float64 reference, on fresh inputs:
// short and long caches (one CTA per (b, h) up to the largest cluster), rows with different valid
// lengths (the unused slots NaN), head dims whose 16-byte lane groups are partly idle (48), and a
// full ring buffer whose slots hold tokens out of order, checked against the float64 softmax over
// the same tokens in sequence order.
TEST(AttentionCuda, DecodeMatchesCpuAndFloat64) {
  const std::vector<DecodeCase> cases = {
      {.capacity = 300, .heads = 4, .dim = 64, .lengths = {1, 300, 77}},
      {.capacity = 300, .heads = 4, .dim = 128, .lengths = {1, 300, 77}},
      {.capacity = 4096, .heads = 3, .dim = 48, .lengths = {4096, 1, 2500, 3001}},
      {.capacity = 20000, .heads = 2, .dim = 128, .lengths = {20000, 9999}},
      {.capacity = 1000, .heads = 2, .dim = 16, .lengths = {1000, 513}},
      {.capacity = 1024, .heads = 6, .dim = 128, .lengths = {1024}, .ring_start = 2613},
  };
  const int seed = std::random_device{}();
  std::printf("decode seed %d\n", seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const DecodeCase& c : cases) {
    const int64_t kB = static_cast<int64_t>(c.lengths.size()), kC = c.capacity, kH = c.heads,
                  dim = c.dim, row = kH * dim;
    for (bool bf16 : {false, true}) {
      std::vector<float> q(kB * row), kc(kB * kC * row, NAN), vc(kc.size(), NAN);
      for (float& x : q) x = 2.f * normal(rng);
      // Token t of row b lives in slot t % C (t from ring_start, or from 0 without a ring).
      const int64_t t0 = std::max<int64_t>(c.ring_start, 0);
      std::vector<std::vector<int64_t>> slots(kB);
      for (int64_t b = 0; b < kB; ++b) {
        for (int64_t t = t0; t < t0 + c.lengths[b]; ++t) {
          const int64_t slot = t % kC;
          slots[b].push_back(slot);
          for (int64_t i = 0; i < row; ++i) {
            kc[(b * kC + slot) * row + i] = normal(rng);
            vc[(b * kC + slot) * row + i] = normal(rng);
          }
        }
      }
      if (bf16) {
        for (auto* x : {&q, &kc, &vc}) *x = RoundBf16(*x);
      }
      std::vector<float> want(q.size()), want64(q.size());
      const AttnDecodeInputs in{.batch = kB,
                                .heads = kH,
                                .head_dim = dim,
                                .capacity = kC,
                                .q = q,
                                .k_cache = kc,
                                .v_cache = vc,
                                .lengths = c.lengths};
      ASSERT_TRUE(AttentionDecode(in, 0.f, want).ok());
      for (int64_t b = 0; b < kB; ++b) {
        for (int64_t h = 0; h < kH; ++h) {
          const std::vector<double> o = Decode64(q, kc, vc, b, h, kH, dim, kC, slots[b]);
          std::copy(o.begin(), o.end(), want64.begin() + (b * kH + h) * dim);
        }
      }
      void* dq = NewDeviceCopy(q, bf16);
      void* dk = NewDeviceCopy(kc, bf16);
      void* dv = NewDeviceCopy(vc, bf16);
      void* dout = nullptr;
      int32_t* dlen = nullptr;
      CHECK_CUDA(cudaMalloc(&dout, q.size() * 4));
      CHECK_CUDA(cudaMemset(dout, 0xFF, q.size() * 4));
      CHECK_CUDA(cudaMalloc(&dlen, kB * 4));
      CHECK_CUDA(cudaMemcpy(dlen, c.lengths.data(), kB * 4, cudaMemcpyHostToDevice));
      const DeviceDecode d{.batch = kB,
                           .heads = kH,
                           .head_dim = dim,
                           .capacity = kC,
                           .dtype = bf16 ? DType::kBF16 : DType::kF32,
                           .q = dq,
                           .k_cache = dk,
                           .v_cache = dv,
                           .lengths = dlen,
                           .o = dout};
      ASSERT_TRUE(DecodeDevice(d, nullptr).ok());
      CHECK_CUDA(cudaDeviceSynchronize());
      const std::vector<float> got = Download(dout, q.size(), bf16);
      const double e = RelL2(got, want), e64 = RelL2(got, want64);
      std::printf("decode C%ld H%ld D%ld B%ld%s %s: o vs cpu %.2e, vs f64 %.2e\n", kC, kH, dim, kB,
                  c.ring_start >= 0 ? " ring" : "", bf16 ? "bf16" : "fp32", e, e64);
      // bf16 output rounding is ~2e-3 relative; fp32 differs only in summation order.
      EXPECT_LE(e, bf16 ? 1e-2 : 1e-4);
      EXPECT_LE(e64, bf16 ? 1e-2 : 1e-4);
      for (void* ptr : {dq, dk, dv, dout, static_cast<void*>(dlen)}) cudaFree(ptr);
    }
  }
}

// Decoding needs 16-byte aligned tensors (the kernel loads 16 bytes per lane).
TEST(AttentionCuda, DecodeMisalignedPointerIsInvalidArgument) {
  void* buf = nullptr;
  CHECK_CUDA(cudaMalloc(&buf, 1 << 20));
  char* base = static_cast<char*>(buf);
  const DeviceDecode d{.batch = 1,
                       .heads = 1,
                       .head_dim = 64,
                       .capacity = 8,
                       .dtype = DType::kBF16,
                       .q = base,
                       .k_cache = base + 4096 + 2,
                       .v_cache = base + 8192,
                       .o = base + 16384};
  const absl::Status s = DecodeDevice(d, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("k_cache"), std::string::npos) << s;
  cudaFree(buf);
}

// The forward's grid holds at most 65535 tiles of 128 queries.
TEST(AttentionCuda, SeqLenOverGridLimitIsInvalidArgument) {
  DeviceProblem p{.dims = {.batch = 1, .seq_len = kMaxSeqLen, .heads = 1, .head_dim = 16}};
  EXPECT_TRUE(CheckDeviceProblem(p).ok());
  p.dims.seq_len = kMaxSeqLen + 1;
  const absl::Status s = CheckDeviceProblem(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("seq_len"), std::string::npos) << s;
}

TEST(AttentionCuda, UnsupportedHeadDimIsInvalidArgument) {
  const Problem p = RandomProblem({.batch = 1, .seq_len = 8, .heads = 1, .head_dim = 24});
  auto f = AttentionForwardAlloc(p.Inputs(), {.impl = AttnImpl::kCuda});
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
}

}  // namespace
}  // namespace mesa::kernels::attention::cuda
