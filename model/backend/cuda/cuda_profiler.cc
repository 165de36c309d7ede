#include "model/backend/cuda/cuda_profiler.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace mesa::model::cuda {

CudaProfiler::~CudaProfiler() {
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (end_ != nullptr) cudaEventDestroy(end_);
}

cudaError_t CudaProfiler::SetEnabled(bool on) {
  if (on && start_ == nullptr) {
    if (cudaError_t e = cudaEventCreate(&start_); e != cudaSuccess) return e;
  }
  if (on && end_ == nullptr) {
    if (cudaError_t e = cudaEventCreate(&end_); e != cudaSuccess) return e;
  }
  enabled_ = on;
  return cudaSuccess;
}

cudaError_t CudaProfiler::End(cudaStream_t stream, absl::string_view what) {
  if (!enabled_) return cudaSuccess;
  float ms = 0;
  cudaError_t e = cudaEventRecord(end_, stream);
  if (e == cudaSuccess) e = cudaEventSynchronize(end_);
  if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, start_, end_);
  if (e != cudaSuccess) return e;
  OpTime& t = op_times_[std::string(what)];
  t.ms += ms;
  ++t.calls;
  return cudaSuccess;
}

std::string CudaProfiler::Report() {
  std::vector<std::pair<std::string, OpTime>> rows(op_times_.begin(), op_times_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double total = 0;
  for (const auto& [name, t] : rows) total += t.ms;
  std::string report = absl::StrFormat("%-44s %8s %10s %6s\n", "op", "calls", "ms", "%");
  for (const auto& [name, t] : rows) {
    absl::StrAppendFormat(&report, "%-44s %8d %10.3f %6.1f\n", name, t.calls, t.ms,
                          100.0 * t.ms / total);
  }
  absl::StrAppendFormat(&report, "%-44s %8s %10.3f\n", "total", "", total);
  op_times_.clear();
  return report;
}

}  // namespace mesa::model::cuda
