// eval.tasks over several ranks (docs/evaluation.md, "Distribution"): the items are dealt to the
// ranks, scored there and their records exchanged over the job's communicator (TCP here, as
// worker agents wire CPU ranks), and every rank reports metrics bit-identical to one rank's.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "gtest/gtest.h"
#include "model/data/token_shard.h"
#include "model/trainer/rank_threads_for_test.h"
#include "model/trainer/trainer.h"

namespace mesa::model {
namespace {

namespace fs = std::filesystem;
constexpr uint32_t kBos = 256;

std::string Tmp(const std::string& name) { return std::string(getenv("TEST_TMPDIR")) + "/" + name; }

// Letter documents where each letter is mostly followed by the next one: a model trained for a
// few steps prefers some continuations, so the items do not all tie.
std::vector<uint32_t> Documents(int64_t tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> letter(0, 7), length(5, 40);
  std::bernoulli_distribution follow(0.8);
  std::vector<uint32_t> out;
  while (static_cast<int64_t>(out.size()) < tokens) {
    out.push_back(kBos);
    int cur = letter(rng);
    for (int i = length(rng); i > 0; --i) {
      out.push_back('a' + cur);
      cur = follow(rng) ? (cur + 1) % 8 : letter(rng);
    }
  }
  out.resize(tokens);
  return out;
}

std::string Letters(std::mt19937& rng, int n) {
  std::uniform_int_distribution<int> letter(0, 7);
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>('a' + letter(rng)));
  return s;
}

// Items of every scored form with contexts of very different lengths (so the deal by cost
// matters), one too long for the window (left-truncated).
void WriteTasks() {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> length(1, 40), gold(0, 2);
  std::ofstream mc(Tmp("mc.jsonl")), mixed(Tmp("mixed.jsonl")), gen(Tmp("gen.jsonl"));
  for (int i = 0; i < 23; ++i) {
    const int n = i == 7 ? 90 : length(rng);
    mc << "{\"context\": \"" << Letters(rng, n) << "\", \"choices\": [\"" << Letters(rng, 3)
       << "\", \"" << Letters(rng, 1) << "\", \"" << Letters(rng, 5)
       << "\"], \"gold\": " << gold(rng) << ", \"delimiter\": \"\"}\n";
  }
  for (int i = 0; i < 9; ++i) {
    mixed << "{\"context\": \"" << Letters(rng, length(rng)) << "\", \"target\": \""
          << Letters(rng, 2) << "\"" << (i % 2 == 0 ? ", \"score\": \"greedy\"" : "") << "}\n";
  }
  for (int i = 0; i < 7; ++i) {
    gen << "{\"prompt\": \"" << Letters(rng, length(rng)) << "\", \"answers\": [\""
        << Letters(rng, 1) << "\"], \"max_new_tokens\": " << 2 + i % 3 << "}\n";
  }
}

mesa::v1::JobSpec Spec() {
  mesa::v1::JobSpec spec;
  spec.set_name("ranks");
  auto* m = spec.mutable_model();
  m->set_vocab_size(257);
  m->set_d_model(32);
  m->set_n_layers(2);
  m->set_n_heads(2);
  m->set_head_dim(16);
  m->set_mixer("mesa");
  m->set_cg_steps(4);
  auto* d = spec.mutable_data();
  d->set_train_path(Tmp("ranks_train.bin"));
  d->set_seq_len(64);
  d->set_batch_size(12);
  spec.mutable_optimizer()->set_lr(1e-2f);
  spec.mutable_training()->set_steps(4);
  spec.mutable_training()->set_seed(3);
  return spec;
}

mesa::v1::JobSpec EvalSpec() {
  mesa::v1::JobSpec spec = Spec();
  spec.set_type(mesa::v1::JOB_TYPE_EVAL);
  spec.clear_optimizer();
  spec.mutable_training()->set_steps(0);
  spec.mutable_eval()->set_checkpoint(Tmp("ranks_run/checkpoints"));
  auto* e = spec.mutable_eval();
  auto* mc = e->add_tasks();
  mc->set_name("mc");
  mc->set_path(Tmp("mc.jsonl"));
  auto* fewshot = e->add_tasks();
  fewshot->set_name("mc-2shot");
  fewshot->set_path(Tmp("mc.jsonl"));
  fewshot->set_num_fewshot(2);
  auto* mixed = e->add_tasks();
  mixed->set_name("mixed");
  mixed->set_path(Tmp("mixed.jsonl"));
  auto* gen = e->add_tasks();
  gen->set_name("gen");
  gen->set_path(Tmp("gen.jsonl"));
  // Few-shot generation over two draws, scored by BLEU too.
  auto* drawn = e->add_tasks();
  drawn->set_name("gen-1shot");
  drawn->set_path(Tmp("gen.jsonl"));
  drawn->set_num_fewshot(1);
  drawn->set_fewshot_draws(2);
  drawn->add_metrics("exact_match");
  drawn->add_metrics("contains");
  drawn->add_metrics("bleu");
  drawn->set_primary_metric("bleu");
  e->set_items_output(true);
  auto* group = e->add_task_groups();
  group->set_name("average");
  group->add_tasks("mc");
  group->add_tasks("mixed");
  return spec;
}

class TaskRanksTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(WriteTokenShard(Tmp("ranks_train.bin"), Documents(20000, 1)).ok());
    WriteTasks();
    auto config = ResolveJobConfig(Spec(), ResolveOptions{});
    ASSERT_TRUE(config.ok()) << config.status();
    TrainerOptions options;
    options.workdir = Tmp("ranks_run");
    options.num_threads = 1;
    EventSink sink;
    sink.set_quiet(true);
    auto trained = RunTraining(*config, options, sink);
    ASSERT_TRUE(trained.ok()) << trained.status();
  }

  // Every rank's result of the evaluation on `world` ranks.
  static std::vector<mesa::v1::EvalMetrics> Eval(int world) {
    ResolveOptions resolve;
    resolve.world_size = world;
    auto config = ResolveJobConfig(EvalSpec(), resolve);
    EXPECT_TRUE(config.ok()) << config.status();
    std::vector<mesa::v1::EvalMetrics> out(world);
    if (!config.ok()) return out;
    const std::string workdir = Tmp(absl::StrCat("ranks_eval_", world));
    fs::remove_all(workdir);
    RunRankThreads(world, workdir, absl::StrCat("tasks", world), [&](int r, TrainerOptions& o) {
      EventSink sink;
      sink.set_quiet(true);
      auto result = RunEvaluation(*config, o, sink);
      EXPECT_TRUE(result.ok()) << "rank " << r << " of " << world << ": " << result.status();
      if (result.ok()) out[r] = result->result.eval();
    });
    return out;
  }
};

