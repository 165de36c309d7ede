#include "model/tasks/adapters.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/file_util.h"
#include "base/utf8.h"
#include "nlohmann/json.hpp"
#include "spec/tasks.h"

namespace mesa::model {
namespace {

using json = nlohmann::json;

// Field access that names the key in its error.
absl::StatusOr<std::string> Str(const json& row, const char* key) {
  auto it = row.find(key);
  if (it == row.end() || !it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": missing or not a string"));
  }
  return it->get<std::string>();
}

// An integer, or a string of one ("label": "2" in several releases).
absl::StatusOr<int64_t> Int(const json& row, const char* key) {
  auto it = row.find(key);
  if (it != row.end()) {
    if (it->is_number_integer()) return it->get<int64_t>();
    int64_t value = 0;
    if (it->is_string() && absl::SimpleAtoi(it->get<std::string>(), &value)) return value;
  }
  return absl::InvalidArgumentError(absl::StrCat(key, ": missing or not an integer"));
}

absl::StatusOr<std::vector<std::string>> StrList(const json& parent, const char* key,
                                                 const char* path) {
  auto it = parent.find(key);
  if (it == parent.end() || !it->is_array() || it->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing or not a non-empty list"));
  }
  std::vector<std::string> out;
  for (const json& v : *it) {
    if (!v.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a list of strings"));
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

// The index of a 0-based gold among `n` choices.
absl::StatusOr<int> Gold(int64_t index, size_t n, const char* key) {
  if (index < 0 || index >= static_cast<int64_t>(n)) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": gives choice ", index, " of ", n, " (0-based)"));
  }
  return static_cast<int>(index);
}

TaskExample MultipleChoice(std::string context, std::vector<std::string> choices, int gold) {
  TaskExample e;
  e.form = TaskForm::kMultipleChoice;
  e.context = std::move(context);
  e.choices = std::move(choices);
  e.gold = {gold};
  e.delimiter = " ";
  return e;
}

// Python's str.capitalize for ASCII letters: the first upper case, the rest lower case.
std::string Capitalize(std::string text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    text[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
  }
  return text;
}

// The lettered or numbered choices of ARC and OpenBookQA: choices.text, and the position of
// answerKey (spaces stripped) in choices.label.
absl::StatusOr<TaskExample> LabelledChoices(const json& row, std::string context) {
  auto choices = row.find("choices");
  if (choices == row.end() || !choices->is_object()) {
    return absl::InvalidArgumentError("choices: missing or not an object with text and label");
  }
  absl::StatusOr<std::vector<std::string>> text = StrList(*choices, "text", "choices.text");
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<std::string>> labels = StrList(*choices, "label", "choices.label");
  if (!labels.ok()) return labels.status();
  if (labels->size() != text->size()) {
    return absl::InvalidArgumentError("choices: text and label differ in length");
  }
  absl::StatusOr<std::string> key = Str(row, "answerKey");
  if (!key.ok()) return key.status();
  const std::string wanted(base::StripUnicodeSpace(*key));
  auto at = std::find(labels->begin(), labels->end(), wanted);
  if (at == labels->end()) {
    return absl::InvalidArgumentError(absl::StrCat("answerKey: \"", wanted, "\" is not one of [",
                                                   absl::StrJoin(*labels, ", "), "]"));
  }
  return MultipleChoice(std::move(context), *std::move(text),
                        static_cast<int>(at - labels->begin()));
}

absl::StatusOr<TaskExample> Lambada(const json& row) {
  absl::StatusOr<std::string> text = Str(row, "text");
  if (!text.ok()) return text.status();
  const size_t space = text->rfind(' ');
  if (space == std::string::npos || space + 1 == text->size()) {
    return absl::InvalidArgumentError("text: has no last word after a space");
  }
  TaskExample e;
  e.form = TaskForm::kCloze;
  e.context = text->substr(0, space);
  e.target = text->substr(space + 1);
  e.delimiter = " ";
  return e;
}

absl::StatusOr<TaskExample> Hellaswag(const json& row) {
  absl::StatusOr<std::string> label = Str(row, "activity_label");
  absl::StatusOr<std::string> a = Str(row, "ctx_a");
  absl::StatusOr<std::string> b = Str(row, "ctx_b");
  for (const auto* s : {&label, &a, &b}) {
    if (!s->ok()) return s->status();
  }
  absl::StatusOr<std::vector<std::string>> endings = StrList(row, "endings", "endings");
  if (!endings.ok()) return endings.status();
  absl::StatusOr<int64_t> gold = Int(row, "label");
  if (!gold.ok()) return gold.status();
  absl::StatusOr<int> g = Gold(*gold, endings->size(), "label");
  if (!g.ok()) return g.status();
  for (std::string& ending : *endings) ending = HellaswagClean(ending);
  return MultipleChoice(HellaswagClean(absl::StrCat(*label, ": ", *a, " ", Capitalize(*b))),
                        *std::move(endings), *g);
}

