#include "model/tasks/niah.h"

#include <cctype>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "spec/tasks.h"

namespace mesa::model {
namespace {

constexpr char kText[] =
    "The harbour was quiet that morning. Gulls circled above the boats! Who would come first? "
    "A fisherman mended his net by the wall. The tide turned slowly in the bay.";

int Count(absl::string_view text, absl::string_view needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != text.npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

bool IsNumber(const std::string& v) {
  return v.size() == 7 && v[0] != '0' &&
         std::all_of(v.begin(), v.end(), [](char c) { return std::isdigit(c); });
}

bool IsUuid(const std::string& v) {
  if (v.size() != 36 || v[14] != '4' || std::string("89ab").find(v[19]) == std::string::npos) {
    return false;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (v[i] == '-')) return false;
    if (!dash && std::string("0123456789abcdef").find(v[i]) == std::string::npos) return false;
  }
  return true;
}

bool IsWord(const std::string& v) {
  const std::vector<std::string> parts = absl::StrSplit(v, '-');
  if (parts.size() != 2) return false;
  for (const std::string& p : parts) {
    if (p.size() != 6) return false;
    for (size_t i = 0; i < 6; ++i) {
      const bool vowel = std::string("aeiou").find(p[i]) != std::string::npos;
      if (vowel != (i % 2 == 1)) return false;
      if (!vowel && std::string("bdfgklmnprstvz").find(p[i]) == std::string::npos) return false;
    }
  }
  return true;
}

NiahConfig Config(const std::string& variant, int length) {
  NiahConfig c;
  c.variant = variant;
  c.length = length;
  c.seed = 7;
  c.haystack_text = kText;
  return c;
}

TEST(NiahTest, EveryVariantFitsAndHoldsEachNeedleOnce) {
  ByteTokenizer bytes;
  for (const std::string& variant : NiahVariants()) {
    for (int length : {1024, 2048}) {
      SCOPED_TRACE(variant + " at " + std::to_string(length));
      const NiahConfig config = Config(variant, length);
      absl::StatusOr<int> units = NiahUnits(config, bytes);
      ASSERT_TRUE(units.ok()) << units.status();
      EXPECT_GT(*units, 0);
      for (int64_t index : {0, 1, 5}) {
        absl::StatusOr<NiahItem> item = GenerateNiahItem(config, bytes, *units, index);
        ASSERT_TRUE(item.ok()) << item.status();
        // BOS, the prompt and the completion fit the length.
        EXPECT_LE(1 + bytes.Encode(item->prompt).size() + config.max_new_tokens, length);
        const int asked = variant == "multiquery" ? 4 : 1;
        ASSERT_EQ(item->keys.size(), static_cast<size_t>(asked));
        EXPECT_EQ(item->expected.size(),
                  variant == "multivalue" || variant == "multiquery" ? 4u : 1u);
        for (const std::string& value : item->expected) {
          EXPECT_EQ(Count(item->prompt, value), 1) << value;  // in its needle only
          if (variant == "single_3" || variant == "multikey_3") {
            EXPECT_TRUE(IsUuid(value)) << value;
          } else {
            EXPECT_TRUE(IsNumber(value)) << value;
          }
        }
        for (const std::string& key : item->keys) {
          // Its needle(s), the question and the answer prefix: distractors never reuse it.
          const int needles = variant == "multivalue" ? 4 : 1;
          EXPECT_EQ(Count(item->prompt, key), needles + 2) << key;
          EXPECT_TRUE(variant == "multikey_3" ? IsUuid(key) : IsWord(key)) << key;
        }
        EXPECT_TRUE(absl::StartsWith(item->prompt, "Some special "));
        EXPECT_TRUE(
            absl::EndsWith(item->prompt, asked > 1 || variant == "multivalue" ? " are" : " is"));
      }
      // The size is the largest that fits item 0.
      absl::StatusOr<NiahItem> bigger = GenerateNiahItem(config, bytes, *units + 1, 0);
      ASSERT_TRUE(bigger.ok());
      EXPECT_LE(bigger->units, *units);
    }
  }
}

TEST(NiahTest, VariantsAreTheValidatorsList) {
  EXPECT_EQ(NiahVariants(), std::vector<std::string>(std::begin(spec::kNiahVariants),
                                                     std::end(spec::kNiahVariants)));
}

TEST(NiahTest, ItemsAreReproducibleAndDistinct) {
  ByteTokenizer bytes;
  const NiahConfig config = Config("multikey_2", 4096);
  absl::StatusOr<NiahItem> a = GenerateNiahItem(config, bytes, 20, 3);
  absl::StatusOr<NiahItem> b = GenerateNiahItem(config, bytes, 20, 3);
  absl::StatusOr<NiahItem> c = GenerateNiahItem(config, bytes, 20, 4);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->prompt, b->prompt);
  EXPECT_EQ(a->expected, b->expected);
  EXPECT_NE(a->prompt, c->prompt);
  // Twenty distractor needles and the real one.
  EXPECT_EQ(Count(a->prompt, "Remember this: the number for "), 21);
  NiahConfig other_seed = config;
  other_seed.seed = 8;
  EXPECT_NE(GenerateNiahItem(other_seed, bytes, 20, 3)->prompt, a->prompt);
}

TEST(NiahTest, NeedleSitsAtItsDrawnDepth) {
  ByteTokenizer bytes;
  const NiahConfig config = Config("single_1", 8192);
  for (int64_t index = 0; index < 12; ++index) {
    absl::StatusOr<NiahItem> item = GenerateNiahItem(config, bytes, 30, index);
    ASSERT_TRUE(item.ok());
    // Lines: the header, 30 filler lines with the needle among them, the question.
    const std::vector<std::string> lines = absl::StrSplit(item->prompt, '\n');
    ASSERT_EQ(lines.size(), 33u);
    int at = -1;
    for (size_t i = 1; i + 1 < lines.size(); ++i) {
      if (absl::StartsWith(lines[i], "Remember this:")) at = static_cast<int>(i) - 1;
    }
    EXPECT_EQ(at, 30 * item->first_depth / 100) << "depth " << item->first_depth;
  }
}

TEST(NiahTest, BadConfigurationsAreNamed) {
  ByteTokenizer bytes;
  EXPECT_TRUE(absl::StrContains(NiahUnits(Config("single_9", 1024), bytes).status().message(),
                                "unknown \"single_9\""));
  NiahConfig no_text = Config("single_2", 1024);
  no_text.haystack_text.clear();
  EXPECT_TRUE(
      absl::StrContains(NiahUnits(no_text, bytes).status().message(), "needs haystack text"));
  EXPECT_TRUE(NiahUnits(Config("single_1", 64), bytes).status().code() ==
              absl::StatusCode::kFailedPrecondition);
}

// RULER's scoring, on the spec's fixtures.
TEST(NiahTest, ScoresAsRuler) {
  EXPECT_EQ(ScoreNiah(" 4811207.\nThe", {"4811207"}).match_all, 1);
  const NiahMatch three =
      ScoreNiah("1111111, 2222222 and 3333333", {"1111111", "2222222", "3333333", "4444444"});
  EXPECT_DOUBLE_EQ(three.match_all, 0.75);
  EXPECT_TRUE(three.match_any);
  EXPECT_EQ(ScoreNiah("It is 0A1B2C3D-0000-4000-8000-000000000000",
                      {"0a1b2c3d-0000-4000-8000-000000000000"})
                .match_all,
            1);
  EXPECT_FALSE(ScoreNiah("nothing", {"1234567"}).match_any);
  // Control characters become newlines: a value split by one is not found.
  EXPECT_EQ(ScoreNiah("48\x01"
                      "11207",
                      {"4811207"})
                .match_all,
            0);
}

}  // namespace
}  // namespace mesa::model
