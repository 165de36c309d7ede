#include "spec/precision.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mesa::spec {

absl::StatusOr<Precision> ParsePrecision(absl::string_view name) {
  for (Precision precision : {Precision::kAuto, Precision::kBf16, Precision::kFp32}) {
    if (name == PrecisionName(precision)) return precision;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("precision must be auto, bf16 or fp32, got '", name, "'"));
}

const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kAuto:
      return "auto";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp32:
      return "fp32";
  }
  return "unknown";
}

}  // namespace mesa::spec
