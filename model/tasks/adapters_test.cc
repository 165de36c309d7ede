#include "model/tasks/adapters.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "spec/tasks.h"

namespace mesa::model {
namespace {

// One upstream row through `adapter`.
TaskExample Render(const std::string& adapter, const std::string& row) {
  absl::StatusOr<std::vector<JsonlRow>> rows = ParseJsonlObjects(row, "fixture");
  EXPECT_TRUE(rows.ok()) << rows.status();
  absl::StatusOr<std::vector<TaskExample>> items = AdaptRows(adapter, *rows, "fixture");
  EXPECT_TRUE(items.ok()) << items.status();
  EXPECT_EQ(items->size(), 1u);
  return items->front();
}

std::string Error(const std::string& adapter, const std::string& row) {
  absl::StatusOr<std::vector<JsonlRow>> rows = ParseJsonlObjects(row, "fixture");
  EXPECT_TRUE(rows.ok()) << rows.status();
  absl::StatusOr<std::vector<TaskExample>> items = AdaptRows(adapter, *rows, "fixture");
  EXPECT_FALSE(items.ok());
  return std::string(items.status().message());
}

// The requests of an item: (context, continuation) pairs.
std::vector<std::pair<std::string, std::string>> Requests(const TaskExample& e) {
  std::vector<std::pair<std::string, std::string>> out;
  for (int r = 0; r < e.num_requests(); ++r) {
    out.emplace_back(e.RequestContext(r), e.RequestContinuation(r));
  }
  return out;
}

// The fixtures of the benchmark pack's specification: upstream rows and their expected renders.
TEST(AdaptersTest, Lambada) {
  const TaskExample e = Render(
      "lambada",
      R"({"text": "The keeper climbed to the lamp each night. When he retired, the village gave the key to his daughter, who had watched him light the lamp"})");
  EXPECT_EQ(e.form, TaskForm::kCloze);
  EXPECT_TRUE(absl::EndsWith(e.context, "who had watched him light the"));
  EXPECT_EQ(e.RequestContinuation(0), " lamp");
  EXPECT_EQ(e.NormText(0), "lamp");
}

TEST(AdaptersTest, Hellaswag) {
  const TaskExample e = Render(
      "hellaswag",
      R"({"activity_label": "Making tea", "ctx_a": "A woman fills a kettle with water.", "ctx_b": "she SWITCHES it on", "endings": ["and waits [step] for the water to boil.", "and throws it out of the window.", "and paints the kettle green.", "and sings to the cups."], "label": "0"})");
  EXPECT_EQ(e.context, "Making tea: A woman fills a kettle with water. She switches it on");
  EXPECT_EQ(e.RequestContinuation(0), " and waits for the water to boil.");
  EXPECT_EQ(e.RequestContinuation(3), " and sings to the cups.");
  EXPECT_EQ(e.gold, std::vector<int>{0});
  EXPECT_EQ(HellaswagClean(" A [title] B [x] [y]C  [open\n] D "), "A. B C [open\n] D");
}

TEST(AdaptersTest, Piqa) {
  const TaskExample e = Render(
      "piqa",
      R"({"goal": "Keep a paper stack from blowing away", "sol1": "Put a stone on top of it.", "sol2": "Put a feather on top of it.", "label": 0})");
  EXPECT_EQ(
      Requests(e),
      (std::vector<std::pair<std::string, std::string>>{
          {"Question: Keep a paper stack from blowing away\nAnswer:", " Put a stone on top of it."},
          {"Question: Keep a paper stack from blowing away\nAnswer:",
           " Put a feather on top of it."}}));
  EXPECT_EQ(e.gold, std::vector<int>{0});
}

TEST(AdaptersTest, Arc) {
  const TaskExample e = Render(
      "arc",
      R"({"question": "Which of these is a liquid at room temperature?", "choices": {"text": ["iron", "water", "salt"], "label": ["1", "2", "3"]}, "answerKey": "2"})");
  EXPECT_EQ(e.context, "Question: Which of these is a liquid at room temperature?\nAnswer:");
  EXPECT_EQ(e.RequestContinuation(1), " water");
  EXPECT_EQ(e.gold, std::vector<int>{1});
  EXPECT_TRUE(absl::StrContains(
      Error("arc",
            R"({"question": "q", "choices": {"text": ["a"], "label": ["A"]}, "answerKey": "E"})"),
      "fixture:1: arc: answerKey: \"E\" is not one of [A]"));
}

TEST(AdaptersTest, Winogrande) {
  const TaskExample e = Render(
      "winogrande",
      R"({"sentence": "Maria gave her coat to Julia because _ was cold.", "option1": "Maria", "option2": "Julia", "answer": "2"})");
  EXPECT_EQ(e.form, TaskForm::kMultiContext);
  EXPECT_EQ(Requests(e), (std::vector<std::pair<std::string, std::string>>{
                             {"Maria gave her coat to Julia because Maria", " was cold."},
                             {"Maria gave her coat to Julia because Julia", " was cold."}}));
  EXPECT_EQ(e.gold, std::vector<int>{1});
}

TEST(AdaptersTest, Siqa) {
  const TaskExample e = Render(
      "siqa",
      R"({"context": "Sam left his lunch at home.", "question": "How would Sam feel at noon?", "answerA": "hungry", "answerB": "sleepy", "answerC": "proud", "label": "1"})");
  EXPECT_EQ(e.context, "Q: Sam left his lunch at home. How would Sam feel at noon?\nA:");
  EXPECT_EQ(e.choices, (std::vector<std::string>{"hungry", "sleepy", "proud"}));
  EXPECT_EQ(e.gold, std::vector<int>{0});
}

TEST(AdaptersTest, Boolq) {
  const TaskExample e = Render(
      "boolq",
      R"({"passage": "Penguins are birds that cannot fly but swim well.", "question": "can penguins fly", "label": 0})");
  EXPECT_EQ(e.context,
            "Penguins are birds that cannot fly but swim well.\nQuestion: can penguins fly?\n"
            "Answer:");
  EXPECT_EQ(e.RequestContinuation(0), " no");
  EXPECT_EQ(e.RequestContinuation(1), " yes");
  EXPECT_EQ(e.gold, std::vector<int>{0});
  // The original release's boolean answer.
  EXPECT_EQ(Render("boolq", R"({"passage": "p", "question": "q", "answer": true})").gold,
            std::vector<int>{1});
}

TEST(AdaptersTest, OpenBookQa) {
  const TaskExample e = Render(
      "openbookqa",
      R"({"question_stem": "A magnet will stick to", "choices": {"text": ["a steel nail", "a glass cup", "a wooden spoon", "a paper bag"], "label": ["A", "B", "C", "D"]}, "answerKey": "A "})");
  EXPECT_EQ(e.context, "A magnet will stick to");
  EXPECT_EQ(e.RequestContinuation(0), " a steel nail");
  EXPECT_EQ(e.gold, std::vector<int>{0});
}

TEST(AdaptersTest, Race) {
  const TaskExample e = Render(
      "race",
      R"({"article": "Tom plants a tree every spring. This year he chose an apple tree.", "problems": [{"question": "Tom plants a tree every  _  .", "options": ["spring", "summer", "week", "day"], "answer": "A"}, {"question": "What did Tom plant this year?", "options": ["a pear tree", "an apple tree", "a rose", "grass"], "answer": "B"}]})");
  EXPECT_EQ(e.context,
            "Article: Tom plants a tree every spring. This year he chose an apple tree.\n\n"
            "Tom plants a tree every spring\nWhat did Tom plant this year?");
  EXPECT_EQ(e.RequestContinuation(1), " an apple tree");
  EXPECT_EQ(e.gold, std::vector<int>{1});
  // An earlier problem that is a question, not a blank.
  const TaskExample q = Render(
      "race",
      R"({"article": "A.", "problems": [{"question": "Who?", "options": ["x", "y"], "answer": "B"}, {"question": "Why?", "options": ["u", "v"], "answer": "A"}]})");
  EXPECT_EQ(q.context, "Article: A.\n\nQuestion: Who?\nAnswer: y\nWhy?");
  EXPECT_TRUE(absl::StrContains(
      Error(
          "race",
          R"({"article": "A.", "problems": [{"question": "Q", "options": ["x"], "answer": "C"}]})"),
      "problems[0].answer: \"C\" is not a letter of the 1 options"));
}

TEST(AdaptersTest, StoryCloze) {
  const TaskExample e = Render(
      "storycloze",
      R"({"input_sentence_1": "Lena bought a kite.", "input_sentence_2": "She took it to the beach.", "input_sentence_3": "The wind was strong.", "input_sentence_4": "The kite rose above the waves.", "sentence_quiz1": "Lena smiled as it flew.", "sentence_quiz2": "Lena cooked the kite for dinner.", "answer_right_ending": 1})");
  EXPECT_EQ(e.context,
            "Lena bought a kite. She took it to the beach. The wind was strong. The kite rose "
            "above the waves.");
  EXPECT_EQ(e.RequestContinuation(0), " Lena smiled as it flew.");
  EXPECT_EQ(e.gold, std::vector<int>{0});
}

// The recall suite's prompts (R1: SWDE, FDA; R2: TriviaQA, NQ, DROP; SQuAD as given).
TEST(AdaptersTest, RecallPrompts) {
  const TaskExample swde = Render(
      "based_swde",
      R"({"doc_id": "1", "file_name": "f", "key": "director", "value": "Ana Ruiz", "text": "Title: The Quiet Harbor. Year: 2011. Director: Ana Ruiz. Runtime: 97 min.\ndirector:"})");
  EXPECT_EQ(swde.form, TaskForm::kGeneration);
  EXPECT_EQ(swde.context,
            "Title: The Quiet Harbor. Year: 2011. Director: Ana Ruiz. Runtime: 97 min. Director:");
  EXPECT_EQ(swde.answers, std::vector<std::string>{"Ana Ruiz"});
  // SWDE cuts at its summary marker; FDA does not.
  const std::string marked =
      R"({"key": "year", "value": "2011", "text": "Year: 2011. Summary of information above... year:"})";
  EXPECT_EQ(Render("based_swde", marked).context, "Year: 2011. Year:");
  EXPECT_EQ(Render("based_fda", marked).context, "Year: 2011. Summary of information above. Year:");
  const TaskExample tqa = Render(
      "based_triviaqa",
      R"({"context": "[DOC] [TLE] Lune notes [PAR] The Lune flows through Kendrow. The Lune flows through", "question": "The Lune flows through", "answers": ["Kendrow", "Kendrow town"], "orig_question": "q", "doc_id": "d"})");
  EXPECT_EQ(tqa.context, "Lune notes  The Lune flows through Kendrow. The Lune flows through");
  EXPECT_EQ(tqa.answers, (std::vector<std::string>{"Kendrow", "Kendrow town"}));
  // NQ removes one exact copy of the question; DROP every case-insensitive one.
  const std::string other_case =
      R"({"context": "Text. Who won?", "question": "who won?", "answers": []})";
  EXPECT_EQ(Render("based_nq", other_case).context, "Text. Who won?. who won?");
  EXPECT_EQ(Render("based_drop", other_case).context, "Text. who won?");
  EXPECT_TRUE(Render("based_drop", other_case).answers.empty());  // unanswerable: never right
  EXPECT_EQ(Render("based_nq",
                   R"({"context": "Text.. who won?", "question": "who won?", "answers": ["x"]})")
                .context,
            "Text. who won?");
  EXPECT_EQ(Render("based_squad",
                   R"({"text": " The river is the Lune. It flows through ", "value": "Kendrow"})")
                .context,
            "The river is the Lune. It flows through");
}

// The few-shot generation tasks (the paper's Tables 15-16): lm-evaluation-harness's prompts, and
// demonstrations that show the answer after a space.
TEST(AdaptersTest, UnscrambleAndTranslation) {
  const TaskExample u =
      Render("unscramble", R"({"context": "Please unscramble the letters into a word, and )"
                           R"(write that word:\nrtnu =", "completion": "turn"})");
  EXPECT_EQ(u.form, TaskForm::kGeneration);
  EXPECT_EQ(u.context, "Please unscramble the letters into a word, and write that word:\nrtnu =");
  EXPECT_EQ(u.answers, std::vector<std::string>{"turn"});
  EXPECT_EQ(u.Demonstration(),
            "Please unscramble the letters into a word, and write that word:\nrtnu = turn");
  const TaskExample t = Render(
      "wmt_fr_en", R"({"translation": {"fr": "Le chat dort.", "en": " The cat sleeps.\n"}})");
  EXPECT_EQ(t.context, "French phrase: Le chat dort.\nEnglish phrase:");
  EXPECT_EQ(t.answers, std::vector<std::string>{"The cat sleeps."});  // stripped
  EXPECT_EQ(t.Demonstration(), "French phrase: Le chat dort.\nEnglish phrase: The cat sleeps.");
  EXPECT_EQ(Render("wmt_de_en", R"({"translation": {"de": "Hallo", "en": "Hello"}})").context,
            "German phrase: Hallo\nEnglish phrase:");
  EXPECT_EQ(Render("wmt_ro_en", R"({"translation": {"ro": "Salut", "en": "Hi"}})").context,
            "Romanian phrase: Salut\nEnglish phrase:");
  EXPECT_TRUE(absl::StrContains(Error("wmt_de_en", R"({"translation": {"fr": "x", "en": "y"}})"),
                                "translation.de"));
  EXPECT_TRUE(absl::StrContains(Error("unscramble", R"({"context": "c", "completion": " "})"),
                                "completion: is empty"));
}

