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

}  // namespace mesa::kernels