absl::StatusOr<TaskExample> Piqa(const json& row) {
  absl::StatusOr<std::string> goal = Str(row, "goal");
  absl::StatusOr<std::string> sol1 = Str(row, "sol1");
  absl::StatusOr<std::string> sol2 = Str(row, "sol2");
  for (const auto* s : {&goal, &sol1, &sol2}) {
    if (!s->ok()) return s->status();
  }
  absl::StatusOr<int64_t> label = Int(row, "label");
  if (!label.ok()) return label.status();
  absl::StatusOr<int> g = Gold(*label, 2, "label");
  if (!g.ok()) return g.status();
  return MultipleChoice(absl::StrCat("Question: ", *goal, "\nAnswer:"), {*sol1, *sol2}, *g);
}

absl::StatusOr<TaskExample> Arc(const json& row) {
  absl::StatusOr<std::string> question = Str(row, "question");
  if (!question.ok()) return question.status();
  return LabelledChoices(row, absl::StrCat("Question: ", *question, "\nAnswer:"));
}

absl::StatusOr<TaskExample> OpenBookQa(const json& row) {
  absl::StatusOr<std::string> stem = Str(row, "question_stem");
  if (!stem.ok()) return stem.status();
  return LabelledChoices(row, *stem);
}

absl::StatusOr<TaskExample> Winogrande(const json& row) {
  absl::StatusOr<std::string> sentence = Str(row, "sentence");
  absl::StatusOr<std::string> o1 = Str(row, "option1");
  absl::StatusOr<std::string> o2 = Str(row, "option2");
  for (const auto* s : {&sentence, &o1, &o2}) {
    if (!s->ok()) return s->status();
  }
  const size_t blank = sentence->find('_');
  if (blank == std::string::npos) return absl::InvalidArgumentError("sentence: has no _");
  absl::StatusOr<int64_t> answer = Int(row, "answer");
  if (!answer.ok()) return answer.status();
  absl::StatusOr<int> g = Gold(*answer - 1, 2, "answer");
  if (!g.ok()) return g.status();
  TaskExample e;
  e.form = TaskForm::kMultiContext;
  const std::string before = sentence->substr(0, blank);
  e.contexts = {before + *o1, before + *o2};
  e.target = std::string(base::StripUnicodeSpace(absl::string_view(*sentence).substr(blank + 1)));
  if (e.target.empty()) return absl::InvalidArgumentError("sentence: nothing follows the _");
  e.gold = {*g};
  e.delimiter = " ";
  return e;
}

absl::StatusOr<TaskExample> Siqa(const json& row) {
  std::vector<absl::StatusOr<std::string>> f;
  for (const char* key : {"context", "question", "answerA", "answerB", "answerC"}) {
    f.push_back(Str(row, key));
    if (!f.back().ok()) return f.back().status();
  }
  absl::StatusOr<int64_t> label = Int(row, "label");
  if (!label.ok()) return label.status();
  absl::StatusOr<int> g = Gold(*label - 1, 3, "label");
  if (!g.ok()) return g.status();
  return MultipleChoice(absl::StrCat("Q: ", *f[0], " ", *f[1], "\nA:"), {*f[2], *f[3], *f[4]}, *g);
}

absl::StatusOr<TaskExample> Boolq(const json& row) {
  absl::StatusOr<std::string> passage = Str(row, "passage");
  absl::StatusOr<std::string> question = Str(row, "question");
  for (const auto* s : {&passage, &question}) {
    if (!s->ok()) return s->status();
  }
  int64_t gold = 0;
  if (auto answer = row.find("answer"); answer != row.end() && answer->is_boolean()) {
    gold = answer->get<bool>() ? 1 : 0;  // the original release
  } else {
    absl::StatusOr<int64_t> label = Int(row, "label");
    if (!label.ok()) {
      return absl::InvalidArgumentError("label: missing or not an integer (or answer: a boolean)");
    }
    gold = *label;
  }
  absl::StatusOr<int> g = Gold(gold, 2, "label");
  if (!g.ok()) return g.status();
  return MultipleChoice(absl::StrCat(*passage, "\nQuestion: ", *question, "?\nAnswer:"),
                        {"no", "yes"}, *g);
}

