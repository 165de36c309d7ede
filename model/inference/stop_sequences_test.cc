#include "model/inference/stop_sequences.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mesa::model {
namespace {

using ::testing::HasSubstr;

struct Piece {
  int32_t token;
  std::string text;
};

// Feeds the pieces; returns the first match and the index of the piece that produced it.
std::pair<std::optional<StopMatch>, int> Feed(StopMatcher& matcher,
                                              const std::vector<Piece>& pieces) {
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::optional<StopMatch> m = matcher.Append(pieces[i].token, pieces[i].text);
    if (m) return {m, int(i)};
  }
  return {std::nullopt, -1};
}

TEST(StopMatcherTest, TokenSequenceSpanningAppends) {
  StopMatcher matcher = *StopMatcher::Create({.token_sequences = {{7, 8, 9}, {42}}});
  const auto [match, at] =
      Feed(matcher, {{1, "a"}, {7, "bb"}, {8, "c"}, {7, "dd"}, {8, "e"}, {9, "f"}, {42, "g"}});
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(at, 5);
  EXPECT_EQ(match->kind, StopMatch::Kind::kTokens);
  EXPECT_EQ(match->index, 0u);
  EXPECT_EQ(match->tokens_before, 3);      // 1, 7, 8
  EXPECT_EQ(match->text_bytes_before, 4);  // "abbc"
}

TEST(StopMatcherTest, SingleTokenStop) {
  StopMatcher matcher = *StopMatcher::Create({.token_sequences = {{7, 8, 9}, {42}}});
  const auto [match, at] = Feed(matcher, {{1, "a"}, {42, "xyz"}});
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(at, 1);
  EXPECT_EQ(match->index, 1u);
  EXPECT_EQ(match->tokens_before, 1);
  EXPECT_EQ(match->text_bytes_before, 1);
}

TEST(StopMatcherTest, StringSpanningSeveralTokens) {
  StopMatcher matcher = *StopMatcher::Create({.strings = {"\n\nUser:"}});
  const auto [match, at] =
      Feed(matcher, {{1, "Hello"}, {2, " world."}, {3, "\n"}, {4, "\nUs"}, {5, "er"}, {6, ": hi"}});
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(at, 5);
  EXPECT_EQ(match->kind, StopMatch::Kind::kText);
  EXPECT_EQ(match->index, 0u);
  EXPECT_EQ(match->text_bytes_before, 12);  // "Hello world."
  EXPECT_EQ(match->tokens_before, 2);
}

// A token whose text straddles the start of the match is not among the tokens before it.
TEST(StopMatcherTest, StraddlingTokenIsNotKept) {
  StopMatcher matcher = *StopMatcher::Create({.strings = {"END"}});
  const auto [match, at] = Feed(matcher, {{1, "abc"}, {2, "xyE"}, {3, "ND"}});
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(at, 2);
  EXPECT_EQ(match->text_bytes_before, 5);  // "abcxy"
  EXPECT_EQ(match->tokens_before, 1);
}

TEST(StopMatcherTest, EarliestStartingStringWins) {
  StopMatcher matcher = *StopMatcher::Create({.strings = {"cd", "bcde", "zz"}});
  const auto [match, at] = Feed(matcher, {{1, "ab"}, {2, "cdef"}});
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(match->index, 1u);
  EXPECT_EQ(match->text_bytes_before, 1);
  EXPECT_EQ(match->tokens_before, 0);
}

TEST(StopMatcherTest, MatchesAcrossAppendsAndAfterLongRuns) {
  // "zx" + "yz": "xyz" straddles the two appends and is reported at the second.
  StopMatcher fresh = *StopMatcher::Create({.strings = {"xyz"}});
  EXPECT_FALSE(fresh.Append(1, "zx").has_value());
  const std::optional<StopMatch> m = fresh.Append(1, "yz");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->text_bytes_before, 1);
  EXPECT_EQ(m->tokens_before, 0);
  // A sequence of tokens that never completes the stop never matches, however long.
  StopMatcher tokens = *StopMatcher::Create({.token_sequences = {{5, 5, 6}}});
  for (int i = 0; i < 10000; ++i) ASSERT_FALSE(tokens.Append(5, "a").has_value());
  const std::optional<StopMatch> t = tokens.Append(6, "b");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->tokens_before, 9998);
  EXPECT_EQ(t->text_bytes_before, 9998);
  EXPECT_EQ(tokens.tokens(), 10001);
  EXPECT_EQ(tokens.text_bytes(), 10001);
}

TEST(StopMatcherTest, StringAfterALongRunCountsTheTokensBefore) {
  StopMatcher matcher = *StopMatcher::Create({.strings = {"END", "x"}});
  for (int i = 0; i < 1000; ++i) ASSERT_FALSE(matcher.Append(i, i % 3 ? "ab" : "").has_value());
  const int64_t bytes = matcher.text_bytes();
  EXPECT_FALSE(matcher.Append(1, "E").has_value());
  const std::optional<StopMatch> m = matcher.Append(2, "ND!");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->index, 0u);
  EXPECT_EQ(m->text_bytes_before, bytes);
  EXPECT_EQ(m->tokens_before, 1000);
}

TEST(StopMatcherTest, TokenSequenceBeatsString) {
  StopMatcher matcher = *StopMatcher::Create({.token_sequences = {{9}}, .strings = {"q"}});
  const std::optional<StopMatch> m = matcher.Append(9, "q");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->kind, StopMatch::Kind::kTokens);
}

TEST(StopMatcherTest, RejectsEmptyStops) {
  absl::StatusOr<StopMatcher> a = StopMatcher::Create({.token_sequences = {{1}, {}}});
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("stop token sequence 1"));
  absl::StatusOr<StopMatcher> b = StopMatcher::Create({.strings = {""}});
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("stop string 0"));
  EXPECT_TRUE(StopMatcher::Create({}).ok());  // no stops: never matches
}

}  // namespace
}  // namespace mesa::model
