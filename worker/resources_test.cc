#include "worker/resources.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mesa::worker {
namespace {

using ::testing::HasSubstr;

TEST(ResourcesTest, GpuUuidsReadAsNvidiaSmiWritesThem) {
  const unsigned char bytes[16] = {0x8a, 0x1b, 0x2c, 0x3d, 0x00, 0x01, 0xab, 0xcd,
                                   0xef, 0x10, 0x01, 0x23, 0x45, 0x67, 0x89, 0xfe};
  EXPECT_EQ(FormatGpuUuid(bytes), "GPU-8a1b2c3d-0001-abcd-ef10-0123456789fe");
}

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

TEST(ResourcesTest, ParseGpuSelection) {
  EXPECT_EQ(ParseGpuSelection("auto")->mode, GpuMode::kAuto);
  EXPECT_EQ(ParseGpuSelection("NONE")->mode, GpuMode::kNone);
  EXPECT_EQ(ParseGpuSelection("0")->indices, std::vector<int>{0});  // device 0, not "none"
  absl::StatusOr<GpuSelection> list = ParseGpuSelection("6,4-5,1");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->mode, GpuMode::kList);
  EXPECT_EQ(list->indices, (std::vector<int>{1, 4, 5, 6}));
  EXPECT_EQ(ParseGpuSelection("3")->indices, std::vector<int>{3});
  for (const char* bad : {"all", "1,,2", "2-1", "-1", "1-", "0-100000", "1,1", "0-3,2", "x"}) {
    absl::StatusOr<GpuSelection> parsed = ParseGpuSelection(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("--gpus")) << bad;
  }
}

TEST(ResourcesTest, SelectGpusKeepsTheNamedDevicesAndTheirIndices) {
  const std::vector<GpuDevice> found = {
      {.index = 0, .name = "A", .memory_bytes = 1},
      {.index = 1, .name = "B", .memory_bytes = 2},
      {.index = 2, .name = "C", .memory_bytes = 3},
  };
  absl::StatusOr<std::vector<GpuDevice>> selected = SelectGpus(found, {1, 2});
  ASSERT_TRUE(selected.ok()) << selected.status();
  ASSERT_EQ(selected->size(), 2u);
  // The physical index travels on: the trainer's CUDA_VISIBLE_DEVICES is built from it.
  EXPECT_EQ((*selected)[0].index, 1);
  EXPECT_EQ((*selected)[1].name, "C");
  absl::StatusOr<std::vector<GpuDevice>> missing = SelectGpus(found, {0, 3});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("CUDA device 3"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("3 devices (0 to 2)"));
}

// A list on a machine without those devices (CI has none) offers nothing and says why; the agent
// refuses to start on it rather than registering as a CPU node.
TEST(ResourcesTest, ListedGpusThatAreMissingLeaveANote) {
  DiscoveryOptions options;
  options.gpu_mode = GpuMode::kList;
  options.gpu_indices = {7};
  options.cudart_names = {"/nonexistent/libcudart.so"};
  const NodeResources resources = DiscoverResources(options);
  EXPECT_TRUE(resources.gpus.empty());
  EXPECT_THAT(resources.gpu_note, HasSubstr("CUDA device 7"));
  EXPECT_THAT(resources.gpu_note, HasSubstr("not found"));
}

}  // namespace
}  // namespace mesa::worker
