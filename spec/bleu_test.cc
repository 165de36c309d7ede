#include "spec/bleu.h"

#include <cmath>

#include "gtest/gtest.h"

namespace mesa::spec {
namespace {

using Tokens = std::vector<std::string>;

TEST(Tokenize13aTest, SplitsSymbolsAndSentencePunctuation) {
  EXPECT_EQ(Tokenize13a("Hello, world."), (Tokens{"Hello", ",", "world", "."}));
  EXPECT_EQ(Tokenize13a("&quot;Hi&quot; (x)"), (Tokens{"\"", "Hi", "\"", "(", "x", ")"}));
  EXPECT_EQ(Tokenize13a("a<b>c&amp;d"), (Tokens{"a", "<", "b", ">", "c", "&", "d"}));
  // The apostrophe and a dash inside words stay; a period between letters does not.
  EXPECT_EQ(Tokenize13a("don't re-enter e.g"), (Tokens{"don't", "re-enter", "e", ".", "g"}));
}

TEST(Tokenize13aTest, KeepsNumbersWhole) {
  EXPECT_EQ(Tokenize13a("It costs 3.5 million, 1,000 dollars."),
            (Tokens{"It", "costs", "3.5", "million", ",", "1,000", "dollars", "."}));
  // A dash after a digit is split off.
  EXPECT_EQ(Tokenize13a("pages 10-12"), (Tokens{"pages", "10", "-", "12"}));
}

TEST(Tokenize13aTest, ScansRulesLeftToRightWithoutOverlap) {
  // As Python's re.sub: the first period pairs with the a, the second is split off by the rule
  // of a period before a non-digit.
  EXPECT_EQ(Tokenize13a("a..b"), (Tokens{"a", ".", ".", "b"}));
  EXPECT_EQ(Tokenize13a("caf\xc3\xa9."), (Tokens{"caf\xc3\xa9", "."}));
}

TEST(Tokenize13aTest, LineBreaksMarkupAndUnicodeSpaces) {
  EXPECT_EQ(Tokenize13a("a-\nb c\nd<skipped>"), (Tokens{"ab", "c", "d"}));
  // No-break space, ideographic space and tab separate words as str.split() does.
  EXPECT_EQ(Tokenize13a("x\xc2\xa0y\xe3\x80\x80z\tw"), (Tokens{"x", "y", "z", "w"}));
  EXPECT_TRUE(Tokenize13a("  \n ").empty());
}

TEST(BleuTest, FixtureOfTheSpecification) {
  const BleuStats s = SegmentBleu("the cat sat on a mat", "the cat sat on the mat");
  EXPECT_EQ(s.hypothesis_length, 6);
  EXPECT_EQ(s.reference_length, 6);
  EXPECT_EQ(s.matches, (std::array<int64_t, 4>{5, 3, 2, 1}));
  EXPECT_EQ(s.totals, (std::array<int64_t, 4>{6, 5, 4, 3}));
  EXPECT_NEAR(CorpusBleu(s), 53.7284965911771, 1e-9);
  EXPECT_DOUBLE_EQ(CorpusBleu(SegmentBleu("the same words.", "the same words.")), 100.0);
}

TEST(BleuTest, ExpSmoothingBrevityPenaltyAndNoMatch) {
  // No 4-gram matches: the order counts 1 / (2 · 2).
  EXPECT_NEAR(CorpusBleu(SegmentBleu("a b c d e", "a b c x e")), 42.72870063962342, 1e-9);
  // Every n-gram right but two tokens short of six.
  EXPECT_NEAR(CorpusBleu(SegmentBleu("a b c d", "a b c d e f")), 60.653065971263345, 1e-9);
  // Fewer than four tokens: no 4-grams at all, so the score is 0 (sacreBLEU without
  // effective order).
  EXPECT_EQ(CorpusBleu(SegmentBleu("the cat", "the cat sat")), 0.0);
  EXPECT_EQ(CorpusBleu(SegmentBleu("x y z w", "a b c d")), 0.0);
  EXPECT_EQ(CorpusBleu(SegmentBleu("", "a b c d")), 0.0);
}

TEST(BleuTest, CorpusSumsStatisticsNotScores) {
  BleuStats sum = SegmentBleu("the cat sat on a mat", "the cat sat on the mat");
  sum += SegmentBleu("a b c d", "a b c d e f");
  EXPECT_EQ(sum.hypothesis_length, 10);
  EXPECT_EQ(sum.reference_length, 12);
  EXPECT_EQ(sum.matches, (std::array<int64_t, 4>{9, 6, 4, 2}));
  const double expected = std::exp(1.0 - 12.0 / 10.0) *
                          std::pow(0.9 * (6.0 / 8.0) * (4.0 / 6.0) * (2.0 / 4.0), 0.25) * 100;
  EXPECT_NEAR(CorpusBleu(sum), expected, 1e-9);
}

TEST(BleuTest, StatisticsRoundTripThroughAList) {
  const BleuStats s = SegmentBleu("the cat sat on a mat", "the cat sat on the mat");
  const std::optional<BleuStats> back = BleuStats::FromList(s.ToList());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->ToList(), s.ToList());
  EXPECT_FALSE(BleuStats::FromList({1, 2, 3}).has_value());
  std::vector<int64_t> more_matches_than_ngrams = s.ToList();
  more_matches_than_ngrams[2] = 7;
  EXPECT_FALSE(BleuStats::FromList(more_matches_than_ngrams).has_value());
}

TEST(BleuTest, BootstrapIsSeededAndVanishesOnIdenticalSegments) {
  std::vector<BleuStats> varied = {SegmentBleu("the cat sat on a mat", "the cat sat on the mat"),
                                   SegmentBleu("a b c d", "a b c d e f"),
                                   SegmentBleu("a b c d e", "a b c x e"),
                                   SegmentBleu("x y z w v", "a b c d e")};
  const double se = BootstrapBleuStderr(varied);
  EXPECT_GT(se, 0.0);
  EXPECT_EQ(BootstrapBleuStderr(varied), se);  // the same seed, the same draws
  EXPECT_NE(BootstrapBleuStderr(varied, kBleuBootstrapResamples, 7), se);
  const std::vector<BleuStats> same(5, varied[0]);
  EXPECT_NEAR(BootstrapBleuStderr(same), 0.0, 1e-9);
  EXPECT_EQ(BootstrapBleuStderr({varied[0]}), 0.0);
}

}  // namespace
}  // namespace mesa::spec
