#include "worker/resources.h"

#include "gtest/gtest.h"

namespace mesa::worker {
namespace {

TEST(ResourcesTest, GpusNoneReportsCpuSlotsOnly) {
  DiscoveryOptions options;
  options.gpu_mode = GpuMode::kNone;
  options.cpu_slots = 3;
  const NodeResources resources = DiscoverResources(options);
  EXPECT_TRUE(resources.gpus.empty());
  EXPECT_EQ(resources.cpu_slots, 3);
}

TEST(ResourcesTest, DefaultCpuSlotsAreTheAvailableCores) {
  DiscoveryOptions options;
  options.gpu_mode = GpuMode::kNone;
  const NodeResources resources = DiscoverResources(options);
  EXPECT_GE(resources.cpu_slots, 1);
  EXPECT_EQ(resources.cpu_slots, AvailableCores());
}

// Memory offered to trainers: measured (what the agent may still allocate) unless given.
TEST(ResourcesTest, MemoryIsMeasuredUnlessGiven) {
  DiscoveryOptions options;
  options.gpu_mode = GpuMode::kNone;
  NodeResources resources = DiscoverResources(options);
  EXPECT_GT(resources.memory_bytes, 0);
  EXPECT_FALSE(resources.memory_source.empty());
  options.memory_bytes = int64_t{3} << 30;
  resources = DiscoverResources(options);
  EXPECT_EQ(resources.memory_bytes, int64_t{3} << 30);
  EXPECT_EQ(resources.memory_source, "--memory_bytes");
}

TEST(ResourcesTest, MissingCudaRuntimeMeansNoGpusAndANote) {
  DiscoveryOptions options;
  options.gpu_mode = GpuMode::kAuto;
  options.cudart_names = {"/nonexistent/libcudart.so"};
  const NodeResources resources = DiscoverResources(options);
  EXPECT_TRUE(resources.gpus.empty());
  EXPECT_NE(resources.gpu_note.find("not found"), std::string::npos) << resources.gpu_note;
}

// On a machine with the CUDA runtime installed but no GPU (CI), auto discovery must not fail or
// crash; on a GPU machine it reports named devices with memory.
TEST(ResourcesTest, AutoDiscoveryWithTheRealRuntime) {
  DiscoveryOptions options;
  const NodeResources resources = DiscoverResources(options);
  for (const GpuDevice& gpu : resources.gpus) {
    EXPECT_FALSE(gpu.name.empty());
    EXPECT_GT(gpu.memory_bytes, 0);
  }
  if (resources.gpus.empty()) {
    EXPECT_FALSE(resources.gpu_note.empty());
  }
}

TEST(ResourcesTest, ParseGpuMode) {
  EXPECT_EQ(*ParseGpuMode("auto"), GpuMode::kAuto);
  EXPECT_EQ(*ParseGpuMode("NONE"), GpuMode::kNone);
  EXPECT_FALSE(ParseGpuMode("all").ok());
}

}  // namespace
}  // namespace mesa::worker
