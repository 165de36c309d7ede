#include "model/tasks/items_output.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mesa::model {
namespace {

using json = nlohmann::json;

std::vector<json> Lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

TEST(ItemsOutput, EveryItemOfTheJobWithScoresPicksAndCompletions) {
  TaskExample choice;
  choice.line = 3;
  choice.id = "q-7";
  choice.context = "Which is a liquid?";
  choice.choices = {" iron", " water"};
  choice.gold = {1};
  choice.delimiter = " ";
  TaskExample generation;
  generation.line = 4;
  generation.form = TaskForm::kGeneration;
  generation.context = "capital:";
  generation.answers = {"Paris"};
  TaskExample skipped = choice;
  skipped.line = 5;
  skipped.id.clear();
  TaskExample other_shard = choice;

  TaskScore score;
  score.items.resize(4);
  score.items[0].requests = {{-3.0, 2, false}, {-1.0, 2, true}};
  score.items[1].contains = 1;
  score.items[1].exact = false;
  score.items[1].bleu_stats = {2, 1, 1, 0, 0, 0, 2, 1, 0, 0};
  score.items[2].skipped = true;
  score.greedy_text = {"", " Paris, France\xe2\x82", "", ""};  // cut inside a character
  score.in_job = {true, true, true, false};

  const std::vector<json> lines =
      Lines(ItemsJsonl({choice, generation, skipped, other_shard}, score,
                       {"acc", "acc_tok", "exact_match", "contains", "bleu"}));
  ASSERT_EQ(lines.size(), 3u);  // the other shard's item is not this job's
  EXPECT_EQ(lines[0]["index"], 0);
  EXPECT_EQ(lines[0]["line"], 3);
  EXPECT_EQ(lines[0]["id"], "q-7");
  EXPECT_EQ(lines[0]["form"], "multiple_choice");
  EXPECT_EQ(lines[0]["requests"][1]["loglikelihood"], -1.0);
  EXPECT_EQ(lines[0]["requests"][1]["greedy"], true);
  EXPECT_EQ(lines[0]["gold"], json::array({1}));
  EXPECT_EQ(lines[0]["scores"]["acc"], 1.0);
  EXPECT_EQ(lines[0]["picks"]["acc"], 1);
  EXPECT_EQ(lines[0]["scores"]["exact_match"], 1.0);      // the gold request is greedy
  EXPECT_FALSE(lines[0]["scores"].contains("contains"));  // not a metric of choices
  EXPECT_FALSE(lines[0].contains("completion"));
  EXPECT_EQ(lines[1]["form"], "generation");
  EXPECT_EQ(lines[1]["answers"], json::array({"Paris"}));
  EXPECT_EQ(lines[1]["completion"], " Paris, France\xef\xbf\xbd");  // U+FFFD
  EXPECT_EQ(lines[1]["scores"]["contains"], 1.0);
  EXPECT_EQ(lines[1]["scores"]["exact_match"], 0.0);
  EXPECT_FALSE(lines[1]["scores"].contains("bleu"));  // a corpus metric: the statistics instead
  EXPECT_EQ(lines[1]["bleu_stats"].size(), 10u);
  EXPECT_EQ(lines[2]["skipped"], true);
  EXPECT_FALSE(lines[2].contains("scores"));
  EXPECT_FALSE(lines[2].contains("id"));
}

TEST(ItemsOutput, WritesTheFileAtomicallyInANewDirectory) {
  TaskExample generation;
  generation.form = TaskForm::kGeneration;
  generation.context = "p";
  TaskScore score;
  score.items.resize(1);
  score.greedy_text = {"x"};
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/items_out/items";
  ASSERT_TRUE(WriteItemsFile(dir + "/t.jsonl", {generation}, score, {"contains"}).ok());
  std::ifstream written(dir + "/t.jsonl");
  std::stringstream text;
  text << written.rdbuf();
  EXPECT_EQ(text.str(), ItemsJsonl({generation}, score, {"contains"}));
  EXPECT_FALSE(WriteItemsFile("/proc/no/such/t.jsonl", {generation}, score, {}).ok());
}

}  // namespace
}  // namespace mesa::model
