#include "coordinator/validation.h"

#include <string>

#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

TEST(ValidationTest, Identifiers) {
  EXPECT_TRUE(IsValidIdentifier("node-1.example_2"));
  EXPECT_TRUE(IsValidIdentifier(std::string(128, 'a')));
  EXPECT_FALSE(IsValidIdentifier(std::string(129, 'a')));
  EXPECT_FALSE(IsValidIdentifier(""));
  EXPECT_FALSE(IsValidIdentifier("a b"));
  EXPECT_FALSE(IsValidIdentifier("a/b"));
}

}  // namespace
}  // namespace mesa::coordinator
