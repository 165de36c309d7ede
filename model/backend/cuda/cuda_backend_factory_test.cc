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

TEST(CudaBackendFactory, DeviceForLocalRankWrapsOverVisibleDevices) {
  EXPECT_EQ(CudaDeviceForLocalRank(-1).status().code(), absl::StatusCode::kInvalidArgument);
  int count = 0;
  for (int local_rank = 0; local_rank < 64; ++local_rank) {
    auto device = CudaDeviceForLocalRank(local_rank);
    if (!device.ok()) {  // no GPU (CI)
      EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
      return;
    }
    if (local_rank > 0 && *device == 0) break;
    EXPECT_EQ(*device, local_rank);
    count = local_rank + 1;
  }
  // Ranks past the last device start over at 0, as the NCCL communicator picks them.
  EXPECT_EQ(*CudaDeviceForLocalRank(count), 0);
  EXPECT_EQ(*CudaDeviceForLocalRank(count + 1), 1 % count);
}

TEST(CudaBackendFactory, ParsesGemmMath) {
  EXPECT_EQ(*ParseGemmMath("tf32"), GemmMath::kTf32);
  EXPECT_EQ(*ParseGemmMath("bf16"), GemmMath::kBf16);
  EXPECT_EQ(*ParseGemmMath("fp32"), GemmMath::kFp32);
  EXPECT_FALSE(ParseGemmMath("fp8").ok());
}

}  // namespace
}  // namespace mesa::model
