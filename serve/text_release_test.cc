#include "serve/text_release.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mesa::serve {
namespace {

// Feeds `pieces` one token each and returns what was shown, piece by piece.
std::vector<std::string> Shown(TextRelease& release, const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  int32_t id = 0;
  for (const std::string& p : pieces) {
    out.push_back(release.Append(id++, p, -1.0).text);
    if (release.stopped()) break;
  }
  return out;
}

TEST(TextReleaseTest, HoldsTextThatMayBeginAStopString) {
  auto release = TextRelease::Create({"\n\nQ:"});
  ASSERT_TRUE(release.ok());
  // "\n" could begin the stop string: held until "x" shows it cannot.
  EXPECT_EQ(Shown(*release, {"a", "\n", "x", "\n\n", "Q", ":"}),
            (std::vector<std::string>{"a", "", "\nx", "", "", ""}));
  EXPECT_TRUE(release->stopped());
  EXPECT_EQ(release->text(), "a\nx");
  EXPECT_EQ(release->tokens(), (std::vector<int32_t>{0, 1, 2}));
}

TEST(TextReleaseTest, AStopStringInsideOneTokenCutsItsText) {
  auto release = TextRelease::Create({"END"});
  ASSERT_TRUE(release.ok());
  Released a = release->Append(7, "abc", -0.5);
  EXPECT_EQ(a.text, "abc");
  Released b = release->Append(8, "xENDyz", -0.25);
  EXPECT_TRUE(release->stopped());
  EXPECT_EQ(b.text, "x");
  // The token that holds the start of the stop string is not part of the completion.
  EXPECT_TRUE(b.tokens.empty());
  EXPECT_EQ(release->text(), "abcx");
  EXPECT_TRUE(release->Append(9, "more", 0).text.empty());  // nothing after a stop
}

TEST(TextReleaseTest, HoldsIncompleteUtf8AndFlushesAtTheEnd) {
  auto release = TextRelease::Create({});
  ASSERT_TRUE(release.ok());
  const std::string euro = "\xE2\x82\xAC";  // three bytes, one token each
  Released a = release->Append(1, euro.substr(0, 1), -1);
  Released b = release->Append(2, euro.substr(1, 1), -1);
  Released c = release->Append(3, euro.substr(2, 1), -1);
  EXPECT_EQ(a.text, "");
  EXPECT_EQ(b.text, "");
  EXPECT_EQ(c.text, euro);
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{1, 2, 3}));
  Released d = release->Append(4, "\xF0\x9F", -1);  // half of a 4-byte character
  EXPECT_EQ(d.text, "");
  Released rest = release->Flush();
  EXPECT_EQ(rest.text, "\xF0\x9F");
  EXPECT_EQ(rest.tokens, (std::vector<int32_t>{4}));
}

TEST(TextReleaseTest, IncompleteUtf8Tail) {
  EXPECT_EQ(IncompleteUtf8Tail(""), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("abc"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xC3"), 1u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xC3\xA9"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(IncompleteUtf8Tail("\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("\x80\x80"), 0u);
}

TEST(TextReleaseTest, RefusesAnEmptyStopString) { EXPECT_FALSE(TextRelease::Create({""}).ok()); }

}  // namespace
}  // namespace mesa::serve
