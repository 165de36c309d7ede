// Per-op GPU time of the CUDA backend (CudaBackendControl::SetProfiling). Each op is bracketed by
// two events on the stream and waited for, which serialises the host with the GPU: for a profiling
// step only. While off, Begin/End cost a branch (the backend brackets every launch).
#ifndef MESANET_MODEL_BACKEND_CUDA_CUDA_PROFILER_H_
#define MESANET_MODEL_BACKEND_CUDA_CUDA_PROFILER_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>

#include "absl/strings/string_view.h"

namespace mesa::model::cuda {

class CudaProfiler {
 public:
  CudaProfiler() = default;
  ~CudaProfiler();
  CudaProfiler(const CudaProfiler&) = delete;
  CudaProfiler& operator=(const CudaProfiler&) = delete;

  // Turns timing on (making the two events on first use) or off. On an event creation error it
  // stays as it was and returns the error.
  cudaError_t SetEnabled(bool on);
  bool enabled() const { return enabled_; }

  // Marks the start of an op on `stream`.
  void Begin(cudaStream_t stream) {
    if (enabled_) cudaEventRecord(start_, stream);
  }
  // Marks its end, waits for it and adds the time since Begin to `what`'s row (a view, so that the
  // caller builds no string unless profiling is on). Returns the first CUDA error.
  cudaError_t End(cudaStream_t stream, absl::string_view what);

  // The table (op, calls, ms, % of the total), largest first; clears it.
  std::string Report();

 private:
  struct OpTime {
    double ms = 0;
    int64_t calls = 0;
  };

  bool enabled_ = false;
  cudaEvent_t start_ = nullptr, end_ = nullptr;
  std::map<std::string, OpTime> op_times_;
};

}  // namespace mesa::model::cuda

#endif  // MESANET_MODEL_BACKEND_CUDA_CUDA_PROFILER_H_
