#include "worker/resources.h"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/memory_limit.h"

namespace mesa::worker {
namespace {

using CudaGetDeviceCount = int (*)(int*);
using CudaGetDeviceProperties = int (*)(void*, int);

// The leading fields of cudaDeviceProp, stable since CUDA 11 (driver_types.h):
// char name[256]; cudaUUID_t uuid (16 bytes); char luid[8]; unsigned luidDeviceNodeMask;
// size_t totalGlobalMem. We read only these, from a buffer far larger than the whole struct
// (about 1 KiB in CUDA 13), so a newer runtime with more trailing fields is harmless.
constexpr size_t kNameOffset = 0;
constexpr size_t kTotalMemOffset = 288;
constexpr size_t kPropsBufferBytes = 16384;

}  // namespace

absl::StatusOr<GpuMode> ParseGpuMode(const std::string& text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "auto") return GpuMode::kAuto;
  if (lower == "none" || lower == "0" || lower == "off") return GpuMode::kNone;
  return absl::InvalidArgumentError(
      absl::StrCat("--gpus: expected auto or none, got \"", text, "\""));
}

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

std::vector<GpuDevice> DiscoverCudaDevices(const std::vector<std::string>& cudart_names,
                                           std::string* note) {
  std::vector<GpuDevice> devices;
  void* handle = nullptr;
  std::string tried;
  for (const std::string& name : cudart_names) {
    handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    absl::StrAppend(&tried, tried.empty() ? "" : ", ", name);
  }
  if (handle == nullptr) {
    *note = absl::StrCat("CUDA runtime not found (tried ", tried, ")");
    return devices;
  }
  auto get_count = reinterpret_cast<CudaGetDeviceCount>(dlsym(handle, "cudaGetDeviceCount"));
  // CUDA 12 renamed the entry point with the current struct layout to *_v2; CUDA 11 and 13 export
  // the plain name.
  auto get_props =
      reinterpret_cast<CudaGetDeviceProperties>(dlsym(handle, "cudaGetDeviceProperties_v2"));
  if (get_props == nullptr) {
    get_props = reinterpret_cast<CudaGetDeviceProperties>(dlsym(handle, "cudaGetDeviceProperties"));
  }
  if (get_count == nullptr || get_props == nullptr) {
    *note = "CUDA runtime lacks cudaGetDeviceCount/cudaGetDeviceProperties";
    // Not dlclose'd: unloading cudart is known to misbehave; it costs nothing to keep.
    return devices;
  }
  int count = 0;
  const int rc = get_count(&count);
  if (rc != 0 || count <= 0) {
    *note = rc != 0 ? absl::StrCat("no usable CUDA device (cudaGetDeviceCount error ", rc, ")")
                    : "no CUDA device";
    return devices;
  }
  std::vector<unsigned char> buffer(kPropsBufferBytes);
  for (int i = 0; i < count; ++i) {
    std::memset(buffer.data(), 0, buffer.size());
    GpuDevice device;
    device.index = i;
    if (get_props(buffer.data(), i) == 0) {
      const char* name = reinterpret_cast<const char*>(buffer.data() + kNameOffset);
      device.name.assign(name, strnlen(name, 256));
      size_t memory = 0;
      std::memcpy(&memory, buffer.data() + kTotalMemOffset, sizeof(memory));
      device.memory_bytes = static_cast<int64_t>(memory);
    } else {
      device.name = "unknown CUDA device";
    }
    devices.push_back(std::move(device));
  }
  return devices;
}

NodeResources DiscoverResources(const DiscoveryOptions& options) {
  NodeResources resources;
  resources.cpu_slots = options.cpu_slots > 0 ? options.cpu_slots : AvailableCores();
  if (options.memory_bytes > 0) {
    resources.memory_bytes = options.memory_bytes;
    resources.memory_source = "--memory_bytes";
  } else {
    const base::MemoryHeadroom headroom = base::AvailableMemory();
    resources.memory_bytes = std::max<int64_t>(headroom.bytes, 0);
    resources.memory_source = headroom.source;
  }
  if (options.gpu_mode == GpuMode::kAuto) {
    resources.gpus = DiscoverCudaDevices(options.cudart_names, &resources.gpu_note);
  }
  return resources;
}

}  // namespace mesa::worker
