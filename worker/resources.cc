#include "worker/resources.h"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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
constexpr size_t kUuidOffset = 256;
constexpr size_t kTotalMemOffset = 288;
constexpr size_t kPropsBufferBytes = 16384;
// More than any one host has (16 per NVSwitch tray today); bounds a typo like 0-100000.
constexpr int kMaxGpusPerWorker = 256;

}  // namespace

std::string FormatGpuUuid(const unsigned char (&bytes)[16]) {
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    absl::StrAppend(&out, absl::Hex(bytes[i], absl::kZeroPad2));
  }
  return out;
}

absl::StatusOr<GpuSelection> ParseGpuSelection(const std::string& text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "auto") return GpuSelection{.mode = GpuMode::kAuto};
  // "0" is device 0 (it used to be a spelling of "none", used nowhere): one-GPU agents sharing a
  // host start as --gpus 0, --gpus 1, ...
  if (lower == "none" || lower == "off") return GpuSelection{.mode = GpuMode::kNone};
  const auto invalid = [&text](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpus: expected auto, none or device indices such as 0,1 or 4-7, got \"",
                     text, "\" (", why, ")"));
  };
  GpuSelection selection{.mode = GpuMode::kList};
  for (absl::string_view item : absl::StrSplit(lower, ',')) {
    std::pair<absl::string_view, absl::string_view> range = absl::StrSplit(item, '-');
    if (range.second.empty() && !absl::StrContains(item, '-')) range.second = range.first;
    int first = 0;
    int last = 0;
    if (!absl::SimpleAtoi(range.first, &first) || !absl::SimpleAtoi(range.second, &last)) {
      return invalid(absl::StrCat("\"", item, "\" is not an index or a range"));
    }
    if (first < 0 || last < first || last >= kMaxGpusPerWorker) {
      return invalid(absl::StrCat("indices go from 0 to ", kMaxGpusPerWorker - 1, ", ascending"));
    }
    for (int i = first; i <= last; ++i) selection.indices.push_back(i);
  }
  std::sort(selection.indices.begin(), selection.indices.end());
  if (std::adjacent_find(selection.indices.begin(), selection.indices.end()) !=
      selection.indices.end()) {
    return invalid("an index is named twice");
  }
  return selection;
}

absl::StatusOr<std::vector<GpuDevice>> SelectGpus(const std::vector<GpuDevice>& found,
                                                  const std::vector<int>& wanted) {
  std::vector<GpuDevice> selected;
  for (int index : wanted) {
    auto it = std::find_if(found.begin(), found.end(),
                           [index](const GpuDevice& gpu) { return gpu.index == index; });
    if (it == found.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("--gpus names CUDA device ", index, ", but this machine has ", found.size(),
                       found.size() == 1 ? " device" : " devices",
                       found.empty() ? "" : absl::StrCat(" (0 to ", found.size() - 1, ")")));
    }
    selected.push_back(*it);
  }
  return selected;
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
      unsigned char uuid[16];
      std::memcpy(uuid, buffer.data() + kUuidOffset, sizeof(uuid));
      device.uuid = FormatGpuUuid(uuid);
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
  } else if (options.gpu_mode == GpuMode::kList) {
    std::string note;
    absl::StatusOr<std::vector<GpuDevice>> selected =
        SelectGpus(DiscoverCudaDevices(options.cudart_names, &note), options.gpu_indices);
    if (selected.ok()) {
      resources.gpus = *std::move(selected);
    } else {
      resources.gpu_note = note.empty() ? std::string(selected.status().message())
                                        : absl::StrCat(selected.status().message(), ": ", note);
    }
  }
  return resources;
}

}  // namespace mesa::worker
