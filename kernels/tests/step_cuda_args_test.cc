// CPU test (runs in CI, no GPU needed) of the argument checks of the device decoding steps:
// MesaStepDevice, DeltaStepDevice and CausalConvAppendDevice reject bad dims, options, missing and
// misaligned pointers with InvalidArgument before anything reaches the device; valid arguments
// pass the checks. The pointers are never dereferenced.
#include <cstdint>

#include "gtest/gtest.h"
#include "kernels/conv/cuda/causal_conv_step_cuda.h"
#include "kernels/deltanet/cuda/step_cuda.h"
#include "kernels/mesa/cuda/mesa_step_cuda.h"

namespace mesa::kernels::cuda {
namespace {

alignas(16) float buffer[64];
float* const f = buffer;
void* const p = buffer;

bool IsInvalid(const absl::Status& s) { return s.code() == absl::StatusCode::kInvalidArgument; }

TEST(MesaStepDeviceArgs, Checks) {
  const MesaStepDeviceInputs in{DType::kBF16, p, p, p, f, f, f};
  const MesaStepDims dims{2, 3, 64};
  EXPECT_TRUE(ValidateMesaStepDevice(dims, {30, 1e-4f}, in, {f, f}, {p}).ok());
  EXPECT_TRUE(ValidateMesaStepDevice(dims, {0, 0.f}, in, {nullptr, f}, {p}).ok());  // GLA
  // Each bad argument, through the launching entry point (it must return before launching).
  EXPECT_TRUE(IsInvalid(MesaStepDevice({2, 3, 24}, {}, in, {f, f}, {p}, nullptr)));  // D % 16
  EXPECT_TRUE(IsInvalid(MesaStepDevice({2, 3, 144}, {}, in, {f, f}, {p}, nullptr)));
  EXPECT_TRUE(IsInvalid(MesaStepDevice({0, 3, 64}, {}, in, {f, f}, {p}, nullptr)));
  EXPECT_TRUE(IsInvalid(MesaStepDevice({1 << 20, 1 << 12, 64}, {}, in, {f, f}, {p}, nullptr)));
  EXPECT_TRUE(IsInvalid(MesaStepDevice(dims, {-1, 0.f}, in, {f, f}, {p}, nullptr)));
  EXPECT_TRUE(IsInvalid(MesaStepDevice(dims, {30, -1.f}, in, {f, f}, {p}, nullptr)));
  EXPECT_TRUE(IsInvalid(MesaStepDevice(dims, {30, 0.f}, in, {nullptr, f}, {p}, nullptr)));
  EXPECT_TRUE(IsInvalid(MesaStepDevice(dims, {30, 0.f}, in, {f, nullptr}, {p}, nullptr)));
  EXPECT_TRUE(IsInvalid(MesaStepDevice(dims, {30, 0.f}, in, {f + 1, f}, {p}, nullptr)));
  EXPECT_TRUE(IsInvalid(MesaStepDevice(dims, {30, 0.f}, in, {f, f}, {nullptr}, nullptr)));
  MesaStepDeviceInputs no_lambda = in;
  no_lambda.lambda = nullptr;
  EXPECT_TRUE(IsInvalid(MesaStepDevice(dims, {30, 0.f}, no_lambda, {f, f}, {p}, nullptr)));
}

TEST(DeltaStepDeviceArgs, Checks) {
  using deltanet::cuda::DeltaStepDevice;
  using deltanet::cuda::DeltaStepDeviceInputs;
  using deltanet::cuda::ValidateDeltaStepDevice;
  const DeltaStepDeviceInputs gated{DType::kF32, p, p, p, f, f};
  const DeltaStepDeviceInputs plain{DType::kF32, p, p, p, f, nullptr};
  EXPECT_TRUE(ValidateDeltaStepDevice({2, 3, 128}, gated, f, p).ok());
  EXPECT_TRUE(ValidateDeltaStepDevice({2, 3, 16}, plain, f, p).ok());
  EXPECT_TRUE(IsInvalid(DeltaStepDevice({2, 3, 8}, gated, f, p, nullptr)));
  EXPECT_TRUE(IsInvalid(DeltaStepDevice({2, 0, 64}, gated, f, p, nullptr)));
  EXPECT_TRUE(IsInvalid(DeltaStepDevice({2, 3, 64}, gated, f + 2, p, nullptr)));
  EXPECT_TRUE(IsInvalid(DeltaStepDevice({2, 3, 64}, gated, f, nullptr, nullptr)));
  DeltaStepDeviceInputs no_beta = gated;
  no_beta.beta = nullptr;
  EXPECT_TRUE(IsInvalid(DeltaStepDevice({2, 3, 64}, no_beta, f, p, nullptr)));
}

TEST(CausalConvAppendDeviceArgs, Checks) {
  EXPECT_TRUE(ValidateCausalConvAppendDevice({2, 1, 256, 4}, p, f, f, p).ok());
  EXPECT_TRUE(ValidateCausalConvAppendDevice({2, 5, 256, 1}, p, f, nullptr, p).ok());  // no tail
  EXPECT_TRUE(
      IsInvalid(CausalConvAppendDevice({2, 1, 256, 4}, DType::kF32, p, f, nullptr, p, nullptr)));
  EXPECT_TRUE(IsInvalid(CausalConvAppendDevice({2, 1, 256, 9}, DType::kF32, p, f, f, p, nullptr)));
  EXPECT_TRUE(IsInvalid(CausalConvAppendDevice({2, 0, 256, 4}, DType::kF32, p, f, f, p, nullptr)));
  EXPECT_TRUE(
      IsInvalid(CausalConvAppendDevice({2, 1, 256, 4}, DType::kF32, nullptr, f, f, p, nullptr)));
  EXPECT_TRUE(IsInvalid(
      CausalConvAppendDevice({1 << 16, 1, 1 << 16, 4}, DType::kF32, p, f, f, p, nullptr)));
}

}  // namespace
}  // namespace mesa::kernels::cuda
