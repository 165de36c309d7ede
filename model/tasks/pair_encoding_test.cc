#include "model/tasks/pair_encoding.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "model/tokenizer/byte_tokenizer.h"

namespace mesa::model {
namespace {

std::vector<int32_t> Bytes(const std::string& text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

// A tokenizer that merges "ab" into one token (id 300) and is otherwise bytes: enough to see
// the concatenation merge across the context's end.
class MergingTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> Encode(absl::string_view text) const override {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.substr(i, 2) == "ab") {
        ids.push_back(300);
        ++i;
      } else {
        ids.push_back(static_cast<unsigned char>(text[i]));
      }
    }
    return ids;
  }
  std::string Decode(const std::vector<int32_t>&) const override { return ""; }
  int32_t bos_id() const override { return 256; }
  int32_t vocab_size() const override { return 301; }
};

TEST(PairEncodingTest, TrailingSpaceMovesToTheContinuation) {
  ByteTokenizer bytes;
  const EncodedPair pair = EncodePair(bytes, "Answer: ", "4");
  EXPECT_EQ(pair.context, Bytes("Answer:"));
  EXPECT_EQ(pair.continuation, Bytes(" 4"));  // T = 2
  EXPECT_FALSE(pair.boundary_merge);
  // Unicode whitespace moves too (NBSP, then a newline).
  const EncodedPair nbsp = EncodePair(bytes, "x\xC2\xA0\n", "y");
  EXPECT_EQ(nbsp.context, Bytes("x"));
  EXPECT_EQ(nbsp.continuation, Bytes("\xC2\xA0\ny"));
  // An empty context: the continuation alone (the row's BOS is its context).
  const EncodedPair empty = EncodePair(bytes, "", " z");
  EXPECT_TRUE(empty.context.empty());
  EXPECT_EQ(empty.continuation, Bytes(" z"));
}

TEST(PairEncodingTest, CutByTheContextsTokenCount) {
  MergingTokenizer merging;
  // "xa" + "b": the whole is [x, ab], the context alone [x, a]: the cut after 2 tokens leaves
  // nothing, and the merge is reported.
  const EncodedPair merged = EncodePair(merging, "xa", "bc");
  EXPECT_TRUE(merged.boundary_merge);
  EXPECT_EQ(merged.context, (std::vector<int32_t>{'x', 'a'}));
  EXPECT_EQ(merged.continuation, (std::vector<int32_t>{'c'}));  // whole = [x, ab, c]
  const EncodedPair clean = EncodePair(merging, "ab", "ab");
  EXPECT_FALSE(clean.boundary_merge);
  EXPECT_EQ(clean.continuation, (std::vector<int32_t>{300}));
}

TEST(PairEncodingTest, LeftTruncationKeepsBosAndTheLastTokens) {
  ByteTokenizer bytes;
  const int32_t bos = ByteTokenizer::kBos;
  const EncodedPair pair = EncodePair(bytes, "abcdefghij", " k");
  absl::StatusOr<ScoredRow> row = LayOutRow(pair, bos, true, 8, Truncation::kLeft);
  ASSERT_TRUE(row.ok()) << row.status();
  std::vector<int32_t> expected = {bos};
  for (int32_t t : Bytes("efghij k")) expected.push_back(t);
  EXPECT_EQ(row->sequence, expected);
  EXPECT_TRUE(row->truncated);
  EXPECT_EQ(row->first_target, 6);  // the input "j" predicts " "
  absl::StatusOr<ScoredRow> failed = LayOutRow(pair, bos, true, 8, Truncation::kFail);
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(absl::StrContains(failed.status().message(), "13 tokens")) << failed.status();
  // A row that fits is whole.
  absl::StatusOr<ScoredRow> fits = LayOutRow(pair, bos, true, 12, Truncation::kFail);
  ASSERT_TRUE(fits.ok());
  EXPECT_FALSE(fits->truncated);
  EXPECT_EQ(fits->sequence.size(), 13u);
  // A continuation of the window's length is skipped, not cut.
  absl::StatusOr<ScoredRow> skipped =
      LayOutRow(EncodePair(bytes, "a", " bcdefgh"), bos, true, 8, Truncation::kLeft);
  ASSERT_TRUE(skipped.ok());
  EXPECT_TRUE(skipped->skipped);
  // Without BOS (parity runs) for a non-empty context; an empty one keeps it.
  absl::StatusOr<ScoredRow> bare =
      LayOutRow(EncodePair(bytes, "ab", "c"), bos, false, 8, Truncation::kLeft);
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->sequence, Bytes("abc"));
  EXPECT_EQ(bare->first_target, 1);
  absl::StatusOr<ScoredRow> only =
      LayOutRow(EncodePair(bytes, "", "c"), bos, false, 8, Truncation::kLeft);
  ASSERT_TRUE(only.ok());
  EXPECT_EQ(only->sequence, (std::vector<int32_t>{bos, 'c'}));
  // A continuation that the merge emptied is an error.
  MergingTokenizer merging;
  EXPECT_FALSE(LayOutRow(EncodePair(merging, "xa", "b"), 256, true, 8, Truncation::kLeft).ok());
}

}  // namespace
}  // namespace mesa::model
