// safetensors reader and writer (target //formats:safetensors; no gRPC).
//
// Format (https://huggingface.co/docs/safetensors): 8-byte little-endian u64 N, then N bytes of
// UTF-8 JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "string value"}}, then the raw little-endian data; offsets are relative
// to the start of the data section.
//
// Reading is strict: the header length must fit the file (and be <= 100 MB), the JSON must parse,
// every entry must have a known dtype, a non-negative integer shape and [begin, end] offsets with
// end - begin == numel * dtype size, and the tensors must tile the data section exactly
// (contiguous, non-overlapping, no trailing bytes). Every violation is an InvalidArgument
// status naming the problem; malformed input never crashes.
//
// Writing pads the header with spaces to a multiple of 8 bytes, lays tensors out in the order
// given, and is atomic: a temporary file in the same directory is written, fsync'ed and renamed
// over the destination.
#ifndef MESANET_KERNELS_SAFETENSORS_H_
#define MESANET_KERNELS_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mesa::safetensors {

enum class DType { kBool, kU8, kI8, kU16, kI16, kF16, kBF16, kU32, kI32, kF32, kU64, kI64, kF64 };

absl::StatusOr<DType> ParseDType(std::string_view name);  // "F32", "BF16", ...
std::string_view DTypeName(DType dtype);
int64_t DTypeSize(DType dtype);  // bytes per element

// A tensor inside a file or a buffer; does not own its data.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // [] = scalar (1 element)
  std::span<const std::byte> data;

  int64_t NumElements() const;
};

using Metadata = std::map<std::string, std::string>;

// An in-memory safetensors file (owns its bytes; views point into them).
class SafetensorsFile {
 public:
  static absl::StatusOr<SafetensorsFile> ReadFile(const std::string& path);
  static absl::StatusOr<SafetensorsFile> Parse(std::vector<std::byte> bytes);

  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;

  // In file (offset) order.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const Metadata& metadata() const { return metadata_; }
  bool Has(std::string_view name) const { return Find(name) != nullptr; }
  const TensorView* Find(std::string_view name) const;          // nullptr if absent
  absl::StatusOr<TensorView> Get(std::string_view name) const;  // NotFound if absent

  // The tensor converted to float32/float64 (from F64, F32, F16, BF16 and integer/bool types).
  absl::StatusOr<std::vector<float>> GetAsFloat32(std::string_view name) const;
  absl::StatusOr<std::vector<double>> GetAsFloat64(std::string_view name) const;

 private:
  SafetensorsFile() = default;
  std::vector<std::byte> bytes_;
  std::vector<TensorView> tensors_;
  Metadata metadata_;
};

// Conversions of a view's elements (any dtype) to float.
absl::StatusOr<std::vector<float>> ToFloat32(const TensorView& view);
absl::StatusOr<std::vector<double>> ToFloat64(const TensorView& view);
// ToFloat32 for model weights: a NaN or infinite element is DataLoss naming the tensor and the
// element (a model with such a weight computes nothing meaningful, whatever tool reads it).
absl::StatusOr<std::vector<float>> ToFiniteFloat32(const TensorView& view);

// Encodes floats as F32, F64, F16 or BF16 (round to nearest even), for writing.
absl::StatusOr<std::vector<std::byte>> EncodeFloats(std::span<const float> values, DType dtype);

// Builds a view over existing typed data (no copy; the data must outlive the view).
TensorView MakeView(std::string name, DType dtype, std::vector<int64_t> shape,
                    std::span<const std::byte> data);
TensorView F32View(std::string name, std::vector<int64_t> shape, std::span<const float> data);
TensorView F64View(std::string name, std::vector<int64_t> shape, std::span<const double> data);
TensorView I32View(std::string name, std::vector<int64_t> shape, std::span<const int32_t> data);
TensorView I64View(std::string name, std::vector<int64_t> shape, std::span<const int64_t> data);

// Serialises to bytes. Checks names are unique and non-empty, and data sizes match shapes.
absl::StatusOr<std::vector<std::byte>> Serialize(std::span<const TensorView> tensors,
                                                 const Metadata& metadata = {});
// Serialize + WriteBytesAtomically.
absl::Status WriteFile(const std::string& path, std::span<const TensorView> tensors,
                       const Metadata& metadata = {});
// base::WriteFileAtomically with "safetensors: " before an error: a temporary file in the same
// directory, fsync, rename, and an fsync of the directory. On failure `path` is untouched and the
// temporary file removed.
absl::Status WriteBytesAtomically(const std::string& path, std::span<const std::byte> bytes);

// Half-precision helpers (bit patterns).
float HalfToFloat(uint16_t bits);
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
uint16_t FloatToBFloat16(float value);

}  // namespace mesa::safetensors

#endif  // MESANET_KERNELS_SAFETENSORS_H_
