#include "base/json_int.h"

#include "gtest/gtest.h"

namespace mesa::base {
namespace {

TEST(JsonIntTest, WholeNumbersInRangeAndNothingElse) {
  using nlohmann::json;
  EXPECT_EQ(*JsonToInt(json(64), "d"), 64);
  EXPECT_EQ(*JsonToInt(json(-5), "d"), -5);
  EXPECT_EQ(*JsonToInt(json(2147483647), "d"), 2147483647);
  // The numbers that used to wrap: 2^31 to -2^31, 2^40 to 0.
  absl::StatusOr<int> vocab = JsonToInt(json::parse("2147483648"), "vocab_size");
  EXPECT_EQ(vocab.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(vocab.status().message(),
            "vocab_size: 2147483648 is out of range (at most 2147483647)");
  absl::StatusOr<int> width = JsonToInt(json::parse("1099511627776"), "hidden_size");
  EXPECT_EQ(width.status().message(),
            "hidden_size: 1099511627776 is out of range (at most 2147483647)");
  EXPECT_EQ(JsonToInt(json::parse("-3000000000"), "x").status().message(),
            "x: -3000000000 is out of range (-2147483648 to 2147483647)");
  EXPECT_EQ(JsonToInt(json(2.5), "x").status().message(), "x: expected a whole number, got 2.5");
  EXPECT_EQ(JsonToInt(json("8"), "x").status().message(), "x: expected a whole number, got \"8\"");
  const json object = json::parse(R"({"a": 3, "b": null, "c": 4294967296})");
  EXPECT_EQ(*JsonIntOr(object, "a", 7), 3);
  EXPECT_EQ(*JsonIntOr(object, "b", 7), 7);
  EXPECT_EQ(*JsonIntOr(object, "missing", 7), 7);
  EXPECT_FALSE(JsonIntOr(object, "c", 7).ok());
}

// 64-bit fields (a checkpoint's step, data position, RNG state): a number past 64 bits is kept by
// the parser as a double, whose cast to an integer would be undefined behaviour (found by fuzzing
// state.json); it is refused instead, as are fractions and negative unsigned values.
TEST(JsonIntTest, SixtyFourBitFieldsRefuseDoublesAndNegativeUnsigned) {
  using nlohmann::json;
  EXPECT_EQ(*JsonToWhole<int64_t>(json::parse("9223372036854775807"), "step"),
            int64_t{9223372036854775807});
  EXPECT_EQ(*JsonToWhole<uint64_t>(json::parse("18446744073709551615"), "seed"),
            uint64_t{18446744073709551615u});
  EXPECT_EQ(
      JsonToWhole<int64_t>(json::parse("33333333333333333330"), "skipped_steps").status().message(),
      "skipped_steps: expected a whole number, got 3.333333333333333e+19");
  EXPECT_EQ(JsonToWhole<int64_t>(json::parse("9223372036854775808"), "step").status().message(),
            "step: 9223372036854775808 is out of range (at most 9223372036854775807)");
  EXPECT_EQ(JsonToWhole<uint64_t>(json(-1), "seed").status().message(),
            "seed: -1 is out of range (0 to 18446744073709551615)");
  EXPECT_FALSE(JsonToWhole<int64_t>(json(1.0), "step").ok());
}

}  // namespace
}  // namespace mesa::base