// One item per article: its last problem is scored; the earlier ones, answered, lead up to it.
absl::StatusOr<TaskExample> Race(const json& row) {
  absl::StatusOr<std::string> article = Str(row, "article");
  if (!article.ok()) return article.status();
  auto problems_it = row.find("problems");
  json problems;
  if (problems_it != row.end() && problems_it->is_string()) {
    // Some copies hold the list as a JSON string.
    problems = json::parse(problems_it->get<std::string>(), nullptr, /*allow_exceptions=*/false);
  } else if (problems_it != row.end()) {
    problems = *problems_it;
  }
  if (!problems.is_array() || problems.empty()) {
    return absl::InvalidArgumentError("problems: missing or not a non-empty list");
  }
  std::string context = absl::StrCat("Article: ", *article, "\n\n");
  for (size_t i = 0; i < problems.size(); ++i) {
    const json& p = problems[i];
    auto fail = [&](const absl::Status& s) {
      return absl::InvalidArgumentError(absl::StrCat("problems[", i, "].", s.message()));
    };
    if (!p.is_object()) return fail(absl::InvalidArgumentError("is not an object"));
    absl::StatusOr<std::string> question = Str(p, "question");
    if (!question.ok()) return fail(question.status());
    absl::StatusOr<std::vector<std::string>> options = StrList(p, "options", "options");
    if (!options.ok()) return fail(options.status());
    absl::StatusOr<std::string> answer = Str(p, "answer");
    if (!answer.ok()) return fail(answer.status());
    if (answer->size() != 1 || (*answer)[0] < 'A' ||
        (*answer)[0] >= 'A' + static_cast<int>(options->size())) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "answer: \"", *answer, "\" is not a letter of the ", options->size(), " options")));
    }
    const int gold = (*answer)[0] - 'A';
    if (i + 1 == problems.size()) {
      context += *question;
      return MultipleChoice(std::move(context), *std::move(options), gold);
    }
    const std::string& right = (*options)[gold];
    if (question->size() >= 6 && question->compare(question->size() - 6, 6, "  _  .") == 0) {
      // A fill-in: the blank's sentence with the answer in place of "  _  ." (one space kept).
      absl::StrAppend(&context, question->substr(0, question->size() - 5), right, "\n");
    } else {
      absl::StrAppend(&context, "Question: ", *question, "\n", "Answer: ", right, "\n");
    }
  }
  return absl::InternalError("unreachable");
}

absl::StatusOr<TaskExample> StoryCloze(const json& row) {
  std::vector<std::string> sentences;
  for (const char* key : {"input_sentence_1", "input_sentence_2", "input_sentence_3",
                          "input_sentence_4", "sentence_quiz1", "sentence_quiz2"}) {
    absl::StatusOr<std::string> s = Str(row, key);
    if (!s.ok()) return s.status();
    sentences.push_back(*std::move(s));
  }
  absl::StatusOr<int64_t> answer = Int(row, "answer_right_ending");
  if (!answer.ok()) return answer.status();
  absl::StatusOr<int> g = Gold(*answer - 1, 2, "answer_right_ending");
  if (!g.ok()) return g.status();
  return MultipleChoice(absl::StrJoin(sentences.begin(), sentences.begin() + 4, " "),
                        {sentences[4], sentences[5]}, *g);
}

// Case-insensitive (ASCII letters) suffix test: the recall suite's comparisons ignore case.
bool EndsWithIgnoringCase(absl::string_view text, absl::string_view suffix) {
  return text.size() >= suffix.size() &&
         absl::EqualsIgnoreCase(text.substr(text.size() - suffix.size()), suffix);
}

// `text` without the characters of `chars` at both ends.
absl::string_view TrimChars(absl::string_view text, absl::string_view chars) {
  const size_t begin = text.find_first_not_of(chars);
  if (begin == absl::string_view::npos) return absl::string_view();
  return text.substr(begin, text.find_last_not_of(chars) - begin + 1);
}

TaskExample Generation(std::string prompt, std::vector<std::string> answers) {
  TaskExample e;
  e.form = TaskForm::kGeneration;
  e.context = std::move(prompt);
  for (std::string& a : answers) {
    if (!a.empty()) e.answers.push_back(std::move(a));
  }
  return e;
}

