// GPU test (tags gpu/manual): the CUDA decoding steps against the CPU steps, token by token over
// 40 tokens from random initial states: outputs, states and CG step counts, for Mesa (fixed and
// tolerance CG), GLA (with and without H), DeltaNet and Gated DeltaNet; plus argument checks.
#include "kernels/cuda/decode_step_cuda.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/mesa_step.h"
#include "kernels/cuda/cuda_host_util.h"
#include "kernels/deltanet/step.h"
#include "kernels/deltanet/test_util.h"
#include "kernels/mesa_test_util.h"
#include "kernels/token_slices.h"

namespace mesa::kernels::cuda {
namespace {

using ::mesa::kernels::testing::MaxRelError;
using ::mesa::kernels::testing::TokenRange;
using ::testing::HasSubstr;

constexpr int64_t kTokens = 40;

// A device copy of a host vector (freed at scope exit).
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& host) : size_(host.size()) {
    CHECK_CUDA(cudaMalloc(&ptr_, std::max<size_t>(size_, 1) * sizeof(T)));
    if (size_ > 0) {
      CHECK_CUDA(cudaMemcpy(ptr_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice));
    }
  }
  ~DeviceVector() { cudaFree(ptr_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  T* get() { return ptr_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(size_);
    CHECK_CUDA(cudaMemcpy(host.data(), ptr_, size_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t size_;
};

struct Token {
  std::vector<float> q, k, v, log_gamma, beta;
};

template <typename P>
Token TokenOf(const P& p, int64_t t) {
  const int64_t b = p.dims.batch, len = p.dims.seq_len, hd = p.dims.heads * p.dims.head_dim;
  Token x{TokenRange(p.q, b, len, hd, t, t + 1),
          TokenRange(p.k, b, len, hd, t, t + 1),
          TokenRange(p.v, b, len, hd, t, t + 1),
          {},
          TokenRange(p.beta, b, len, p.dims.heads, t, t + 1)};
  if (!p.log_gamma.empty()) x.log_gamma = TokenRange(p.log_gamma, b, len, p.dims.heads, t, t + 1);
  return x;
}

// Float32 on both sides with different summation orders: the worst relative difference over
// 40 tokens is a few 1e-7 (measured on an H100); a wrong term is O(1e-2) or worse.
constexpr double kTol = 1e-5;

void CompareMesa(int64_t dim, const CgOptions& cg, bool keep_h) {
  SCOPED_TRACE("D=" + std::to_string(dim) + " steps=" + std::to_string(cg.max_steps) +
               " tol=" + std::to_string(cg.tolerance) + (keep_h ? "" : " no H"));
  const testing::Problem p = testing::RandomProblem({.batch = 3,
                                                     .seq_len = kTokens,
                                                     .heads = 2,
                                                     .head_dim = dim,
                                                     .initial_state = true,
                                                     .seed = uint64_t(dim + cg.max_steps)});
  const cpu::MesaStepDims dims{3, 2, dim};
  std::vector<float> h = p.h0, g = p.g0, o(dims.TokenElems()), q_star(dims.TokenElems());
  std::vector<int32_t> steps(dims.GateElems());
  DeviceVector<float> d_h(keep_h ? p.h0 : std::vector<float>{}), d_g(p.g0), d_lambda(p.lambda);
  DeviceVector<float> d_o(o), d_q_star(q_star);
  DeviceVector<int32_t> d_steps(steps);
  double steps_cpu = 0, steps_gpu = 0;
  for (int64_t t = 0; t < kTokens; ++t) {
    const Token x = TokenOf(p, t);
    ASSERT_TRUE(cpu::MesaStep({.dims = dims,
                               .q = x.q,
                               .k = x.k,
                               .v = x.v,
                               .log_gamma = x.log_gamma,
                               .beta = x.beta,
                               .lambda = p.lambda},
                              cg, {keep_h ? std::span<float>(h) : std::span<float>(), g},
                              {.o = o, .q_star = q_star, .cg_steps = steps})
                    .ok());
    DeviceVector<float> d_q(x.q), d_k(x.k), d_v(x.v), d_lg(x.log_gamma), d_beta(x.beta);
    const absl::Status status = MesaStepOnDevice({3, 2, dim}, cg,
                                                 {.q = d_q.get(),
                                                  .k = d_k.get(),
                                                  .v = d_v.get(),
                                                  .log_gamma = d_lg.get(),
                                                  .beta = d_beta.get(),
                                                  .lambda = d_lambda.get(),
                                                  .h = keep_h ? d_h.get() : nullptr,
                                                  .g = d_g.get(),
                                                  .o = d_o.get(),
                                                  .q_star = d_q_star.get(),
                                                  .cg_steps = d_steps.get()});
    ASSERT_TRUE(status.ok()) << status;
    CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<int32_t> gpu_steps = d_steps.ToHost();
    for (size_t i = 0; i < steps.size(); ++i) {
      steps_cpu += steps[i];
      steps_gpu += gpu_steps[i];
    }
    const double tol = cg.tolerance > 0 ? 5e-3 : kTol;  // a stop decision may differ by a step
    ASSERT_LT(MaxRelError(d_o.ToHost(), o), tol) << "o at token " << t;
    ASSERT_LT(MaxRelError(d_q_star.ToHost(), q_star), tol) << "q_star at token " << t;
  }
  EXPECT_LT(MaxRelError(d_g.ToHost(), g), kTol);
  if (keep_h) {
    EXPECT_LT(MaxRelError(d_h.ToHost(), h), kTol);
  }
  if (cg.tolerance == 0) {
    EXPECT_EQ(steps_gpu, steps_cpu);
  } else {
    EXPECT_NEAR(steps_gpu / (kTokens * 6), steps_cpu / (kTokens * 6), 0.1);
  }
}

TEST(DecodeStepCudaTest, MesaMatchesCpu) {
  for (int64_t dim : {16, 64, 128}) {
    CompareMesa(dim, {.max_steps = 6}, true);
    CompareMesa(dim, {.max_steps = 30, .tolerance = 1e-3f}, true);
    CompareMesa(dim, {.max_steps = 0}, true);
    CompareMesa(dim, {.max_steps = 0}, false);
  }
}

void CompareDelta(int64_t dim, bool gated) {
  SCOPED_TRACE("D=" + std::to_string(dim) + (gated ? " gated" : " plain"));
  const deltanet::testing::Problem p = deltanet::testing::RandomProblem({.batch = 3,
                                                                         .seq_len = kTokens,
                                                                         .heads = 2,
                                                                         .head_dim = dim,
                                                                         .gated = gated,
                                                                         .initial_state = true,
                                                                         .seed = uint64_t(dim)});
  const deltanet::DeltaStepDims dims{3, 2, dim};
  std::vector<float> s = p.s0, o(dims.TokenElems());
  DeviceVector<float> d_s(p.s0), d_o(o);
  for (int64_t t = 0; t < kTokens; ++t) {
    const Token x = TokenOf(p, t);
    ASSERT_TRUE(
        deltanet::DeltaNetStep(
            {.dims = dims, .q = x.q, .k = x.k, .v = x.v, .beta = x.beta, .log_gamma = x.log_gamma},
            s, o)
            .ok());
    DeviceVector<float> d_q(x.q), d_k(x.k), d_v(x.v), d_beta(x.beta), d_lg(x.log_gamma);
    const absl::Status status =
        DeltaNetStepOnDevice({3, 2, dim}, {.q = d_q.get(),
                                           .k = d_k.get(),
                                           .v = d_v.get(),
                                           .beta = d_beta.get(),
                                           .log_gamma = gated ? d_lg.get() : nullptr,
                                           .s = d_s.get(),
                                           .o = d_o.get()});
    ASSERT_TRUE(status.ok()) << status;
    CHECK_CUDA(cudaDeviceSynchronize());
    ASSERT_LT(MaxRelError(d_o.ToHost(), o), kTol) << "o at token " << t;
  }
  EXPECT_LT(MaxRelError(d_s.ToHost(), s), kTol);
}

TEST(DecodeStepCudaTest, DeltaNetMatchesCpu) {
  for (int64_t dim : {20, 64, 128}) {
    CompareDelta(dim, false);
    CompareDelta(dim, true);
  }
}

TEST(DecodeStepCudaTest, RejectsBadArguments) {
  float dummy = 0;
  MesaStepDevice ptrs{.q = &dummy,
                      .k = &dummy,
                      .v = &dummy,
                      .log_gamma = &dummy,
                      .beta = &dummy,
                      .lambda = &dummy,
                      .h = &dummy,
                      .g = &dummy,
                      .o = &dummy};
  absl::Status s = MesaStepOnDevice({1, 1, 24}, {}, ptrs);
  EXPECT_THAT(s.message(), HasSubstr("head_dim"));
  ptrs.h = nullptr;
  s = MesaStepOnDevice({1, 1, 64}, {.max_steps = 3}, ptrs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'h'"));
  ptrs.k = nullptr;
  EXPECT_THAT(MesaStepOnDevice({1, 1, 64}, {.max_steps = 0}, ptrs).message(), HasSubstr("'k'"));
  EXPECT_THAT(DeltaNetStepOnDevice({1, 1, 8}, {.q = &dummy}).message(), HasSubstr("'k'"));
  EXPECT_THAT(DeltaNetStepOnDevice({0, 1, 8}, {}).message(), HasSubstr("batch"));
}

}  // namespace
}  // namespace mesa::kernels::cuda
