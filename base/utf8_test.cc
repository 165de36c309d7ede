#include "base/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace mesa::base {
namespace {

TEST(Utf8, ValidTextIsUnchanged) {
  for (const std::string& text : {std::string(""), std::string("plain ascii"),
                                  std::string("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80")}) {
    EXPECT_TRUE(IsValidUtf8(text)) << text;
    EXPECT_EQ(SanitizeUtf8(text), text);
  }
}

TEST(Utf8, InvalidSequencesBecomeReplacementCharacters) {
  // A Latin-1 file name, a lone continuation byte, an overlong '/', a surrogate, a truncated
  // 3-byte sequence at the end, and a code point past U+10FFFF.
  const std::string latin1 = "caf\xE9.bin";
  EXPECT_FALSE(IsValidUtf8(latin1));
  EXPECT_EQ(SanitizeUtf8(latin1), "caf\xEF\xBF\xBD.bin");
  for (const std::string& bad :
       {std::string("\x80"), std::string("\xC0\xAF"), std::string("\xED\xA0\x80"),
        std::string("ab\xE2\x82"), std::string("\xF4\x90\x80\x80")}) {
    EXPECT_FALSE(IsValidUtf8(bad));
    const std::string fixed = SanitizeUtf8(bad);
    EXPECT_TRUE(IsValidUtf8(fixed)) << fixed;
    EXPECT_NE(fixed.find("\xEF\xBF\xBD"), std::string::npos);
  }
}

TEST(Utf8, FirstInvalidByte) {
  EXPECT_EQ(FirstInvalidUtf8("abc"), 3u);
  EXPECT_EQ(FirstInvalidUtf8("ab\xE9cd"), 2u);
  EXPECT_EQ(FirstInvalidUtf8("\xE2\x82\xAC\xFF"), 3u);
}

TEST(Utf8, PrefixNeverSplitsACharacter) {
  const std::string text =
      "a\xE2\x82\xAC"
      "b";  // a € b
  EXPECT_EQ(Utf8PrefixLength(text, 10), text.size());
  EXPECT_EQ(Utf8PrefixLength(text, 1), 1u);
  EXPECT_EQ(Utf8PrefixLength(text, 2), 1u);  // would cut the euro sign
  EXPECT_EQ(Utf8PrefixLength(text, 3), 1u);
  EXPECT_EQ(Utf8PrefixLength(text, 4), 4u);
  EXPECT_TRUE(IsValidUtf8(text.substr(0, Utf8PrefixLength(text, 3))));
}

TEST(Utf8Test, UnicodeSpaceAsPythonStrips) {
  // "a b" then TAB, NBSP (C2 A0), IDEOGRAPHIC SPACE (E3 80 80), LF: all whitespace to Python.
  const std::string text = "a b\t\xC2\xA0\xE3\x80\x80\n";
  EXPECT_EQ(TrailingUnicodeSpaceStart(text), 3u);
  EXPECT_EQ(StripUnicodeSpace("\xE2\x80\x83 x y\xC2\x85"), "x y");  // EM SPACE, NEL
  EXPECT_EQ(TrailingUnicodeSpaceStart("abc"), 3u);
  EXPECT_EQ(TrailingUnicodeSpaceStart("   "), 0u);
  // Not whitespace: ZERO WIDTH SPACE (U+200B) and the letter é.
  EXPECT_EQ(TrailingUnicodeSpaceStart("x\xE2\x80\x8B"), 4u);
  EXPECT_EQ(StripUnicodeSpace(" caf\xC3\xA9 "), "caf\xC3\xA9");
}

}  // namespace
}  // namespace mesa::base
