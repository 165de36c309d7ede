// Resource discovery for the node agent: CUDA devices (index, name, memory) or CPU slots.
//
// The CUDA runtime is loaded with dlopen() at run time rather than linked, so one mesa-worker
// binary runs on GPU nodes and on machines without CUDA (CI, laptops). No CUDA context is
// created: only device count and properties are queried.
#ifndef MESANET_WORKER_RESOURCES_H_
#define MESANET_WORKER_RESOURCES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mesa::worker {

struct GpuDevice {
  int index = 0;
  std::string name;
  int64_t memory_bytes = 0;
  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi and DCGM-exporter's UUID label write
  // it: the same on the node and in any container, unlike the CUDA index. Empty if unknown.
  std::string uuid;
};

// The 16 bytes of a cudaUUID_t in nvidia-smi's form (GpuDevice::uuid).
std::string FormatGpuUuid(const unsigned char (&bytes)[16]);

struct NodeResources {
  std::vector<GpuDevice> gpus;
  int cpu_slots = 0;
  // Memory offered to trainers together (WorkerResources.memory_bytes), and where the figure came
  // from ("--memory_bytes", or the limit base::AvailableMemory named).
  int64_t memory_bytes = 0;
  std::string memory_source;
  // Why no GPU was found ("libcudart.so not found", "no CUDA device", ...); empty if GPUs found
  // or GPUs were turned off. Logged at start so a missing driver is visible.
  std::string gpu_note;
};

// kList offers only the CUDA devices named by index, so that several agents can share one host
// (each with its own GPUs), e.g. two 4-GPU agents standing in for two nodes on an 8-GPU machine.
enum class GpuMode { kAuto, kNone, kList };

struct GpuSelection {
  GpuMode mode = GpuMode::kAuto;
  std::vector<int> indices;  // kList: distinct CUDA device indices, ascending
};

// Parses --gpus: "auto", "none", or a comma-separated list of device indices ("0,1", "4-7" ranges
// too).
absl::StatusOr<GpuSelection> ParseGpuSelection(const std::string& text);

// The devices of `found` whose index is in `wanted`; an index not found is an error naming it.
absl::StatusOr<std::vector<GpuDevice>> SelectGpus(const std::vector<GpuDevice>& found,
                                                  const std::vector<int>& wanted);

struct DiscoveryOptions {
  GpuMode gpu_mode = GpuMode::kAuto;
  std::vector<int> gpu_indices;  // kList only
  // <= 0: the number of cores this process may run on.
  int cpu_slots = 0;
  // <= 0: what this process may still allocate (base::AvailableMemory: cgroup limit less usage,
  // RLIMIT_AS, MemAvailable), measured now, before any trainer runs.
  int64_t memory_bytes = 0;
  // Libraries tried in order; the first that loads is used. Tests point this at a missing file.
  std::vector<std::string> cudart_names = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                           "/usr/local/cuda/lib64/libcudart.so"};
};

// Never fails for lack of a GPU: a machine without CUDA simply reports no GPUs. With kList, a
// listed index that is not there leaves `gpus` empty and says why in `gpu_note`.
NodeResources DiscoverResources(const DiscoveryOptions& options);

// CUDA devices through the runtime named in `cudart_names`; empty with `note` set when there are
// none or the runtime is missing.
std::vector<GpuDevice> DiscoverCudaDevices(const std::vector<std::string>& cudart_names,
                                           std::string* note);

// Cores available to this process (sched_getaffinity), at least 1.
int AvailableCores();

}  // namespace mesa::worker

#endif  // MESANET_WORKER_RESOURCES_H_
