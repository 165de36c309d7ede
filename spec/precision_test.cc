#include "spec/precision.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mesa::spec {
namespace {

TEST(PrecisionTest, ParsesEachNameBack) {
  for (Precision precision : {Precision::kAuto, Precision::kBf16, Precision::kFp32}) {
    absl::StatusOr<Precision> parsed = ParsePrecision(PrecisionName(precision));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, precision);
  }
}

// Unknown names, other spellings and empty are errors that say what is allowed and what came.
TEST(PrecisionTest, RefusesUnknownNames) {
  for (absl::string_view name : {"fp16", "", "BF16", "bfloat16", " fp32", "tf32"}) {
    absl::StatusOr<Precision> parsed = ParsePrecision(name);
    ASSERT_FALSE(parsed.ok()) << name;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(),
              absl::StrCat("precision must be auto, bf16 or fp32, got '", name, "'"));
  }
}

}  // namespace
}  // namespace mesa::spec
