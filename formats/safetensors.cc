#include "formats/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>
#include "absl/strings/str_cat.h"
#include "base/file_util.h"

namespace mesa::safetensors {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's limit

struct DTypeInfo {
  DType dtype;
  const char* name;
  int64_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kBool, "BOOL", 1}, {DType::kU8, "U8", 1},   {DType::kI8, "I8", 1},
    {DType::kU16, "U16", 2},   {DType::kI16, "I16", 2}, {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kU32, "U32", 4}, {DType::kI32, "I32", 4},
    {DType::kF32, "F32", 4},   {DType::kU64, "U64", 8}, {DType::kI64, "I64", 8},
    {DType::kF64, "F64", 8},
};

absl::Status Invalid(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: ", std::string(what)));
}

template <typename T>
T LoadLE(const std::byte* p) {  // x86 and every target we build for are little-endian
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// Product of dims with overflow detection; -1 on overflow or negative dims.
int64_t CheckedNumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

template <typename Out>
absl::StatusOr<std::vector<Out>> Convert(const TensorView& view) {
  const int64_t n = view.NumElements();
  if (n < 0 || static_cast<int64_t>(view.data.size()) != n * DTypeSize(view.dtype)) {
    return Invalid(absl::StrCat("tensor '", view.name, "' data size does not match its shape"));
  }
  std::vector<Out> out(n);
  const std::byte* p = view.data.data();
  for (int64_t i = 0; i < n; ++i) {
    switch (view.dtype) {
      case DType::kF64:
        out[i] = static_cast<Out>(LoadLE<double>(p + 8 * i));
        break;
      case DType::kF32:
        out[i] = static_cast<Out>(LoadLE<float>(p + 4 * i));
        break;
      case DType::kF16:
        out[i] = static_cast<Out>(HalfToFloat(LoadLE<uint16_t>(p + 2 * i)));
        break;
      case DType::kBF16:
        out[i] = static_cast<Out>(BFloat16ToFloat(LoadLE<uint16_t>(p + 2 * i)));
        break;
      case DType::kI64:
        out[i] = static_cast<Out>(LoadLE<int64_t>(p + 8 * i));
        break;
      case DType::kU64:
        out[i] = static_cast<Out>(LoadLE<uint64_t>(p + 8 * i));
        break;
      case DType::kI32:
        out[i] = static_cast<Out>(LoadLE<int32_t>(p + 4 * i));
        break;
      case DType::kU32:
        out[i] = static_cast<Out>(LoadLE<uint32_t>(p + 4 * i));
        break;
      case DType::kI16:
        out[i] = static_cast<Out>(LoadLE<int16_t>(p + 2 * i));
        break;
      case DType::kU16:
        out[i] = static_cast<Out>(LoadLE<uint16_t>(p + 2 * i));
        break;
      case DType::kI8:
        out[i] = static_cast<Out>(static_cast<int8_t>(p[i]));
        break;
      case DType::kU8:
        out[i] = static_cast<Out>(static_cast<uint8_t>(p[i]));
        break;
      case DType::kBool:
        out[i] = static_cast<Out>(static_cast<uint8_t>(p[i]) != 0);
        break;
    }
  }
  return out;
}

// Parses the JSON header into views over `data`. All checks happen here.
absl::Status ParseHeader(std::string_view header_text, std::span<const std::byte> data,
                         std::vector<TensorView>* tensors, Metadata* metadata) {
  nlohmann::json header = nlohmann::json::parse(header_text.begin(), header_text.end(), nullptr,
                                                /*allow_exceptions=*/false);
  if (header.is_discarded()) return Invalid("header is not valid JSON");
  if (!header.is_object()) return Invalid("header JSON is not an object");
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& entry = it.value();
    if (key == "__metadata__") {
      if (!entry.is_object()) return Invalid("__metadata__ must be an object of strings");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) {
          return Invalid(absl::StrCat("__metadata__ value for '", m.key(), "' is not a string"));
        }
        (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (key.empty()) return Invalid("empty tensor name");
    if (!entry.is_object()) return Invalid(absl::StrCat("entry '", key, "' is not an object"));
    auto dtype_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) {
      return Invalid(absl::StrCat("tensor '", key, "' has no string 'dtype'"));
    }
    if (shape_it == entry.end() || !shape_it->is_array()) {
      return Invalid(absl::StrCat("tensor '", key, "' has no array 'shape'"));
    }
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
      return Invalid(absl::StrCat("tensor '", key, "' needs 'data_offsets' = [begin, end]"));
    }
    TensorView view;
    view.name = key;
    absl::StatusOr<DType> dtype = ParseDType(dtype_it->get<std::string>());
    if (!dtype.ok()) {
      return Invalid(absl::StrCat("tensor '", key, "': ", std::string(dtype.status().message())));
    }
    view.dtype = *dtype;
    for (const nlohmann::json& dim : *shape_it) {
      if (!dim.is_number_integer() || dim.get<int64_t>() < 0) {
        return Invalid(absl::StrCat("tensor '", key,
                                    "' has a shape entry that is not a non-negative integer"));
      }
      view.shape.push_back(dim.get<int64_t>());
    }
    uint64_t offsets[2];
    for (int i = 0; i < 2; ++i) {
      const nlohmann::json& o = (*offsets_it)[i];
      if (!o.is_number_integer() ||
          (o.is_number_integer() && !o.is_number_unsigned() && o.get<int64_t>() < 0)) {
        return Invalid(absl::StrCat("tensor '", key,
                                    "' has a data offset that is not a non-negative integer"));
      }
      offsets[i] = o.get<uint64_t>();
    }
    if (offsets[0] > offsets[1] || offsets[1] > data.size()) {
      return Invalid(absl::StrCat("tensor '", key, "' data_offsets [", offsets[0], ", ", offsets[1],
                                  "] out of bounds of the ", data.size(), "-byte data section"));
    }
    const int64_t numel = CheckedNumElements(view.shape);
    const int64_t elem = DTypeSize(view.dtype);
    if (numel < 0 || numel > std::numeric_limits<int64_t>::max() / elem ||
        static_cast<uint64_t>(numel * elem) != offsets[1] - offsets[0]) {
      return Invalid(absl::StrCat("tensor '", key, "' has ", offsets[1] - offsets[0],
                                  " bytes but its dtype ", std::string(DTypeName(view.dtype)),
                                  " and shape need ", numel < 0 ? -1 : numel * elem));
    }
    view.data = data.subspan(offsets[0], offsets[1] - offsets[0]);
    tensors->push_back(std::move(view));
  }
  // Tensors must tile the data section: sorted by offset, each starts where the previous ended.
  std::sort(tensors->begin(), tensors->end(), [&](const TensorView& a, const TensorView& b) {
    return a.data.data() != b.data.data() ? a.data.data() < b.data.data()
                                          : a.data.size() < b.data.size();
  });
  size_t expected_begin = 0;
  for (const TensorView& t : *tensors) {
    const size_t begin = static_cast<size_t>(t.data.data() - data.data());
    if (begin != expected_begin) {
      return Invalid(absl::StrCat("tensor '", t.name, "' starts at byte ", begin,
                                  " but the previous tensor ends at ", expected_begin,
                                  " (tensors must be contiguous and non-overlapping)"));
    }
    expected_begin = begin + t.data.size();
  }
  if (expected_begin != data.size()) {
    return Invalid(absl::StrCat("data section has ", data.size() - expected_begin,
                                " trailing bytes not covered by any tensor"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DType> ParseDType(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (name == info.name) return info.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", std::string(name), "'"));
}

std::string_view DTypeName(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info.name;
  }
  return "?";
}

int64_t DTypeSize(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info.size;
  }
  return 1;
}

int64_t TensorView::NumElements() const { return CheckedNumElements(shape); }

absl::StatusOr<SafetensorsFile> SafetensorsFile::ReadFile(const std::string& path) {
  absl::StatusOr<std::vector<std::byte>> bytes = base::ReadFileBytes(path);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("safetensors: ", bytes.status().message()));
  }
  absl::StatusOr<SafetensorsFile> parsed = Parse(*std::move(bytes));
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(), absl::StrCat(std::string(parsed.status().message()),
                                                             " (file '", path, "')"));
  }
  return parsed;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(std::vector<std::byte> bytes) {
  if (bytes.size() < 8) {
    // Neither the size nor the first bytes go into errors: they may name any readable file.
    return Invalid("the file is shorter than the 8-byte header length (not a safetensors file?)");
  }
  const uint64_t header_len = LoadLE<uint64_t>(bytes.data());
  if (header_len > kMaxHeaderBytes || header_len > bytes.size() - 8) {
    return Invalid(
        "the header length (first 8 bytes) exceeds the file or the 100 MB limit (not a "
        "safetensors file, or truncated?)");
  }
  SafetensorsFile file;
  file.bytes_ = std::move(bytes);
  const char* header_begin = reinterpret_cast<const char*>(file.bytes_.data() + 8);
  std::string_view header_text(header_begin, header_len);
  std::span<const std::byte> data(file.bytes_.data() + 8 + header_len,
                                  file.bytes_.size() - 8 - header_len);
  try {
    if (absl::Status s = ParseHeader(header_text, data, &file.tensors_, &file.metadata_); !s.ok()) {
      return s;
    }
  } catch (const std::exception& e) {  // nlohmann type errors: defensive, checks come first
    return Invalid(absl::StrCat("malformed header: ", e.what()));
  }
  return file;
}

