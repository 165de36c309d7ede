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
  EXPECT_EQ((*examples)[0].Demonstration(), "2 + 2 = 4");
  EXPECT_FALSE((*examples)[0].delimiter.has_value());
  EXPECT_EQ((*examples)[1].line, 3);
  EXPECT_FALSE((*examples)[1].multiple_choice());
  EXPECT_EQ((*examples)[1].form, TaskForm::kTarget);
  EXPECT_EQ((*examples)[1].RequestContinuation(0), " mat");
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
  ExpectError("{\"context\": \"a\", \"target\": \"b\", \"choices\": [\"x\"]}",
              "needs exactly one of");
  ExpectError("{\"context\": \"a\"}", "needs exactly one of");
  ExpectError("{\"target\": \"b\"}", "context: missing");
  ExpectError("{\"context\": \"a\", \"target\": \"b\", \"label\": 1}", "unknown key \"label\"");
}

TEST(TaskFileTest, ParsesTheDelimitedForms) {
  auto examples = ParseTaskJsonl(
      R"({"id": "q1", "context": "Q:", "choices": ["a", "b", "c"], "gold": [0, 2], "delimiter": " "})"
      "\n"
      R"({"id": 7, "contexts": ["x because A", "x because B"], "continuation": "was cold.", "gold": 1, "delimiter": " "})"
      "\n"
      R"({"context": "the lamp", "target": "lit", "score": "greedy", "delimiter": " "})",
      "t.jsonl");
  ASSERT_TRUE(examples.ok()) << examples.status();
  const TaskExample& mc = (*examples)[0];
  EXPECT_EQ(mc.id, "q1");
  EXPECT_EQ(mc.gold, (std::vector<int>{0, 2}));
  EXPECT_EQ(mc.RequestContinuation(2), " c");
  EXPECT_EQ(mc.NormText(2), "c");
  const TaskExample& multi = (*examples)[1];
  EXPECT_EQ(multi.id, "7");
  EXPECT_EQ(multi.form, TaskForm::kMultiContext);
  EXPECT_EQ(multi.num_requests(), 2);
  EXPECT_EQ(multi.RequestContext(1), "x because B");
  EXPECT_EQ(multi.RequestContinuation(1), " was cold.");
  EXPECT_EQ(multi.Demonstration(), "x because B was cold.");
  const TaskExample& cloze = (*examples)[2];
  EXPECT_EQ(cloze.form, TaskForm::kCloze);
  EXPECT_EQ(cloze.RequestContinuation(0), " lit");
}

TEST(TaskFileTest, ParsesGenerationItems) {
  auto examples = ParseTaskJsonl(
      R"({"prompt": "The capital of France is", "answers": ["Paris"], "max_new_tokens": 8, "stop": ["\n", "."]})"
      "\n"
      R"({"prompt": "Unanswerable:", "answers": []})",
      "t.jsonl");
  ASSERT_TRUE(examples.ok()) << examples.status();
  const TaskExample& g = (*examples)[0];
  EXPECT_EQ(g.form, TaskForm::kGeneration);
  EXPECT_EQ(g.context, "The capital of France is");
  EXPECT_EQ(g.answers, std::vector<std::string>{"Paris"});
  EXPECT_EQ(g.max_new_tokens, 8);
  ASSERT_TRUE(g.stop.has_value());
  EXPECT_EQ(*g.stop, (std::vector<std::string>{"\n", "."}));
  EXPECT_EQ(g.num_requests(), 0);
  EXPECT_TRUE((*examples)[1].answers.empty());
  EXPECT_FALSE((*examples)[1].stop.has_value());
  ExpectError(R"({"prompt": "p"})", "answers: missing or not an array");
  ExpectError(R"({"prompt": "", "answers": []})", "prompt: must be a non-empty string");
  ExpectError(R"({"prompt": "p", "answers": [], "max_new_tokens": 0})",
              "max_new_tokens: must be an integer from 1");
  ExpectError(R"({"prompt": "p", "answers": [], "stop": [""]})", "stop: every entry must be");
  ExpectError(R"({"prompt": "p", "answers": [], "context": "c"})", "context: not with prompt");
  ExpectError(R"({"context": "c", "target": "t", "answers": []})", "answers: only with prompt");
}

TEST(TaskFileTest, BadDelimitedFormsAreNamed) {
  ExpectError(R"({"contexts": ["a"], "continuation": "b"})", "gold: missing");
  ExpectError(R"({"contexts": ["a"], "continuation": "b", "gold": 0, "context": "c"})",
              "context: not with contexts");
  ExpectError(R"({"context": "a", "choices": ["x", "y"], "gold": [0, 0]})",
              "gold: 0 is listed twice");
  ExpectError(R"({"context": "a", "choices": ["x"], "gold": []})", "gold: must be an integer or");
  ExpectError(R"({"context": "a", "target": "b", "score": "exact"})", "score: \"exact\" is not");
  ExpectError(R"({"context": "a", "choices": ["x"], "gold": 0, "score": "greedy"})",
              "score: only with target");
  ExpectError(R"({"context": "a", "choices": ["x"], "gold": 0, "delimiter": 1})",
              "delimiter: must be a string");
  ExpectError(R"({"id": [1], "context": "a", "target": "b"})", "id: must be a string or");
}

TEST(TaskFileTest, EmptyFileIsAnError) {
  auto examples = ParseTaskJsonl("\n  \n", "t.jsonl");
  ASSERT_FALSE(examples.ok());
  EXPECT_NE(examples.status().message().find("no items"), std::string::npos);
}

TEST(TaskFileTest, MissingFileIsAnError) {
  EXPECT_FALSE(LoadTaskFile("/nonexistent/task.jsonl").ok());
}

}  // namespace
}  // namespace mesa::model
