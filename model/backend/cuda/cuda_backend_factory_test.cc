// CreateCudaBackend must never crash: without a GPU (CI) it returns FailedPrecondition with the
// runtime's reason; with one it returns a working backend.
#include "gtest/gtest.h"
#include "model/backend/cuda/cuda_backend.h"

namespace mesa::model {
namespace {

TEST(CudaBackendFactory, FailsCleanlyOrWorks) {
  auto backend = CreateCudaBackend(0);
  if (!backend.ok()) {
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition) << backend.status();
    EXPECT_FALSE(backend.status().message().empty());
    return;
  }
  EXPECT_EQ((*backend)->Name(), "cuda");
  float* x = (*backend)->AllocateFloats(16);
  ASSERT_NE(x, nullptr);
  float host[16];
  for (int i = 0; i < 16; ++i) host[i] = 1.0f;
  (*backend)->CopyToHost(host, x, sizeof(host));
  for (float v : host) EXPECT_EQ(v, 0.0f);  // allocations are zero-filled
  (*backend)->Free(x);
  EXPECT_TRUE(GetCudaControl(backend->get())->Synchronize().ok());
}

TEST(CudaBackendFactory, BadDeviceIsAnError) {
  auto backend = CreateCudaBackend(1 << 20);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CudaBackendFactory, ParsesGemmMath) {
  EXPECT_EQ(*ParseGemmMath("tf32"), GemmMath::kTf32);
  EXPECT_EQ(*ParseGemmMath("bf16"), GemmMath::kBf16);
  EXPECT_EQ(*ParseGemmMath("fp32"), GemmMath::kFp32);
  EXPECT_FALSE(ParseGemmMath("fp8").ok());
}

}  // namespace
}  // namespace mesa::model