const TensorView* SafetensorsFile::Find(std::string_view name) const {
  for (const TensorView& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<TensorView> SafetensorsFile::Get(std::string_view name) const {
  const TensorView* t = Find(name);
  if (t == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("safetensors: no tensor named '", std::string(name), "'"));
  }
  return *t;
}

absl::StatusOr<std::vector<float>> SafetensorsFile::GetAsFloat32(std::string_view name) const {
  absl::StatusOr<TensorView> t = Get(name);
  if (!t.ok()) return t.status();
  return ToFloat32(*t);
}

absl::StatusOr<std::vector<double>> SafetensorsFile::GetAsFloat64(std::string_view name) const {
  absl::StatusOr<TensorView> t = Get(name);
  if (!t.ok()) return t.status();
  return ToFloat64(*t);
}

absl::StatusOr<std::vector<float>> ToFloat32(const TensorView& view) {
  return Convert<float>(view);
}
absl::StatusOr<std::vector<double>> ToFloat64(const TensorView& view) {
  return Convert<double>(view);
}

absl::StatusOr<std::vector<float>> ToFiniteFloat32(const TensorView& view) {
  absl::StatusOr<std::vector<float>> values = Convert<float>(view);
  if (!values.ok()) return values.status();
  for (size_t i = 0; i < values->size(); ++i) {
    if (!std::isfinite((*values)[i])) {
      return absl::DataLossError(absl::StrCat("tensor ", view.name, ": element ", i, " is ",
                                              std::isnan((*values)[i]) ? "NaN" : "infinite",
                                              "; the weights are not a usable model"));
    }
  }
  return values;
}

absl::StatusOr<std::vector<std::byte>> EncodeFloats(std::span<const float> values, DType dtype) {
  std::vector<std::byte> out(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::kF32:
        std::memcpy(&out[4 * i], &values[i], 4);
        break;
      case DType::kF64: {
        const double d = values[i];
        std::memcpy(&out[8 * i], &d, 8);
        break;
      }
      case DType::kF16: {
        const uint16_t h = FloatToHalf(values[i]);
        std::memcpy(&out[2 * i], &h, 2);
        break;
      }
      case DType::kBF16: {
        const uint16_t h = FloatToBFloat16(values[i]);
        std::memcpy(&out[2 * i], &h, 2);
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "EncodeFloats: dtype ", std::string(DTypeName(dtype)), " is not a float type"));
    }
  }
  return out;
}

