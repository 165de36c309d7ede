// The GEMM math options' names (cuda_backend.h), apart from the backend itself.
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/backend/cuda/cuda_backend.h"

namespace mesa::model {

absl::StatusOr<GemmMath> ParseGemmMath(const std::string& name) {
  if (name == "tf32") return GemmMath::kTf32;
  if (name == "bf16") return GemmMath::kBf16;
  if (name == "fp32") return GemmMath::kFp32;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown GEMM math '", name, "' (expected tf32, bf16 or fp32)"));
}

const char* GemmMathName(GemmMath math) {
  switch (math) {
    case GemmMath::kTf32:
      return "tf32";
    case GemmMath::kBf16:
      return "bf16";
    case GemmMath::kFp32:
      return "fp32";
  }
  return "?";
}

}  // namespace mesa::model