// The recall suite's R1 prompt (SWDE, FDA): the document, then "Key:" for the model to complete.
absl::StatusOr<TaskExample> KeyValuePrompt(const json& row, bool swde) {
  absl::StatusOr<std::string> text = Str(row, "text");
  absl::StatusOr<std::string> key = Str(row, "key");
  absl::StatusOr<std::string> value = Str(row, "value");
  for (const auto* s : {&text, &key, &value}) {
    if (!s->ok()) return s->status();
  }
  if (key->empty()) return absl::InvalidArgumentError("key: must not be empty");
  absl::string_view doc = *text;
  if (swde) {
    if (const size_t marker = doc.find("Summary of information above..."); marker != doc.npos) {
      doc = doc.substr(0, marker);
    }
  }
  const std::string cue = absl::StrCat(*key, ":");
  while (EndsWithIgnoringCase(doc, cue)) doc.remove_suffix(cue.size());
  doc = TrimChars(doc, "\n .");
  std::string label = *key;
  label[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(label[0])));
  return Generation(absl::StrCat(doc, ". ", label, ":"), {*value});
}

// The recall suite's R2 prompt (TriviaQA, NQ, DROP): the context without a trailing copy of the
// question, then ". " and the question for the model to complete. NQ removes one exact copy;
// the others every case-insensitive one.
absl::StatusOr<TaskExample> QuestionPrompt(const json& row, bool triviaqa, bool nq) {
  absl::StatusOr<std::string> context = Str(row, "context");
  absl::StatusOr<std::string> question = Str(row, "question");
  for (const auto* s : {&context, &question}) {
    if (!s->ok()) return s->status();
  }
  std::string text = *context;
  if (triviaqa) text = absl::StrReplaceAll(text, {{"[PAR]", ""}, {"[DOC]", ""}, {"[TLE]", ""}});
  absl::string_view doc = base::StripUnicodeSpace(text);
  const absl::string_view q = *question;
  if (nq) {
    if (!q.empty() && absl::EndsWith(doc, q)) doc.remove_suffix(q.size());
  } else {
    while (!q.empty() && EndsWithIgnoringCase(doc, q)) doc.remove_suffix(q.size());
  }
  doc = base::StripUnicodeSpace(doc);
  while (absl::EndsWith(doc, ".")) doc.remove_suffix(1);
  std::vector<std::string> answers;
  auto list = row.find("answers");
  if (list == row.end() || !list->is_array()) {
    return absl::InvalidArgumentError("answers: missing or not a list");
  }
  for (const json& a : *list) {
    if (!a.is_string()) return absl::InvalidArgumentError("answers: not a list of strings");
    answers.push_back(a.get<std::string>());
  }
  return Generation(absl::StrCat(doc, ". ", base::StripUnicodeSpace(q)), std::move(answers));
}

absl::StatusOr<TaskExample> BasedSwde(const json& row) { return KeyValuePrompt(row, true); }
absl::StatusOr<TaskExample> BasedFda(const json& row) { return KeyValuePrompt(row, false); }
absl::StatusOr<TaskExample> BasedTriviaQa(const json& row) {
  return QuestionPrompt(row, true, false);
}
absl::StatusOr<TaskExample> BasedNq(const json& row) { return QuestionPrompt(row, false, true); }
absl::StatusOr<TaskExample> BasedDrop(const json& row) { return QuestionPrompt(row, false, false); }

// SQuAD's release holds the prompt (passage and a declarative stem) whole.
absl::StatusOr<TaskExample> BasedSquad(const json& row) {
  absl::StatusOr<std::string> text = Str(row, "text");
  absl::StatusOr<std::string> value = Str(row, "value");
  for (const auto* s : {&text, &value}) {
    if (!s->ok()) return s->status();
  }
  const absl::string_view prompt = base::StripUnicodeSpace(*text);
  if (prompt.empty()) return absl::InvalidArgumentError("text: is empty");
  return Generation(std::string(prompt), {*value});
}

// lm-evaluation-harness's unscramble rows {"context", "completion"}: the model completes the
// context; a demonstration shows the context, a space and the completion.
absl::StatusOr<TaskExample> Unscramble(const json& row) {
  absl::StatusOr<std::string> context = Str(row, "context");
  absl::StatusOr<std::string> completion = Str(row, "completion");
  for (const auto* s : {&context, &completion}) {
    if (!s->ok()) return s->status();
  }
  if (context->empty()) return absl::InvalidArgumentError("context: is empty");
  if (base::StripUnicodeSpace(*completion).empty()) {
    return absl::InvalidArgumentError("completion: is empty");
  }
  TaskExample e = Generation(*context, {*completion});
  e.delimiter = " ";
  return e;
}

