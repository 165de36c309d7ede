#include "model/tokenizer/hf_tokenizer.h"

#include "gtest/gtest.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "nlohmann/json.hpp"

namespace mesa::model {
namespace {

using nlohmann::json;

// GPT-2's bytes_to_unicode() stand-in of byte `b`, as UTF-8.
std::string ByteChar(int b) {
  int n = 0;
  for (int c = 0; c < b; ++c) {
    n += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
  }
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  const int cp = printable ? b : 256 + n;
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

// A tiny GPT-2-style tokenizer.json: byte b has id b; he=256 ll=257 hell=258 hello=259,
// <|endoftext|>=260 (an added special token).
json Fixture(bool pair_merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  json merges = json::array();
  for (auto [a, b] : std::vector<std::pair<std::string, std::string>>{
           {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}}) {
    merges.push_back(pair_merges ? json::array({a, b}) : json(a + " " + b));
  }
  return json{
      {"version", "1.0"},
      {"added_tokens",
       json::array({{{"id", 260}, {"content", "<|endoftext|>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

TEST(HfTokenizerTest, EncodesKnownIds) {
  for (bool pairs : {false, true}) {
    auto tok = HfTokenizerFromString(Fixture(pairs).dump(), "fixture.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ((*tok)->Encode("hello world"),
              (std::vector<int32_t>{259, ' ', 'w', 'o', 'r', 'l', 'd'}));
    EXPECT_EQ((*tok)->Encode("hellhe"), (std::vector<int32_t>{258, 256}));
    EXPECT_EQ((*tok)->vocab_size(), 261);
    EXPECT_EQ((*tok)->bos_id(), 260);
  }
}

TEST(HfTokenizerTest, SpecialTokensMatchBeforeBpe) {
  json fixture = Fixture(false);
  fixture["added_tokens"].push_back({{"id", 261}, {"content", "<|pad|>"}, {"special", true}});
  auto tok = HfTokenizerFromString(fixture.dump(), "fixture.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->Encode("hello<|endoftext|>hello<|pad|>"),
            (std::vector<int32_t>{259, 260, 259, 261}));
  // The BOS decodes to nothing, other added tokens to their content.
  EXPECT_EQ((*tok)->Decode({259, 260, 259, 261}), "hellohello<|pad|>");
}

TEST(HfTokenizerTest, RoundTrips) {
  auto tok = HfTokenizerFromString(Fixture(true).dump(), "fixture.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::string text = "héllo   wörld\n\n\t hello!? 12345 \xe2\x80\x83x";
  for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  EXPECT_EQ((*tok)->Decode((*tok)->Encode(text)), text);
}

TEST(HfTokenizerTest, Llama3SplitRegex) {
  json fixture = Fixture(false);
  fixture["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"},
                     {"pattern",
                      {{"Regex",
                        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  fixture["model"]["ignore_merges"] = true;
  auto tok = HfTokenizerFromString(fixture.dump(), "fixture.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  using V = std::vector<std::string>;
  EXPECT_EQ((*tok)->PreTokenize("Hello  world\n\n  123456 I'LL"),
            (V{"Hello", " ", " world", "\n\n", " ", " ", "123", "456", " I", "'LL"}));
  EXPECT_EQ((*tok)->Encode("hello"), (std::vector<int32_t>{259}));
}

TEST(HfTokenizerTest, RefusesOtherModelTypes) {
  for (const char* type : {"WordPiece", "Unigram"}) {
    json fixture = Fixture(false);
    fixture["model"]["type"] = type;
    auto tok = HfTokenizerFromString(fixture.dump(), "bert/tokenizer.json");
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find(type), std::string::npos) << tok.status();
    EXPECT_NE(tok.status().message().find("bert/tokenizer.json: model.type"), std::string::npos)
        << tok.status();
  }
}

TEST(HfTokenizerTest, RefusesUnsupportedLookaround) {
  json fixture = Fixture(false);
  fixture["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "\\p{L}+(?=\\d)|."}}}, {"behavior", "Isolated"}};
  auto tok = HfTokenizerFromString(fixture.dump(), "x.json");
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("lookaround"), std::string::npos) << tok.status();
}

// The byte tokenizer as a tokenizer.json (what mesa-export writes for byte-level models) encodes
// and decodes every byte as ByteTokenizer does, with the same BOS and vocabulary.
TEST(HfTokenizerTest, ByteTokenizerAsTokenizerJsonIsTheByteTokenizer) {
  auto tok = HfTokenizerFromString(ByteTokenizer::HfTokenizerJson(), "byte.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  ByteTokenizer bytes;
  EXPECT_EQ((*tok)->bos_id(), bytes.bos_id());
  EXPECT_EQ((*tok)->vocab_size(), bytes.vocab_size());
  std::string text = "Hello  world\n\n 123 I'LL \xc3\xa9";
  for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  EXPECT_EQ((*tok)->Encode(text), bytes.Encode(text));
  EXPECT_EQ((*tok)->Decode(bytes.Encode(text)), text);
}

TEST(HfTokenizerTest, MissingFileIsAnError) {
  EXPECT_FALSE(LoadHfTokenizer("/nonexistent/tokenizer.json").ok());
}

}  // namespace
}  // namespace mesa::model
