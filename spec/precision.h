// The precisions a run's activations are stored in ("auto", "bf16", "fp32"): the one list that the
// job spec's training.precision and mesa-logits' --precision read. A leaf package, like
// spec/device.h, so that the validator can use it without linking the model.
#ifndef MESANET_SPEC_PRECISION_H_
#define MESANET_SPEC_PRECISION_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mesa::spec {

// kAuto is bf16 on CUDA and fp32 on the CPU, decided once the device is known (the trainer's
// backend creation).
enum class Precision { kAuto, kBf16, kFp32 };

// "auto" | "bf16" | "fp32" (exact spelling). Anything else, empty included, is INVALID_ARGUMENT
// "precision must be auto, bf16 or fp32, got 'x'": an unknown name must never act as another.
// Callers whose empty value means "not set" resolve that first, and prefix the setting's name.
absl::StatusOr<Precision> ParsePrecision(absl::string_view name);
const char* PrecisionName(Precision precision);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_PRECISION_H_