// WMT rows {"translation": {"<source>": ..., "en": ...}} as lm-evaluation-harness's GPT-3
// translation prompts: "<Language> phrase: <source>\nEnglish phrase:", answered by a space and
// the reference (stripped, as BLEU's references are).
absl::StatusOr<TaskExample> ToEnglish(const json& row, const char* source, const char* language) {
  auto pair = row.find("translation");
  if (pair == row.end() || !pair->is_object()) {
    return absl::InvalidArgumentError("translation: missing or not an object");
  }
  absl::StatusOr<std::string> from = Str(*pair, source);
  absl::StatusOr<std::string> to = Str(*pair, "en");
  for (const auto* s : {&from, &to}) {
    if (!s->ok()) {
      return absl::InvalidArgumentError(absl::StrCat("translation.", s->status().message()));
    }
  }
  const absl::string_view reference = base::StripUnicodeSpace(*to);
  if (reference.empty()) return absl::InvalidArgumentError("translation.en: is empty");
  TaskExample e = Generation(absl::StrCat(language, " phrase: ", *from, "\nEnglish phrase:"),
                             {std::string(reference)});
  e.delimiter = " ";
  return e;
}

absl::StatusOr<TaskExample> WmtFrEn(const json& row) { return ToEnglish(row, "fr", "French"); }
absl::StatusOr<TaskExample> WmtDeEn(const json& row) { return ToEnglish(row, "de", "German"); }
absl::StatusOr<TaskExample> WmtRoEn(const json& row) { return ToEnglish(row, "ro", "Romanian"); }

using Adapter = std::function<absl::StatusOr<TaskExample>(const json&)>;

const Adapter* FindAdapter(absl::string_view name) {
  static const auto* const kAdapters =
      new std::vector<std::pair<std::string, Adapter>>{{"lambada", Lambada},
                                                       {"hellaswag", Hellaswag},
                                                       {"piqa", Piqa},
                                                       {"arc", Arc},
                                                       {"winogrande", Winogrande},
                                                       {"siqa", Siqa},
                                                       {"boolq", Boolq},
                                                       {"openbookqa", OpenBookQa},
                                                       {"race", Race},
                                                       {"storycloze", StoryCloze},
                                                       {"based_swde", BasedSwde},
                                                       {"based_fda", BasedFda},
                                                       {"based_squad", BasedSquad},
                                                       {"based_triviaqa", BasedTriviaQa},
                                                       {"based_nq", BasedNq},
                                                       {"based_drop", BasedDrop},
                                                       {"unscramble", Unscramble},
                                                       {"wmt_fr_en", WmtFrEn},
                                                       {"wmt_de_en", WmtDeEn},
                                                       {"wmt_ro_en", WmtRoEn}};
  for (const auto& [n, adapter] : *kAdapters) {
    if (n == name) return &adapter;
  }
  return nullptr;
}

}  // namespace

std::string HellaswagClean(absl::string_view text) {
  std::string s = absl::StrReplaceAll(base::StripUnicodeSpace(text), {{" [title]", ". "}});
  // Every "[...]" group, the shortest match from each "[" (a regex's \[.*?\]).
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '[') {
      const size_t close = s.find_first_of("]\n", i + 1);
      if (close != std::string::npos && s[close] == ']') {
        i = close + 1;
        continue;
      }
    }
    out.push_back(s[i++]);
  }
  return absl::StrReplaceAll(out, {{"  ", " "}});
}

absl::StatusOr<std::vector<TaskExample>> AdaptRows(absl::string_view adapter,
                                                   const std::vector<JsonlRow>& rows,
                                                   absl::string_view name) {
  const Adapter* render = FindAdapter(adapter);
  if (render == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("adapter: unknown \"", adapter, "\""));
  }
  std::vector<TaskExample> items;
  items.reserve(rows.size());
  for (const JsonlRow& row : rows) {
    absl::StatusOr<TaskExample> item = (*render)(row.object);
    if (!item.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ":", row.line, ": ", adapter, ": ", item.status().message()));
    }
    item->line = row.line;
    if (auto id = row.object.find("id"); id != row.object.end() && id->is_string()) {
      item->id = id->get<std::string>();
    }
    items.push_back(*std::move(item));
  }
  return items;
}

absl::StatusOr<std::vector<TaskExample>> ParseTaskItems(absl::string_view text,
                                                        absl::string_view name,
                                                        absl::string_view adapter) {
  if (adapter.empty()) return ParseTaskJsonl(text, name);
  absl::StatusOr<std::vector<JsonlRow>> rows = ParseJsonlObjects(text, name);
  if (!rows.ok()) return rows.status();
  return AdaptRows(adapter, *rows, name);
}

absl::StatusOr<std::vector<TaskExample>> LoadTaskItems(const std::string& path,
                                                       absl::string_view adapter) {
  absl::StatusOr<std::string> text = base::ReadFile(path, spec::kMaxTaskFileBytes);
  if (!text.ok()) return text.status();
  return ParseTaskItems(*text, path, adapter);
}

}  // namespace mesa::model
