#include "kernels/common/tensor_checks.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace mesa::kernels {

absl::Status CheckSize(absl::string_view name, size_t actual, int64_t expected) {
  if (static_cast<int64_t>(actual) != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has ", actual, " elements, expected ", expected));
  }
  return absl::OkStatus();
}

absl::Status CheckOptionalSize(absl::string_view name, size_t actual, int64_t expected) {
  if (actual == 0) return absl::OkStatus();
  return CheckSize(name, actual, expected);
}

absl::Status CheckFinite(absl::string_view name, std::span<const float> data) {
  for (size_t i = 0; i < data.size(); ++i) {
    if (!std::isfinite(data[i])) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has a non-finite value (",
                                                     data[i], ") at flat index ", i));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCuSeqlens(std::span<const int32_t> cu_seqlens, int64_t batch, int64_t seq_len) {
  if (batch != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("varlen mode (cu_seqlens given) requires batch == 1, got ", batch));
  }
  if (cu_seqlens.size() < 2) {
    return absl::InvalidArgumentError("cu_seqlens needs at least 2 entries (N+1 offsets)");
  }
  if (cu_seqlens.front() != 0 || cu_seqlens.back() != seq_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("cu_seqlens must start at 0 and end at T=", seq_len, ", got ",
                     cu_seqlens.front(), " .. ", cu_seqlens.back()));
  }
  for (size_t i = 1; i < cu_seqlens.size(); ++i) {
    if (cu_seqlens[i] < cu_seqlens[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("cu_seqlens must be non-decreasing; entry ", i,
                                                     " is ", cu_seqlens[i], " < ",
                                                     cu_seqlens[i - 1]));
    }
  }
  return absl::OkStatus();
}

}  // namespace mesa::kernels
