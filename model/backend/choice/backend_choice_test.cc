// ChooseBackend on whatever machine runs it: without a GPU (CI) the fallbacks and the UNAVAILABLE
// of device "cuda"; with one, the CUDA choices. A device index no machine has stands for a node
// whose GPU is unusable, on both.
#include "model/backend/choice/backend_choice.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mesa::model {
namespace {

// CUDA options naming a device no machine has.
CudaBackendOptions UnusableGpu() {
  CudaBackendOptions cuda;
  cuda.device = 1 << 20;
  return cuda;
}

CpuBackendOptions TwoThreads() {
  CpuBackendOptions cpu;
  cpu.num_threads = 2;
  return cpu;
}

// The CPU backend with the caller's options.
void ExpectCpu(const BackendChoice& choice) {
  EXPECT_FALSE(choice.on_gpu);
  EXPECT_STREQ(choice.device(), "cpu");
  ASSERT_EQ(choice.backend->Name(), "cpu");
  EXPECT_EQ(static_cast<CpuBackend*>(choice.backend.get())->options().num_threads, 2);
}

TEST(ChooseBackend, CpuIsTheCpuBackendWithTheCallersOptionsAndNeverTriesCuda) {
  auto choice = ChooseBackend("cpu", UnusableGpu(), TwoThreads());
  ASSERT_TRUE(choice.ok()) << choice.status();
  ExpectCpu(*choice);
  EXPECT_TRUE(choice->no_gpu.empty()) << choice->no_gpu;
}

TEST(ChooseBackend, AutoFallsBackToTheCpuSayingWhy) {
  auto choice = ChooseBackend("auto", UnusableGpu(), TwoThreads());
  ASSERT_TRUE(choice.ok()) << choice.status();
  ExpectCpu(*choice);
  EXPECT_EQ(choice->no_gpu, CreateCudaBackend(UnusableGpu()).status().message());
  EXPECT_FALSE(choice->no_gpu.empty());
}

TEST(ChooseBackend, CudaWithoutAUsableGpuIsUnavailableNamingTheRequest) {
  auto choice = ChooseBackend("cuda", UnusableGpu(), TwoThreads());
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kUnavailable);  // infra: retried
  EXPECT_TRUE(absl::StartsWith(choice.status().message(), "device \"cuda\" requested: "))
      << choice.status();
}

// An unknown name (a typo, another spelling, empty) is refused, never taken for "auto": on a
// machine with a GPU, "auto" would quietly pick it.
TEST(ChooseBackend, UnknownDeviceIsRefusedNotTakenForAuto) {
  for (const char* device : {"tpu", "CUDA", "gpu", ""}) {
    auto choice = ChooseBackend(device, CudaBackendOptions{}, TwoThreads());
    ASSERT_FALSE(choice.ok()) << device;
    EXPECT_EQ(choice.status().code(), absl::StatusCode::kInvalidArgument) << device;
    EXPECT_EQ(choice.status().message(),
              absl::StrCat("device must be auto, cpu or cuda, got '", device, "'"));
  }
}

// With the default GPU: CUDA where there is one, else what the two tests above check.
TEST(ChooseBackend, AutoAndCudaTakeAUsableGpu) {
  const bool have_gpu = CreateCudaBackend(CudaBackendOptions{}).ok();
  for (const char* device : {"auto", "cuda"}) {
    auto choice = ChooseBackend(device, CudaBackendOptions{}, TwoThreads());
    if (!have_gpu && std::string(device) == "cuda") {
      EXPECT_EQ(choice.status().code(), absl::StatusCode::kUnavailable) << choice.status();
      continue;
    }
    ASSERT_TRUE(choice.ok()) << device << ": " << choice.status();
    EXPECT_EQ(choice->on_gpu, have_gpu) << device;
    EXPECT_EQ(choice->backend->Name(), have_gpu ? "cuda" : "cpu") << device;
  }
}

}  // namespace
}  // namespace mesa::model