void ExpectSameTasks(const mesa::v1::EvalMetrics& a, const mesa::v1::EvalMetrics& b,
                     const std::string& what) {
  ASSERT_EQ(a.tasks_size(), b.tasks_size()) << what;
  for (int t = 0; t < a.tasks_size(); ++t) {
    const mesa::v1::TaskResult &x = a.tasks(t), &y = b.tasks(t);
    SCOPED_TRACE(what + ", task " + x.name());
    EXPECT_EQ(x.items(), y.items());
    EXPECT_EQ(x.scored(), y.scored());
    EXPECT_EQ(x.truncated(), y.truncated());
    EXPECT_EQ(x.skipped(), y.skipped());
    EXPECT_EQ(x.boundary_merges(), y.boundary_merges());
    EXPECT_EQ(x.accuracy(), y.accuracy());
    EXPECT_EQ(x.accuracy_norm(), y.accuracy_norm());
    ASSERT_EQ(x.metrics_size(), y.metrics_size());
    for (int k = 0; k < x.metrics_size(); ++k) {
      EXPECT_EQ(x.metrics(k).name(), y.metrics(k).name());
      // Bit for bit: the metrics are computed once from the same records in the same order.
      EXPECT_EQ(x.metrics(k).value(), y.metrics(k).value()) << x.metrics(k).name();
      EXPECT_EQ(x.metrics(k).stderr(), y.metrics(k).stderr()) << x.metrics(k).name();
      EXPECT_EQ(x.metrics(k).count(), y.metrics(k).count()) << x.metrics(k).name();
      EXPECT_EQ(x.metrics(k).draw_std(), y.metrics(k).draw_std()) << x.metrics(k).name();
    }
    EXPECT_EQ(x.draws_size(), y.draws_size());
  }
  ASSERT_EQ(a.task_groups_size(), b.task_groups_size()) << what;
  for (int g = 0; g < a.task_groups_size(); ++g) {
    EXPECT_EQ(a.task_groups(g).value(), b.task_groups(g).value()) << what;
    EXPECT_EQ(a.task_groups(g).stderr(), b.task_groups(g).stderr()) << what;
  }
}

TEST_F(TaskRanksTest, FourAndThreeRanksReportWhatOneRankDoes) {
  const std::vector<mesa::v1::EvalMetrics> one = Eval(1);
  ASSERT_EQ(one[0].tasks_size(), 5);
  // The items are real: every form scored, the long context cut, the metrics not all trivial.
  EXPECT_EQ(one[0].tasks(0).items(), 23);
  EXPECT_EQ(one[0].tasks(0).truncated(), 1);
  EXPECT_EQ(one[0].tasks(2).items(), 9);
  EXPECT_EQ(one[0].tasks(3).items(), 7);
  EXPECT_EQ(one[0].tasks(3).metrics(1).name(), "contains");
  EXPECT_EQ(one[0].tasks(4).draws_size(), 2);
  EXPECT_EQ(one[0].tasks(4).metrics(2).name(), "bleu");
  // eval.items_output: rank 0 writes every item's record, completions included.
  const std::string gen_items = one[0].tasks(3).items_path();
  EXPECT_EQ(gen_items, Tmp("ranks_eval_1/checkpoints/items/gen.jsonl"));
  absl::StatusOr<std::string> one_rank_items = base::ReadFile(gen_items, 1 << 20);
  ASSERT_TRUE(one_rank_items.ok()) << one_rank_items.status();
  EXPECT_EQ(std::count(one_rank_items->begin(), one_rank_items->end(), '\n'), 7);
  EXPECT_TRUE(absl::StrContains(*one_rank_items, "\"completion\":"));
  EXPECT_EQ(one[0].tasks(4).draws(1).items_path(),
            Tmp("ranks_eval_1/checkpoints/items/gen-1shot.draw1.jsonl"));
  for (int world : {4, 3}) {
    const std::vector<mesa::v1::EvalMetrics> many = Eval(world);
    for (int r = 0; r < world; ++r) {
      ExpectSameTasks(one[0], many[r], absl::StrCat(world, " ranks, rank ", r));
    }
    // The same records, byte for byte, however many ranks scored them.
    for (const mesa::v1::TaskResult& t : one[0].tasks()) {
      const std::string name = fs::path(t.items_path()).filename().string();
      absl::StatusOr<std::string> items = base::ReadFile(
          Tmp(absl::StrCat("ranks_eval_", world, "/checkpoints/items/", name)), 1 << 20);
      ASSERT_TRUE(items.ok()) << items.status();
      EXPECT_EQ(*items, *base::ReadFile(t.items_path(), 1 << 20)) << world << " ranks, " << name;
    }
  }
}

}  // namespace
}  // namespace mesa::model
