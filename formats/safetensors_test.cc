#include "formats/safetensors.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace mesa::safetensors {
namespace {

std::vector<std::byte> Bytes(const std::string& header, size_t data_bytes) {
  std::vector<std::byte> out(8 + header.size() + data_bytes);
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

absl::Status ParseStatus(const std::string& header, size_t data_bytes) {
  return SafetensorsFile::Parse(Bytes(header, data_bytes)).status();
}

TEST(Safetensors, RoundTripAllDtypesAndMetadata) {
  const std::vector<float> f32 = {1.f, -2.5f, 3.25f, 0.f, 1e-3f, 65504.f};
  const std::vector<double> f64 = {1.0 / 3.0, -7.0};
  const std::vector<int32_t> i32 = {-1, 2, 2147483647};
  const std::vector<int64_t> i64 = {int64_t(1) << 40};
  absl::StatusOr<std::vector<std::byte>> bf16 = EncodeFloats(f32, DType::kBF16);
  absl::StatusOr<std::vector<std::byte>> f16 = EncodeFloats(f32, DType::kF16);
  ASSERT_TRUE(bf16.ok() && f16.ok());
  const std::vector<TensorView> tensors = {F32View("a", {2, 3}, f32),
                                           F64View("b", {2}, f64),
                                           I32View("c", {3}, i32),
                                           I64View("scalar", {}, i64),
                                           MakeView("h", DType::kBF16, {6}, *bf16),
                                           MakeView("f", DType::kF16, {6}, *f16),
                                           F32View("empty", {0, 4}, {})};
  const std::string path = ::testing::TempDir() + "/roundtrip.safetensors";
  ASSERT_TRUE(WriteFile(path, tensors, {{"format", "pt"}, {"step", "12"}}).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::ReadFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("step"), "12");
  EXPECT_EQ(file->tensors().size(), tensors.size());
  EXPECT_EQ(*file->GetAsFloat32("a"), f32);
  EXPECT_EQ(file->Get("a")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*file->GetAsFloat64("b"), f64);
  EXPECT_EQ(*file->GetAsFloat64("c"), (std::vector<double>{-1, 2, 2147483647}));
  EXPECT_EQ(file->GetAsFloat64("scalar")->at(0), double(int64_t(1) << 40));
  EXPECT_EQ(file->Get("scalar")->shape.size(), 0u);
  EXPECT_EQ(file->GetAsFloat32("empty")->size(), 0u);
  // Half types: exactly representable values survive; 1e-3 is rounded.
  const std::vector<float> h = *file->GetAsFloat32("h"), f = *file->GetAsFloat32("f");
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_NEAR(h[i], f32[i], std::fabs(f32[i]) * 4e-3) << i;
    EXPECT_NEAR(f[i], f32[i], std::fabs(f32[i]) * 5e-4) << i;
  }
  EXPECT_EQ(f[5], 65504.f);
  EXPECT_EQ(file->Get("missing").status().code(), absl::StatusCode::kNotFound);
}

TEST(Safetensors, HalfConversions) {
  EXPECT_EQ(FloatToHalf(1.f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.f), 0xc000);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);                  // overflow -> inf
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.f, -24));  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.f, -24)), 0x0001);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  EXPECT_EQ(FloatToBFloat16(1.f), 0x3f80);
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.00390625f)), 1.f);  // tie rounds to even
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(NAN))));
}

TEST(Safetensors, CorruptFilesAreErrorsNotCrashes) {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_TRUE(ParseStatus(ok, 8).ok());
  EXPECT_FALSE(SafetensorsFile::Parse(std::vector<std::byte>(5)).ok());  // too short
  std::vector<std::byte> huge = Bytes(ok, 8);
  const uint64_t too_long = uint64_t(1) << 40;
  std::memcpy(huge.data(), &too_long, 8);
  EXPECT_FALSE(SafetensorsFile::Parse(huge).ok());  // header length > file
  {
    // Regression: the error quoted the first 8 bytes (as a length) and the size of any file.
    const std::string text = "password=hunter2\n";
    std::vector<std::byte> other(text.size());
    std::memcpy(other.data(), text.data(), text.size());
    auto status = SafetensorsFile::Parse(other).status();
    EXPECT_FALSE(status.ok());
    uint64_t first8;
    std::memcpy(&first8, text.data(), 8);
    EXPECT_EQ(status.message().find(std::to_string(first8)), std::string::npos) << status;
    EXPECT_EQ(status.message().find(std::to_string(text.size())), std::string::npos) << status;
  }
  EXPECT_FALSE(ParseStatus("{not json", 0).ok());
  EXPECT_FALSE(ParseStatus("[1,2]", 0).ok());  // not an object
  EXPECT_FALSE(ParseStatus(R"({"a":{"dtype":"F99","shape":[2],"data_offsets":[0,8]}})", 8).ok());
  EXPECT_FALSE(ParseStatus(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)
                   .ok());  // size mismatch
  EXPECT_FALSE(ParseStatus(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4)
                   .ok());  // out of bounds
  EXPECT_FALSE(ParseStatus(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)
                   .ok());  // reversed
  EXPECT_FALSE(ParseStatus(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8).ok());
  EXPECT_FALSE(ParseStatus(R"({"a":{"dtype":"F32","shape":"x","data_offsets":[0,8]}})", 8).ok());
  EXPECT_FALSE(ParseStatus(R"({"a":{"dtype":"F32","shape":[2]}})", 8).ok());  // no offsets
  EXPECT_FALSE(ParseStatus(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12)
                   .ok());  // trailing bytes
  EXPECT_FALSE(ParseStatus(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           12)
                   .ok());  // overlap
  EXPECT_FALSE(
      ParseStatus(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8).ok());  // gap
  EXPECT_FALSE(
      ParseStatus(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})",
                  8)
          .ok());
  EXPECT_FALSE(ParseStatus(R"({"__metadata__":{"k":1}})", 0).ok());
  EXPECT_EQ(SafetensorsFile::ReadFile("/nonexistent/x.safetensors").status().code(),
            absl::StatusCode::kNotFound);
  // Every truncation of a valid file fails cleanly.
  std::vector<float> data = {1, 2, 3};
  absl::StatusOr<std::vector<std::byte>> bytes =
      Serialize(std::vector<TensorView>{F32View("x", {3}, data)});
  ASSERT_TRUE(bytes.ok());
  for (size_t n = 0; n < bytes->size(); ++n) {
    EXPECT_FALSE(
        SafetensorsFile::Parse(std::vector<std::byte>(bytes->begin(), bytes->begin() + n)).ok())
        << n;
  }
}

TEST(Safetensors, WriterRejectsBadTensors) {
  std::vector<float> data = {1, 2, 3};
  EXPECT_FALSE(Serialize(std::vector<TensorView>{F32View("x", {2}, data)}).ok());  // size mismatch
  EXPECT_FALSE(
      Serialize(std::vector<TensorView>{F32View("x", {3}, data), F32View("x", {3}, data)}).ok());
  EXPECT_FALSE(Serialize(std::vector<TensorView>{F32View("", {3}, data)}).ok());
  EXPECT_FALSE(
      WriteFile("/nonexistent_dir/x.safetensors", std::vector<TensorView>{F32View("x", {3}, data)})
          .ok());
}

}  // namespace
}  // namespace mesa::safetensors