TensorView MakeView(std::string name, DType dtype, std::vector<int64_t> shape,
                    std::span<const std::byte> data) {
  return TensorView{std::move(name), dtype, std::move(shape), data};
}
TensorView F32View(std::string name, std::vector<int64_t> shape, std::span<const float> data) {
  return MakeView(std::move(name), DType::kF32, std::move(shape), std::as_bytes(data));
}
TensorView F64View(std::string name, std::vector<int64_t> shape, std::span<const double> data) {
  return MakeView(std::move(name), DType::kF64, std::move(shape), std::as_bytes(data));
}
TensorView I32View(std::string name, std::vector<int64_t> shape, std::span<const int32_t> data) {
  return MakeView(std::move(name), DType::kI32, std::move(shape), std::as_bytes(data));
}
TensorView I64View(std::string name, std::vector<int64_t> shape, std::span<const int64_t> data) {
  return MakeView(std::move(name), DType::kI64, std::move(shape), std::as_bytes(data));
}

absl::StatusOr<std::vector<std::byte>> Serialize(std::span<const TensorView> tensors,
                                                 const Metadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = meta;
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const TensorView& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: invalid tensor name '", t.name, "'"));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: duplicate tensor name '", t.name, "'"));
    }
    const int64_t numel = t.NumElements();
    if (numel < 0 || static_cast<uint64_t>(numel * DTypeSize(t.dtype)) != t.data.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor '", t.name, "' has ", t.data.size(),
                       " bytes, its shape and dtype need ", numel * DTypeSize(t.dtype)));
    }
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  std::vector<std::byte> out(8 + header_text.size() + offset);
  const uint64_t header_len = header_text.size();
  std::memcpy(out.data(), &header_len, 8);
  std::memcpy(out.data() + 8, header_text.data(), header_text.size());
  std::byte* data = out.data() + 8 + header_text.size();
  for (const TensorView& t : tensors) {
    if (!t.data.empty()) std::memcpy(data, t.data.data(), t.data.size());
    data += t.data.size();
  }
  return out;
}