TEST(AdaptersTest, ErrorsNameTheLineAndKey) {
  EXPECT_TRUE(absl::StrContains(Error("piqa", R"({"goal": "g", "sol1": "a", "sol2": "b"})"),
                                "fixture:1: piqa: label: missing or not an integer"));
  EXPECT_TRUE(
      absl::StrContains(Error("piqa", R"({"goal": "g", "sol1": "a", "sol2": "b", "label": 2})"),
                        "label: gives choice 2 of 2"));
  EXPECT_TRUE(absl::StrContains(Error("lambada", R"({"text": "oneword"})"), "no last word"));
  EXPECT_TRUE(absl::StrContains(
      Error("winogrande",
            R"({"sentence": "no blank", "option1": "a", "option2": "b", "answer": "1"})"),
      "sentence: has no _"));
  EXPECT_TRUE(absl::StrContains(Error("mmlu", R"({"x": 1})"), "adapter: unknown \"mmlu\""));
}

// Every adapter the validator accepts has a renderer, and renders items of the form the
// validator checks metrics against.
TEST(AdaptersTest, EveryNamedAdapterRendersItsForm) {
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"lambada", R"({"text": "a b"})"},
      {"hellaswag",
       R"({"activity_label": "a", "ctx_a": "b", "ctx_b": "c", "endings": ["d"], "label": 0})"},
      {"piqa", R"({"goal": "g", "sol1": "a", "sol2": "b", "label": 1})"},
      {"arc", R"({"question": "q", "choices": {"text": ["a"], "label": ["A"]}, "answerKey": "A"})"},
      {"winogrande", R"({"sentence": "a _ b", "option1": "x", "option2": "y", "answer": 1})"},
      {"siqa",
       R"({"context": "c", "question": "q", "answerA": "a", "answerB": "b", "answerC": "c", "label": 3})"},
      {"boolq", R"({"passage": "p", "question": "q", "label": 1})"},
      {"openbookqa",
       R"({"question_stem": "q", "choices": {"text": ["a"], "label": ["A"]}, "answerKey": "A"})"},
      {"race",
       R"({"article": "a", "problems": "[{\"question\": \"q\", \"options\": [\"x\"], \"answer\": \"A\"}]"})"},
      {"storycloze",
       R"({"input_sentence_1": "a", "input_sentence_2": "b", "input_sentence_3": "c", "input_sentence_4": "d", "sentence_quiz1": "e", "sentence_quiz2": "f", "answer_right_ending": "2"})"},
      {"based_swde", R"({"key": "k", "value": "v", "text": "t"})"},
      {"based_fda", R"({"key": "k", "value": "v", "text": "t"})"},
      {"based_squad", R"({"text": "t", "value": "v"})"},
      {"based_triviaqa", R"({"context": "c", "question": "q", "answers": ["a"]})"},
      {"based_nq", R"({"context": "c", "question": "q", "answers": ["a"]})"},
      {"based_drop", R"({"context": "c", "question": "q", "answers": ["a"]})"},
      {"unscramble", R"({"context": "c =", "completion": "w"})"},
      {"wmt_fr_en", R"({"translation": {"fr": "f", "en": "e"}})"},
      {"wmt_de_en", R"({"translation": {"de": "d", "en": "e"}})"},
      {"wmt_ro_en", R"({"translation": {"ro": "r", "en": "e"}})"},
  };
  ASSERT_EQ(rows.size(), std::size(spec::kTaskAdapters));
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(rows[i].first);
    EXPECT_EQ(rows[i].first, spec::kTaskAdapters[i].name);
    EXPECT_EQ(Render(rows[i].first, rows[i].second).form, spec::kTaskAdapters[i].form);
  }
}

}  // namespace
}  // namespace mesa::model
