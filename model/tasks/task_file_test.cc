#include "model/tasks/task_file.h"

#include <string>

#include "gtest/gtest.h"

namespace mesa::model {
namespace {

TEST(TaskFileTest, ParsesChoicesAndTargets) {
  auto examples = ParseTaskJsonl(
      "{\"context\": \"2 + 2 =\", \"choices\": [\" 4\", \" 5\"], \"gold\": 0}\n"
      "\n"
      "{\"context\": \"The cat sat on the\", \"target\": \" mat\"}\r\n",
      "t.jsonl");
  ASSERT_TRUE(examples.ok()) << examples.status();
  ASSERT_EQ(examples->size(), 2u);
  EXPECT_EQ((*examples)[0].line, 1);
  EXPECT_TRUE((*examples)[0].multiple_choice());
  EXPECT_EQ((*examples)[0].answer(), " 4");
  EXPECT_EQ((*examples)[1].line, 3);
  EXPECT_FALSE((*examples)[1].multiple_choice());
  EXPECT_EQ((*examples)[1].answer(), " mat");
}

void ExpectError(const std::string& second_line, const std::string& needle) {
  const std::string text = "{\"context\": \"a\", \"target\": \"b\"}\n" + second_line + "\n";
  auto examples = ParseTaskJsonl(text, "t.jsonl");
  ASSERT_FALSE(examples.ok()) << second_line;
  EXPECT_TRUE(absl::IsInvalidArgument(examples.status()));
  EXPECT_NE(examples.status().message().find("t.jsonl:2: " + needle), std::string::npos)
      << examples.status();
}

TEST(TaskFileTest, BadLinesAreNamed) {
  ExpectError("{\"context\": \"a\", \"choices\": [\"x\"", "not valid JSON");
  ExpectError("[1, 2]", "not a JSON object");
  ExpectError("{\"context\": \"a\xff\", \"target\": \"b\"}", "invalid UTF-8 at byte 15");
  ExpectError("{\"context\": \"a\", \"choices\": [], \"gold\": 0}", "choices: must be a non-empty");
  ExpectError("{\"context\": \"a\", \"choices\": [\"x\", \"\"], \"gold\": 0}",
              "choices[1]: must be a non-empty string");
  ExpectError("{\"context\": \"a\", \"choices\": [\"x\"], \"gold\": 1}", "gold: 1 is not an index");
  ExpectError("{\"context\": \"a\", \"choices\": [\"x\"]}", "gold: missing");
  ExpectError("{\"context\": \"a\", \"target\": \"\"}", "target: must be a non-empty string");
  ExpectError("{\"context\": \"a\", \"target\": \"b\", \"choices\": [\"x\"]}", "needs either");
  ExpectError("{\"context\": \"a\"}", "needs either");
  ExpectError("{\"target\": \"b\"}", "context: missing");
  ExpectError("{\"context\": \"a\", \"target\": \"b\", \"label\": 1}", "unknown key \"label\"");
}

TEST(TaskFileTest, EmptyFileIsAnError) {
  auto examples = ParseTaskJsonl("\n  \n", "t.jsonl");
  ASSERT_FALSE(examples.ok());
  EXPECT_NE(examples.status().message().find("no examples"), std::string::npos);
}

TEST(TaskFileTest, MissingFileIsAnError) {
  EXPECT_FALSE(LoadTaskFile("/nonexistent/task.jsonl").ok());
}

}  // namespace
}  // namespace mesa::model
