#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
TEST(Smoke, Works) { EXPECT_EQ(absl::StrCat("a", 1), "a1"); }