absl::Status WriteFile(const std::string& path, std::span<const TensorView> tensors,
                       const Metadata& metadata) {
  absl::StatusOr<std::vector<std::byte>> bytes = Serialize(tensors, metadata);
  if (!bytes.ok()) return bytes.status();
  return WriteBytesAtomically(path, *bytes);
}

absl::Status WriteBytesAtomically(const std::string& path, std::span<const std::byte> bytes) {
  absl::Status status = base::WriteFileAtomically(path, bytes);
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("safetensors: ", status.message()));
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0) {
    if (mantissa == 0) {
      out = sign;
    } else {  // subnormal: value = mantissa * 2^-24
      const float value = std::ldexp(static_cast<float>(mantissa), -24);
      std::memcpy(&out, &value, 4);
      out |= sign;
    }
  } else if (exponent == 31) {
    out = sign | 0x7f800000u | (mantissa << 13);
  } else {
    out = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

float BFloat16ToFloat(uint16_t bits) {
  const uint32_t out = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

uint16_t FloatToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // keep it a NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

uint16_t FloatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  if (std::isnan(value)) return sign | 0x7e00u;
  const float magnitude = std::fabs(value);
  if (magnitude >= 65520.f) return sign | 0x7c00u;  // rounds to infinity
  if (magnitude < std::ldexp(1.f, -14)) {           // subnormal or zero: units of 2^-24
    const float scaled = magnitude * 16777216.f;    // exact (power of two)
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));  // ties to even (default mode)
  }
  uint32_t m = bits & 0x7fffffffu;
  // Re-bias exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even.
  m += 0x0fffu + ((m >> 13) & 1u);
  m -= (127u - 15u) << 23;
  return sign | static_cast<uint16_t>(m >> 13);
}

}  // namespace mesa::safetensors
