#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "model/tokenizer/gpt2_tokenizer.h"

namespace mesa::model {
namespace {

TEST(ByteTokenizerTest, RoundTripsAllBytes) {
  ByteTokenizer tok;
  std::string text;
  for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  text += "héllo wörld \xff\x00";
  std::vector<int32_t> ids = tok.Encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (int32_t id : ids) EXPECT_LT(id, 256);
  ids.insert(ids.begin() + 3, tok.bos_id());
  EXPECT_EQ(tok.Decode(ids), text);
  EXPECT_EQ(tok.bos_id(), 256);
  EXPECT_EQ(tok.vocab_size(), 257);
}

std::unique_ptr<Gpt2Tokenizer> LoadFixture() {
  auto tok = Gpt2Tokenizer::Load("model/testdata/encoder.json", "model/testdata/vocab.bpe");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

TEST(Gpt2TokenizerTest, PreTokenizesLikeGpt2) {
  auto tok = LoadFixture();
  ASSERT_NE(tok, nullptr);
  using V = std::vector<std::string>;
  EXPECT_EQ(tok->PreTokenize("Hello world's 42 cats!!"),
            (V{"Hello", " world", "'s", " 42", " cats", "!!"}));
  // \s+(?!\S): the last space of a run goes to the next word; trailing runs stay whole.
  EXPECT_EQ(tok->PreTokenize("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(tok->PreTokenize("a \n\nb  "), (V{"a", " \n", "\n", "b", "  "}));
  EXPECT_EQ(tok->PreTokenize("x\ny"), (V{"x", "\n", "y"}));
  EXPECT_EQ(tok->PreTokenize("naïve café"), (V{"naïve", " café"}));
  // Unicode whitespace counts as \s, as in Python: U+00A0 is not punctuation.
  EXPECT_EQ(tok->PreTokenize("a\u00a0\u00a0b"), (V{"a", "\u00a0", "\u00a0", "b"}));
  EXPECT_EQ(tok->PreTokenize("x \u3000y"), (V{"x", " ", "\u3000", "y"}));
}

TEST(Gpt2TokenizerTest, AppliesMergesByRank) {
  auto tok = LoadFixture();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 265);
  EXPECT_EQ(tok->bos_id(), 264);
  // the -> t he; " cat" -> Ġcat; " sat" -> Ġ s at; " in" -> Ġ in; " the" -> Ġthe; " hat" -> Ġ h at.
  const std::vector<int32_t> expected = {116, 257, 263, 32, 115, 262, 32, 260, 258, 32, 104, 262};
  EXPECT_EQ(tok->Encode("the cat sat in the hat"), expected);
  EXPECT_EQ(tok->Decode(expected), "the cat sat in the hat");
}

TEST(Gpt2TokenizerTest, RoundTripsArbitraryBytes) {
  auto tok = LoadFixture();
  ASSERT_NE(tok, nullptr);
  std::string text = "The cat\tin the hat, é \xe2\x82\xac 12\n\n  end";
  text.push_back('\xff');  // not UTF-8
  EXPECT_EQ(tok->Decode(tok->Encode(text)), text);
}

TEST(Gpt2TokenizerTest, RejectsBrokenFiles) {
  EXPECT_FALSE(Gpt2Tokenizer::FromStrings("[1, 2]", "").ok());
  EXPECT_FALSE(Gpt2Tokenizer::FromStrings("{\"a\": 0}", "").ok());  // byte tokens missing
  EXPECT_EQ(Gpt2Tokenizer::Load("/nonexistent/encoder.json", "x").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mesa::model
