// End-to-end: a real coordinator, two real worker agents and the real mesa-train on tiny CPU
// models, all on loopback. Covers docs/design.md §6's promises: jobs complete with stored results,
// cancel stops with a usable checkpoint, a lost worker or coordinator loses no job, user errors
// fail without retries, and gang admission never half-starts a job; and the data-parallel
// jobs: CPU ranks on two workers meet through the coordinator's rendezvous, match one process,
// and a rank that dies or hangs gets the job retried from its checkpoint.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/array_format.h"
#include "cli/eval_format.h"
#include "cli/format.h"
#include "formats/checkpoint_layout.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster.h"
#include "tests/process_harness.h"

namespace mesa::e2e {
namespace {

using mesa::cli::IsTerminal;
using mesa::v1::Job;
using mesa::v1::JobSpec;

constexpr absl::Duration kJobTimeout = absl::Seconds(150);

std::string StateName(const Job& job) { return mesa::v1::JobState_Name(job.state()); }

// Waits until the job has a checkpoint and has trained a little past the first one.
absl::StatusOr<Job> WaitForCheckpoint(Cluster& cluster, const std::string& job_id,
                                      int64_t interval) {
  return cluster.WaitFor(
      job_id,
      [interval](const Job& job) {
        return !job.latest_checkpoint().empty() && job.progress().step() > interval + 2;
      },
      kJobTimeout);
}

int CountAgentLines(const std::vector<mesa::v1::LogLine>& logs, int attempt,
                    absl::string_view text) {
  int count = 0;
  for (const auto& line : logs) {
    count += line.stream() == "agent" && line.attempt() == attempt &&
             absl::StrContains(line.text(), text);
  }
  return count;
}

TEST(EndToEndTest, TrainingCompletesAndEvalResultIsStored) {
  auto cluster = Cluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto submitted = (*cluster)->Submit(TinyTrain("train-ok", 30, 10));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto job = (*cluster)->WaitForEnd(submitted->id(), kJobTimeout);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  EXPECT_EQ(job->attempts(), 1);
  EXPECT_EQ(job->progress().step(), 30);
  EXPECT_GT(job->result().val_loss(), 0);
  EXPECT_FALSE(job->result().checkpoint_path().empty());
  EXPECT_TRUE(std::filesystem::exists(job->result().checkpoint_path()))
      << job->result().checkpoint_path();
  // The trainer's log reached the coordinator.
  auto logs = (*cluster)->Logs(submitted->id());
  ASSERT_TRUE(logs.ok()) << logs.status();
  int trainer_lines = 0;
  for (const auto& line : *logs) trainer_lines += line.stream() != "agent";
  EXPECT_GT(trainer_lines, 0);

  // Evaluate the checkpoint: the result (validation loss and perplexity) is stored with the job.
  JobSpec eval_spec = TinyEval("eval-ok", job->result().checkpoint_path());
  eval_spec.mutable_eval()->mutable_cg_sweep()->add_fixed_steps(1);
  eval_spec.mutable_eval()->mutable_cg_sweep()->add_tolerances(1e-3f);
  // Two datasets, the second at twice the training length, with their per-position curves.
  eval_spec.mutable_eval()->set_per_position(true);
  eval_spec.mutable_data()->clear_val_path();
  for (auto [name, seq_len] : {std::pair{"val", 0}, std::pair{"long", 128}}) {
    mesa::v1::EvalDataset* d = eval_spec.mutable_eval()->add_datasets();
    d->set_name(name);
    d->set_val_path(TheCorpus().val);
    d->set_seq_len(seq_len);
  }
  auto eval = (*cluster)->Submit(eval_spec);
  ASSERT_TRUE(eval.ok()) << eval.status();
  auto evaluated = (*cluster)->WaitForEnd(eval->id(), kJobTimeout);
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  ASSERT_EQ(evaluated->state(), mesa::v1::JOB_STATE_SUCCEEDED) << evaluated->failure_reason();
  EXPECT_GT(evaluated->result().val_loss(), 0);
  EXPECT_NEAR(evaluated->result().val_perplexity(), std::exp(evaluated->result().val_loss()),
              0.01 * evaluated->result().val_perplexity());
  // Re-read after the fact: durable, not just in the watch stream.
  auto again = (*cluster)->client().Get(eval->id());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->result().val_loss(), evaluated->result().val_loss());
  // The CG sweep reached the job's result through the worker, typed, and was stored.
  ASSERT_EQ(again->result().cg_sweep_size(), 2);
  EXPECT_EQ(again->result().cg_sweep(0).cg_mode(), "fixed");
  EXPECT_LE(again->result().cg_sweep(0).cg_steps_mean(), 1.0);
  EXPECT_EQ(again->result().cg_sweep(1).cg_mode(), "tolerance");
  EXPECT_GT(again->result().cg_sweep(1).val_loss(), 0);
  // The tolerance's mean CG steps per position over the first dataset (64 tokens); none for fixed.
  EXPECT_EQ(again->result().cg_sweep(0).cg_steps_at_position_size(), 0);
  ASSERT_EQ(again->result().cg_sweep(1).cg_steps_at_position_size(), 64);
  EXPECT_GT(again->result().cg_sweep(1).cg_steps_at_position(10), 0);
  // Both datasets, their per-position curves (the longer window's too) and the CG figures came
  // through the worker typed and whole.
  const mesa::v1::JobResult& r = again->result();
  ASSERT_EQ(r.datasets_size(), 2);
  EXPECT_EQ(r.datasets(0).name(), "val");
  EXPECT_EQ(r.datasets(1).name(), "long");
  EXPECT_EQ(r.datasets(1).seq_len(), 128);
  EXPECT_EQ(r.datasets(0).nll_at_position_size(), 64);
  EXPECT_EQ(r.datasets(1).nll_at_position_size(), 128);
  EXPECT_EQ(r.datasets(1).count_at_position_size(), 128);
  EXPECT_GT(r.datasets(1).count_at_position(0), 0);
  EXPECT_NEAR(r.average_loss(), (r.datasets(0).loss() + r.datasets(1).loss()) / 2, 1e-9);
  EXPECT_FLOAT_EQ(r.val_loss(), static_cast<float>(r.datasets(0).loss()));
  EXPECT_EQ(r.cg().cg_mode(), "fixed");
  EXPECT_GT(r.cg().cg_steps_mean(), 0);
  // A list leaves the curves out; GetJob has them.
  auto listed = (*cluster)->client().List(mesa::v1::ListJobsRequest(), 100);
  ASSERT_TRUE(listed.ok()) << listed.status();
  for (const Job& j : *listed) {
    for (const auto& d : j.result().datasets()) EXPECT_EQ(d.nll_at_position_size(), 0) << j.id();
    for (const auto& p : j.result().cg_sweep()) {
      EXPECT_EQ(p.cg_steps_at_position_size(), 0) << j.id();
    }
  }
  // They survive a coordinator restart, and ΔNLL of the model against itself is 0 at every
  // position.
  ASSERT_TRUE((*cluster)->KillCoordinator().ok());
  ASSERT_TRUE((*cluster)->StartCoordinator().ok());
  auto restarted = (*cluster)->WaitFor(
      eval->id(), [](const Job& j) { return IsTerminal(j.state()); }, kJobTimeout);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  ASSERT_EQ(restarted->result().datasets_size(), 2);
  ASSERT_EQ(restarted->result().cg_sweep_size(), 2);
  EXPECT_EQ(restarted->result().cg_sweep(1).cg_steps_at_position_size(), 64);
  for (int i = 0; i < 2; ++i) {
    const auto& before = r.datasets(i);
    const auto& after = restarted->result().datasets(i);
    ASSERT_EQ(after.nll_at_position_size(), before.nll_at_position_size());
    for (int k = 0; k < before.nll_at_position_size(); ++k) {
      EXPECT_EQ(after.nll_at_position(k), before.nll_at_position(k));
      EXPECT_EQ(after.mean_nll_so_far(k), before.mean_nll_so_far(k));
      EXPECT_EQ(after.count_at_position(k), before.count_at_position(k));
    }
  }
  auto self = cli::CompareNll(*restarted, *again);
  ASSERT_TRUE(self.ok()) << self.status();
  ASSERT_EQ(self->datasets_size(), 2);
  for (const auto& d : self->datasets()) {
    EXPECT_GT(d.positions_size(), 0);
    for (double delta : d.delta_nll()) EXPECT_EQ(delta, 0.0);
  }

  // Task scoring from a JSONL file (no validation set): per task accuracy, typed, through the
  // worker; the same file twice gives the same figures; a malformed line fails the job once,
  // naming the file and line.
  const std::string task_dir = testing::NewTempDir("tasks-");
  const std::string task_file = task_dir + "/tiny.jsonl";
  std::ofstream(task_file)
      << "{\"context\": \"The cat sat on the\", \"choices\": [\" mat\", \" sky\"], \"gold\": 0}\n"
         "{\"context\": \"One, two,\", \"choices\": [\" three\", \" blue\", \" 9\"], \"gold\": 0}\n"
         "{\"context\": \"Once upon a\", \"target\": \" time\"}\n";
  JobSpec task_spec = TinyEval("eval-tasks", job->result().checkpoint_path());
  task_spec.mutable_data()->clear_val_path();
  for (auto [name, shots] : {std::pair{"tiny", 0}, std::pair{"tiny-1shot", 1}}) {
    mesa::v1::EvalTask* t = task_spec.mutable_eval()->add_tasks();
    t->set_name(name);
    t->set_path(task_file);
    t->set_num_fewshot(shots);
  }
  // A benchmark's upstream rows through its adapter (PIQA's keys), and a group averaging it with
  // the first task.
  const std::string piqa_file = task_dir + "/piqa.jsonl";
  std::ofstream(piqa_file)
      << "{\"goal\": \"Keep a paper stack from blowing away\", \"sol1\": \"Put a stone on it.\", "
         "\"sol2\": \"Put a feather on it.\", \"label\": 0}\n"
         "{\"goal\": \"Cool a drink\", \"sol1\": \"Add ice.\", \"sol2\": \"Add salt.\", "
         "\"label\": \"0\"}\n";
  mesa::v1::EvalTask* piqa = task_spec.mutable_eval()->add_tasks();
  piqa->set_name("piqa");
  piqa->set_path(piqa_file);
  piqa->set_adapter("piqa");
  // The recall suite's SWDE rows: decoded greedily (48 tokens, to a newline), scored by contains.
  const std::string swde_file = task_dir + "/swde.jsonl";
  std::ofstream(swde_file)
      << "{\"key\": \"director\", \"value\": \"Ana Ruiz\", \"text\": \"Title: The Quiet Harbor. "
         "Director: Ana Ruiz.\\ndirector:\"}\n"
         "{\"key\": \"year\", \"value\": \"2011\", \"text\": \"Year: 2011.\"}\n";
  mesa::v1::EvalTask* swde = task_spec.mutable_eval()->add_tasks();
  swde->set_name("swde");
  swde->set_path(swde_file);
  swde->set_adapter("based_swde");
  // Generated needle-in-a-haystack items, longer than the job's window (seq_len 64).
  mesa::v1::EvalTask* niah = task_spec.mutable_eval()->add_tasks();
  niah->set_name("niah");
  niah->mutable_niah()->add_variants("single_1");
  niah->mutable_niah()->add_variants("multikey_2");
  niah->mutable_niah()->add_lengths(400);
  niah->mutable_niah()->set_items(2);
  niah->set_max_new_tokens(8);
  // Few-shot generation (the paper's Tables 15-16): unscrambling over two draws of one
  // demonstration each, scored by exact match; translation with a demonstration from its own
  // file, scored by corpus BLEU.
  const std::string unscramble_file = task_dir + "/unscramble.jsonl";
  std::ofstream(unscramble_file)
      << "{\"context\": \"Unscramble: tac =\", \"completion\": \"cat\"}\n"
         "{\"context\": \"Unscramble: godo =\", \"completion\": \"good\"}\n"
         "{\"context\": \"Unscramble: nur =\", \"completion\": \"run\"}\n";
  mesa::v1::EvalTask* unscramble = task_spec.mutable_eval()->add_tasks();
  unscramble->set_name("unscramble");
  unscramble->set_path(unscramble_file);
  unscramble->set_adapter("unscramble");
  unscramble->set_num_fewshot(1);
  unscramble->set_fewshot_draws(2);
  unscramble->set_max_new_tokens(4);
  const std::string wmt_file = task_dir + "/wmt.jsonl";
  const std::string wmt_shots = task_dir + "/wmt_validation.jsonl";
  std::ofstream(wmt_file)
      << "{\"translation\": {\"fr\": \"Le chat dort.\", \"en\": \"The cat sleeps.\"}}\n"
         "{\"translation\": {\"fr\": \"Il pleut.\", \"en\": \"It is raining.\"}}\n";
  std::ofstream(wmt_shots) << "{\"translation\": {\"fr\": \"Bonjour.\", \"en\": \"Hello.\"}}\n";
  mesa::v1::EvalTask* wmt = task_spec.mutable_eval()->add_tasks();
  wmt->set_name("wmt");
  wmt->set_path(wmt_file);
  wmt->set_adapter("wmt_fr_en");
  wmt->set_num_fewshot(1);
  wmt->set_fewshot_path(wmt_shots);
  wmt->set_max_new_tokens(6);
  task_spec.mutable_eval()->set_items_output(true);
  mesa::v1::EvalTaskGroup* group = task_spec.mutable_eval()->add_task_groups();
  group->set_name("local");
  group->add_tasks("tiny");
  group->add_tasks("piqa");
  auto tasks = (*cluster)->Submit(task_spec);
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  auto scored = (*cluster)->WaitForEnd(tasks->id(), kJobTimeout);
  ASSERT_TRUE(scored.ok()) << scored.status();
  ASSERT_EQ(scored->state(), mesa::v1::JOB_STATE_SUCCEEDED) << scored->failure_reason();
  ASSERT_EQ(scored->result().tasks_size(), 7);
  // eval.items_output: one JSON line per item in the job's own checkpoint directory.
  const std::string tiny_items = scored->result().tasks(0).items_path();
  EXPECT_TRUE(absl::StrContains(tiny_items, "/" + tasks->id() + "/items/tiny.jsonl")) << tiny_items;
  std::ifstream tiny_lines(tiny_items);
  int item_lines = 0;
  for (std::string line; std::getline(tiny_lines, line);) {
    EXPECT_TRUE(absl::StrContains(line, "\"requests\":")) << line;
    ++item_lines;
  }
  EXPECT_EQ(item_lines, 3);
  const mesa::v1::TaskResult& unscramble_result = scored->result().tasks(5);
  EXPECT_EQ(unscramble_result.primary_metric(), "exact_match");
  EXPECT_EQ(unscramble_result.fewshot_draws(), 2);
  ASSERT_EQ(unscramble_result.draws_size(), 2);
  ASSERT_EQ(unscramble_result.metrics_size(), 2);  // exact_match, contains
  EXPECT_EQ(unscramble_result.metrics(0).name(), "exact_match");
  for (int m = 0; m < 2; ++m) {
    const double a = unscramble_result.draws(0).metrics(m).value();
    const double b = unscramble_result.draws(1).metrics(m).value();
    EXPECT_DOUBLE_EQ(unscramble_result.metrics(m).value(), (a + b) / 2);
    EXPECT_NEAR(unscramble_result.metrics(m).draw_std(), std::abs(a - b) / std::sqrt(2.0), 1e-12);
  }
  const mesa::v1::TaskResult& wmt_result = scored->result().tasks(6);
  EXPECT_EQ(wmt_result.primary_metric(), "bleu");
  ASSERT_EQ(wmt_result.metrics_size(), 3);  // exact_match, contains, bleu
  EXPECT_EQ(wmt_result.metrics(2).name(), "bleu");
  EXPECT_GE(wmt_result.metrics(2).value(), 0.0);
  EXPECT_LE(wmt_result.metrics(2).value(), 100.0);
  EXPECT_EQ(wmt_result.metrics(2).stderr_method(), "bootstrap");
  EXPECT_EQ(wmt_result.metrics(2).count(), 2);
  const mesa::v1::TaskResult& niah_result = scored->result().tasks(4);
  EXPECT_EQ(niah_result.items(), 4);
  EXPECT_EQ(niah_result.primary_metric(), "match_all");
  ASSERT_EQ(niah_result.metrics_size(), 2);
  EXPECT_EQ(niah_result.metrics(0).name(), "match_all");
  EXPECT_EQ(niah_result.max_new_tokens(), 8);
  int per_length = 0;
  for (const mesa::v1::NiahCell& c : niah_result.niah_cells()) {
    if (c.variant().empty() && c.depth_decile() == -1) {
      ++per_length;
      EXPECT_EQ(c.length(), 400);
      EXPECT_EQ(c.count(), 4);
    }
  }
  EXPECT_EQ(per_length, 1);
  const mesa::v1::TaskResult& swde_result = scored->result().tasks(3);
  ASSERT_EQ(swde_result.metrics_size(), 2);  // exact_match, contains
  EXPECT_EQ(swde_result.metrics(1).name(), "contains");
  EXPECT_EQ(swde_result.metrics(1).count(), 2);
  EXPECT_EQ(swde_result.primary_metric(), "contains");
  EXPECT_EQ(swde_result.max_new_tokens(), 48);
  ASSERT_EQ(swde_result.stop_size(), 1);
  EXPECT_EQ(swde_result.stop(0), "\n");
  const mesa::v1::TaskResult& piqa_result = scored->result().tasks(2);
  EXPECT_EQ(piqa_result.adapter(), "piqa");
  EXPECT_EQ(piqa_result.items(), 2);
  EXPECT_EQ(piqa_result.scored(), 2);
  EXPECT_EQ(piqa_result.primary_metric(), "acc_tok");  // the paper's metric for PIQA
  EXPECT_EQ(piqa_result.file_sha256().size(), 64u);
  ASSERT_EQ(piqa_result.metrics_size(), 5);  // acc, acc_norm, acc_bytes, acc_tok, exact_match
  EXPECT_EQ(piqa_result.metrics(3).name(), "acc_tok");
  EXPECT_EQ(piqa_result.metrics(3).count(), 2);
  const mesa::v1::TaskResult& tiny_result = scored->result().tasks(0);
  EXPECT_EQ(tiny_result.primary_metric(), "acc");
  EXPECT_TRUE(tiny_result.legacy_norm());
  ASSERT_EQ(scored->result().task_groups_size(), 1);
  EXPECT_DOUBLE_EQ(scored->result().task_groups(0).value(),
                   (tiny_result.metrics(0).value() + piqa_result.metrics(3).value()) / 2);
  EXPECT_TRUE(absl::StrContains(cli::FormatJobDetails(*scored, absl::Now()), "Group local"));

  // The same tasks as an array of three shard jobs, at most two at a time: the coordinator merges
  // the shards' item records into the figures the single job gave, bit for bit.
  JobSpec sharded_spec = task_spec;
  sharded_spec.set_name("eval-tasks-sharded");
  sharded_spec.mutable_array()->set_shards(3);
  sharded_spec.mutable_array()->set_max_parallel(2);
  auto sharded = (*cluster)->Submit(sharded_spec);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  auto merged = (*cluster)->WaitForEnd(sharded->id(), kJobTimeout);
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_EQ(merged->state(), mesa::v1::JOB_STATE_SUCCEEDED) << merged->failure_reason();
  const mesa::v1::ArrayResult& table = merged->result().array();
  EXPECT_EQ(table.children_size(), 3);
  EXPECT_TRUE(table.missing().empty());
  int task_rows = 0, metrics_reported = 0;
  for (const mesa::v1::TaskResult& t : scored->result().tasks())
    metrics_reported += t.metrics_size();
  for (const mesa::v1::ArrayRow& row : table.rows()) {
    EXPECT_EQ(row.job_ids_size(), 3);
    if (row.kind() == "group") {
      EXPECT_EQ(row.value(), scored->result().task_groups(0).value());
      EXPECT_EQ(row.stderr(), scored->result().task_groups(0).stderr());
      continue;
    }
    ASSERT_EQ(row.kind(), "task");
    ++task_rows;
    for (const mesa::v1::TaskResult& t : scored->result().tasks()) {
      for (const mesa::v1::MetricValue& m : t.metrics()) {
        if (t.name() != row.name() || m.name() != row.metric()) continue;
        EXPECT_EQ(row.value(), m.value()) << row.name() << " " << row.metric();
        EXPECT_EQ(row.stderr(), m.stderr()) << row.name() << " " << row.metric();
        EXPECT_EQ(row.count(), m.count()) << row.name() << " " << row.metric();
      }
    }
  }
  EXPECT_EQ(task_rows, metrics_reported);
  EXPECT_TRUE(absl::StartsWith(cli::ArrayCsv(table), "checkpoint,cg_setting,kind,name,metric"));
  for (int i = 0; i < 5; ++i) task_spec.mutable_eval()->mutable_tasks()->RemoveLast();
  task_spec.mutable_eval()->clear_task_groups();
  EXPECT_EQ(scored->result().datasets_size(), 0);
  for (int i = 0; i < 2; ++i) {
    const mesa::v1::TaskResult& t = scored->result().tasks(i);
    EXPECT_EQ(t.examples(), 3);
    EXPECT_EQ(t.multiple_choice(), 2);
    EXPECT_EQ(t.path(), task_file);
    // Three examples: every accuracy is a multiple of 1/3.
    EXPECT_NEAR(t.accuracy() * 3, std::round(t.accuracy() * 3), 1e-9);
    EXPECT_NEAR(t.accuracy_norm() * 3, std::round(t.accuracy_norm() * 3), 1e-9);
  }
  EXPECT_EQ(scored->result().tasks(0).name(), "tiny");
  EXPECT_EQ(scored->result().tasks(1).num_fewshot(), 1);
  EXPECT_TRUE(absl::StrContains(cli::FormatJobDetails(*scored, absl::Now()), "Task tiny-1shot"));
  std::ofstream(task_file, std::ios::app) << "{\"context\": \"x\", \"choices\": []}\n";
  auto bad_task = (*cluster)->Submit(task_spec);
  ASSERT_TRUE(bad_task.ok()) << bad_task.status();
  auto failed = (*cluster)->WaitForEnd(bad_task->id(), kJobTimeout);
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->state(), mesa::v1::JOB_STATE_FAILED);
  EXPECT_EQ(failed->attempts(), 1);
  EXPECT_TRUE(absl::StrContains(failed->failure_reason(), task_file + ":4: choices"))
      << failed->failure_reason();

  // Generate from it: the completions come back with the job, in prompt order, and stay.
  auto gen = (*cluster)->Submit(
      TinyGenerate("generate-ok", job->result().checkpoint_path(), {"The ", "Once upon a time"}));
  ASSERT_TRUE(gen.ok()) << gen.status();
  auto generated = (*cluster)->WaitForEnd(gen->id(), kJobTimeout);
  ASSERT_TRUE(generated.ok()) << generated.status();
  ASSERT_EQ(generated->state(), mesa::v1::JOB_STATE_SUCCEEDED) << generated->failure_reason();
  ASSERT_EQ(generated->result().completions_size(), 2);
  EXPECT_EQ(generated->result().completions(0).prompt(), "The ");
  EXPECT_EQ(generated->result().completions(1).prompt(), "Once upon a time");
  for (const mesa::v1::Completion& c : generated->result().completions()) {
    EXPECT_EQ(c.tokens_size(), 8);
    EXPECT_EQ(c.logprobs_size(), 8);
    EXPECT_EQ(c.finish_reason(), "length");
    EXPECT_GT(c.cg_steps_mean(), 0);  // Mesa layers solved for every token
  }
  auto stored = (*cluster)->client().Get(gen->id());
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->result().completions(1).completion(),
            generated->result().completions(1).completion());
  EXPECT_EQ(stored->result().checkpoint_path(), generated->result().checkpoint_path());
}

// data.synthetic through the service: the per-task accuracy reaches the job's result typed.
TEST(EndToEndTest, SyntheticTaskAccuracyReachesTheJob) {
  auto cluster = Cluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  JobSpec spec = TinyTrain("synthetic", 5, 0);
  spec.mutable_data()->clear_train_path();
  spec.mutable_data()->clear_val_path();
  spec.mutable_data()->set_seq_len(32);
  auto* syn = spec.mutable_data()->mutable_synthetic();
  syn->set_eval_examples(64);
  spec.mutable_training()->set_eval_batches(0);  // every evaluation example
  for (const char* task : {"mqar", "compression"}) {
    mesa::v1::SyntheticTask* t = syn->add_tasks();
    t->set_task(task);
    t->set_seq_len(32);
  }
  syn->mutable_tasks(0)->set_vocab_size(64);
  auto submitted = (*cluster)->Submit(spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto job = (*cluster)->WaitForEnd(submitted->id(), kJobTimeout);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  const mesa::v1::JobResult& r = job->result();
  ASSERT_EQ(r.datasets_size(), 2);
  EXPECT_EQ(r.datasets(0).name(), "mqar");
  EXPECT_EQ(r.datasets(0).tokens(), 64 * 8);  // 8 queries per example, the only scored targets
  EXPECT_EQ(r.datasets(1).name(), "compression");
  EXPECT_EQ(r.datasets(1).tokens(), 64 * 15);
  for (const auto& d : r.datasets()) {
    EXPECT_GE(d.accuracy(), 0.0);
    EXPECT_LE(d.accuracy(), 1.0);
  }
}

TEST(EndToEndTest, HybridDeltaNetMesaTrainsThroughTheService) {
  // The example's pattern (examples/train_hybrid_deltanet_cpu.yaml) on the tiny shape: a DeltaNet
  // layer, then a Mesa layer; trained and then evaluated from its checkpoint.
  auto cluster = Cluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  JobSpec spec = TinyTrain("hybrid", 20, 10);
  spec.mutable_model()->set_n_layers(2);
  spec.mutable_model()->clear_mixer();
  spec.mutable_model()->add_layer_mixers("deltanet");
  spec.mutable_model()->add_layer_mixers("mesa");
  auto submitted = (*cluster)->Submit(spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto job = (*cluster)->WaitForEnd(submitted->id(), kJobTimeout);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  EXPECT_EQ(job->progress().step(), 20);
  EXPECT_GT(job->result().val_loss(), 0);
  JobSpec eval = TinyEval("hybrid-eval", job->result().checkpoint_path());
  eval.mutable_model()->set_n_layers(2);
  eval.mutable_model()->clear_mixer();
  eval.mutable_model()->add_layer_mixers("deltanet");
  eval.mutable_model()->add_layer_mixers("mesa");
  auto evaluated = (*cluster)->Submit(eval);
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  auto done = (*cluster)->WaitForEnd(evaluated->id(), kJobTimeout);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), mesa::v1::JOB_STATE_SUCCEEDED) << done->failure_reason();
  // The checkpoint records the layers' mixers: a model with another list cannot load it.
  eval.set_name("hybrid-eval-swapped");
  eval.mutable_model()->clear_layer_mixers();
  eval.mutable_model()->add_layer_mixers("mesa");
  eval.mutable_model()->add_layer_mixers("deltanet");
  auto wrong = (*cluster)->Submit(eval);
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  auto refused = (*cluster)->WaitForEnd(wrong->id(), kJobTimeout);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->state(), mesa::v1::JOB_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(refused->failure_reason(), "differs from the configured model"))
      << refused->failure_reason();
}

TEST(EndToEndTest, CancelStopsTheTrainerAndLeavesAUsableCheckpoint) {
  auto cluster = Cluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto submitted = (*cluster)->Submit(TinyTrain("cancel-me", 100000, 0));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto running = (*cluster)->WaitFor(
      submitted->id(), [](const Job& job) { return job.progress().step() >= 3; }, kJobTimeout);
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_TRUE((*cluster)->client().Cancel(submitted->id(), "e2e test").ok());
  auto job = (*cluster)->WaitForEnd(submitted->id(), absl::Seconds(60));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), mesa::v1::JOB_STATE_CANCELLED) << StateName(*job);
  // SIGTERM made the trainer checkpoint (interval 0 = only at the end and on SIGTERM).
  ASSERT_FALSE(job->latest_checkpoint().empty());
  EXPECT_TRUE(std::filesystem::exists(job->latest_checkpoint())) << job->latest_checkpoint();

  // Usable: an evaluation job loads it.
  auto eval = (*cluster)->Submit(TinyEval("eval-cancelled", job->latest_checkpoint()));
  ASSERT_TRUE(eval.ok()) << eval.status();
  auto evaluated = (*cluster)->WaitForEnd(eval->id(), kJobTimeout);
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  EXPECT_EQ(evaluated->state(), mesa::v1::JOB_STATE_SUCCEEDED) << evaluated->failure_reason();
  EXPECT_GT(evaluated->result().val_loss(), 0);
}

// JobSpec.max_run_seconds: the coordinator cancels an attempt that runs past it, the trainer
// checkpoints on the way out, and the job says why it ended.
// A pipeline in one go: the evaluation waits for the training job, then evaluates the checkpoint
// it ended with (job:<id>), on real worker processes.
TEST(EndToEndTest, PipelineEvaluatesTheCheckpointItsTrainingJobEndedWith) {
  auto cluster = Cluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto train = (*cluster)->Submit(TinyTrain("pipe-train", 20, 10));
  ASSERT_TRUE(train.ok()) << train.status();
  JobSpec eval_spec = TinyEval("pipe-eval", "job:" + train->id());
  eval_spec.add_depends_on()->set_job_id(train->id());
  auto eval = (*cluster)->Submit(eval_spec);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->state(), mesa::v1::JOB_STATE_QUEUED);
  ASSERT_EQ(eval->waiting_for_size(), 1);
  auto evaluated = (*cluster)->WaitForEnd(eval->id(), kJobTimeout);
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  ASSERT_EQ(evaluated->state(), mesa::v1::JOB_STATE_SUCCEEDED) << evaluated->failure_reason();
  auto trained = (*cluster)->client().Get(train->id());
  ASSERT_TRUE(trained.ok()) << trained.status();
  EXPECT_EQ(trained->state(), mesa::v1::JOB_STATE_SUCCEEDED);
  // The evaluation started only after the training ended, from its last checkpoint.
  EXPECT_GE(evaluated->start_time().seconds(), trained->end_time().seconds());
  EXPECT_EQ(evaluated->spec().eval().checkpoint(), trained->latest_checkpoint());
  EXPECT_GT(evaluated->result().val_loss(), 0);
}

TEST(EndToEndTest, RunTimeLimitCancelsTheAttemptWithACheckpoint) {
  auto cluster = Cluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  JobSpec spec = TinyTrain("time-limited", 100000, 0);
  spec.set_max_run_seconds(3);
  auto submitted = (*cluster)->Submit(spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto running = (*cluster)->WaitFor(
      submitted->id(), [](const Job& job) { return job.progress().step() >= 1; }, kJobTimeout);
  ASSERT_TRUE(running.ok()) << running.status();
  auto job = (*cluster)->WaitForEnd(submitted->id(), absl::Seconds(60));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), mesa::v1::JOB_STATE_CANCELLED) << StateName(*job);
  EXPECT_TRUE(absl::StrContains(job->failure_reason(), "cancelled: time limit: attempt 1 ran "))
      << job->failure_reason();
  EXPECT_TRUE(absl::StrContains(job->failure_reason(), "max_run_seconds 3"))
      << job->failure_reason();
  EXPECT_LT(job->progress().step(), 100000);
  // Stopped by the limit, not by the end of training: it ran at least the limit, and SIGTERM
  // made the trainer checkpoint.
  EXPECT_GE(absl::FromUnixSeconds(job->end_time().seconds()) -
                absl::FromUnixSeconds(job->start_time().seconds()),
            absl::Seconds(2));
  ASSERT_FALSE(job->latest_checkpoint().empty());
  EXPECT_TRUE(std::filesystem::exists(job->latest_checkpoint())) << job->latest_checkpoint();

  // The limit is checked with the spec: a negative one is refused at submission, naming it.
  spec.set_name("bad-limit");
  spec.set_max_run_seconds(-1);
  auto refused = (*cluster)->Submit(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "max_run_seconds")) << refused.status();
}

TEST(EndToEndTest, KilledWorkerJobFinishesOnTheOtherWorkerFromItsCheckpoint) {
  constexpr int64_t kSteps = 400;
  constexpr int64_t kInterval = 50;
  // The uninterrupted reference: the same spec and seed, run standalone by mesa-train.
  const std::string reference_dir = testing::NewTempDir("reference-");
  JobSpec reference = TinyTrain("reference", kSteps, kInterval);
  reference.mutable_checkpoint()->set_dir(reference_dir + "/checkpoints");
  std::string reference_json;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(reference, &reference_json, print).ok());
  { std::ofstream(reference_dir + "/job.yaml") << reference_json; }

  auto cluster = Cluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto submitted = (*cluster)->Submit(TinyTrain("survive-worker", kSteps, kInterval));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  // Start the reference now so the two run side by side.
  auto reference_run = testing::Process::Start(
      TrainerBinary(), {"--config", reference_dir + "/job.yaml", "--workdir", reference_dir});
  ASSERT_TRUE(reference_run.ok()) << reference_run.status();

  // Two checkpoints, then the node dies; its disk lost the newest checkpoint's weights.
  auto checkpointed = WaitForCheckpoint(**cluster, submitted->id(), 2 * kInterval);
  ASSERT_TRUE(checkpointed.ok()) << checkpointed.status();
  ASSERT_EQ(checkpointed->workers_size(), 1);
  const std::string victim = checkpointed->workers(0);
  const int64_t step_at_kill = checkpointed->progress().step();
  ASSERT_TRUE((*cluster)->KillWorker(victim).ok());
  // The newest committed checkpoint is the one `latest` names. The kill may come between a newer
  // step directory's rename and the pointer's update: such a directory went with the node's disk.
  const std::string root = (*cluster)->checkpoint_root() + "/" + submitted->id();
  std::string latest;
  std::getline(std::ifstream(root + "/" + formats::kCheckpointLatestFile), latest);
  ASSERT_TRUE(formats::IsStepDirName(latest)) << latest;
  std::vector<std::string> step_dirs;                           // oldest first
  for (const std::string& dir : formats::ListStepDirs(root)) {  // newest first
    if (dir > root + "/" + latest) {
      std::filesystem::remove_all(dir);
    } else {
      step_dirs.insert(step_dirs.begin(), dir);
    }
  }
  ASSERT_GE(step_dirs.size(), 2u);
  ASSERT_EQ(step_dirs.back(), root + "/" + latest);
  std::filesystem::resize_file(step_dirs.back() + "/model.safetensors", 100);

  auto job = (*cluster)->WaitForEnd(submitted->id(), kJobTimeout);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  EXPECT_EQ(job->attempts(), 2);
  ASSERT_EQ(job->workers_size(), 1);
  EXPECT_NE(job->workers(0), victim);
  EXPECT_EQ(job->progress().step(), kSteps);
  EXPECT_LT(step_at_kill, kSteps) << "the job finished before the worker was killed";

  // The retry resumed from the newest valid checkpoint, past the corrupt one: its log says so.
  auto logs = (*cluster)->Logs(submitted->id());
  ASSERT_TRUE(logs.ok()) << logs.status();
  const std::string previous = step_dirs[step_dirs.size() - 2];
  EXPECT_EQ(CountAgentLines(*logs, 2, absl::StrCat("resumed from ", previous)), 1);
  EXPECT_EQ(CountAgentLines(*logs, 2,
                            absl::StrCat("passed over corrupt checkpoints: ", step_dirs.back())),
            1);

  auto reference_exit = (*reference_run)->Wait(kJobTimeout);
  ASSERT_TRUE(reference_exit.ok()) << reference_exit.status();
  ASSERT_EQ(*reference_exit, 0) << (*reference_run)->Stderr();
  // The reference's final validation loss, from its result event on stdout/stderr is not a
  // contract; evaluate both final checkpoints the same way instead.
  auto eval_resumed = (*cluster)->Submit(TinyEval("eval-resumed", job->result().checkpoint_path()));
  auto eval_reference =
      (*cluster)->Submit(TinyEval("eval-reference", reference_dir + "/checkpoints"));
  ASSERT_TRUE(eval_resumed.ok() && eval_reference.ok());
  auto a = (*cluster)->WaitForEnd(eval_resumed->id(), kJobTimeout);
  auto b = (*cluster)->WaitForEnd(eval_reference->id(), kJobTimeout);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->state(), mesa::v1::JOB_STATE_SUCCEEDED) << a->failure_reason();
  ASSERT_EQ(b->state(), mesa::v1::JOB_STATE_SUCCEEDED) << b->failure_reason();
  EXPECT_NEAR(a->result().val_loss(), b->result().val_loss(), 0.02)
      << "resumed run diverged from the uninterrupted one";
}

TEST(EndToEndTest, KilledCoordinatorRestartsAndTheJobFinishes) {
  constexpr int64_t kSteps = 600;
  auto cluster = Cluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto submitted = (*cluster)->Submit(TinyTrain("survive-coordinator", kSteps, 50));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto running = (*cluster)->WaitFor(
      submitted->id(), [](const Job& job) { return job.progress().step() >= 20; }, kJobTimeout);
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_TRUE((*cluster)->KillCoordinator().ok());
  absl::SleepFor(absl::Seconds(1));  // The trainer keeps training; updates queue up on the agent.
  ASSERT_TRUE((*cluster)->StartCoordinator().ok());

  auto job = (*cluster)->WaitForEnd(submitted->id(), kJobTimeout);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  // Reconciled, not restarted: the worker re-registered with the attempt still running.
  EXPECT_EQ(job->attempts(), 1);
  EXPECT_EQ(job->progress().step(), kSteps);
}

TEST(EndToEndTest, MissingDataFailsOnceWithTheReasonAndNoRetry) {
  auto cluster = Cluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  JobSpec spec = TinyTrain("missing-data", 10, 0);
  const std::string missing = (*cluster)->dir() + "/no-such-dir/train_*.bin";
  spec.mutable_data()->set_train_path(missing);
  spec.set_max_retries(3);
  auto submitted = (*cluster)->Submit(spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto job = (*cluster)->WaitForEnd(submitted->id(), kJobTimeout);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), mesa::v1::JOB_STATE_FAILED) << StateName(*job);
  EXPECT_EQ(job->attempts(), 1);
  EXPECT_TRUE(absl::StrContains(job->failure_reason(), "no-such-dir")) << job->failure_reason();
  auto events = (*cluster)->Events(submitted->id());
  ASSERT_TRUE(events.ok()) << events.status();
  for (const auto& event : *events) {
    EXPECT_NE(event.state(), mesa::v1::JOB_STATE_RETRYING) << event.DebugString();
  }
}

TEST(EndToEndTest, TwoWholeClusterJobsRunOneAfterTheOther) {
  auto cluster = Cluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // Each job needs both workers' only CPU slot: two ranks of one thread.
  JobSpec first = TinyTrain("gang-first", 20, 0);
  first.mutable_resources()->set_cpu_ranks(2);
  JobSpec second = TinyTrain("gang-second", 20, 0);
  second.mutable_resources()->set_cpu_ranks(2);
  auto a = (*cluster)->Submit(first);
  auto b = (*cluster)->Submit(second);
  ASSERT_TRUE(a.ok() && b.ok());

  auto job_a = (*cluster)->WaitForEnd(a->id(), kJobTimeout);
  auto job_b = (*cluster)->WaitForEnd(b->id(), kJobTimeout);
  ASSERT_TRUE(job_a.ok()) << job_a.status();
  ASSERT_TRUE(job_b.ok()) << job_b.status();
  // Both trained to the end, each whole: on both workers, with one attempt.
  for (const Job* job : {&*job_a, &*job_b}) {
    EXPECT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
    EXPECT_EQ(job->attempts(), 1);
    EXPECT_EQ(job->progress().step(), 20);
    EXPECT_GT(job->result().final_loss(), 0);
    EXPECT_EQ(std::set<std::string>(job->workers().begin(), job->workers().end()),
              (std::set<std::string>{"w1", "w2"}));
  }
  // Strictly one after the other: the second was scheduled only after the first ended.
  auto events_a = (*cluster)->Events(a->id());
  auto events_b = (*cluster)->Events(b->id());
  ASSERT_TRUE(events_a.ok() && events_b.ok());
  int64_t a_end = 0, b_scheduled = 0;
  for (const auto& event : *events_a) {
    if (IsTerminal(event.state()) && event.type() == mesa::v1::JOB_EVENT_TYPE_STATE_CHANGED) {
      a_end = event.sequence();
    }
  }
  for (const auto& event : *events_b) {
    if (event.state() == mesa::v1::JOB_STATE_SCHEDULED && b_scheduled == 0) {
      b_scheduled = event.sequence();
    }
  }
  EXPECT_GT(a_end, 0);
  EXPECT_GT(b_scheduled, a_end) << "the second whole-cluster job started while the first ran";
}

// How many of the agents' log lines of one attempt (from any worker) contain `text`.

// Regression: a CPU data-parallel job whose two ranks must run on two workers (one slot each) finds
// its peer through the coordinator's rendezvous (each worker has its own rendezvous directory),
// and trains exactly like one process taking the whole batch.
TEST(EndToEndTest, TwoCpuRanksOnTwoWorkersMatchOneProcess) {
  auto cluster = Cluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  JobSpec spec = TinyTrain("dp-two-ranks", 30, 0);
  spec.mutable_resources()->set_cpu_ranks(2);
  auto dp = (*cluster)->Submit(spec);
  ASSERT_TRUE(dp.ok()) << dp.status();
  // The reference: the same spec and seed as one rank (the whole batch of 4 in one process).
  // Queued behind the 2-rank job, it runs after it on one worker.
  JobSpec single = TinyTrain("dp-one-rank", 30, 0);
  single.mutable_resources()->set_cpu_ranks(1);
  auto one = (*cluster)->Submit(single);
  ASSERT_TRUE(one.ok()) << one.status();

  auto job = (*cluster)->WaitForEnd(dp->id(), kJobTimeout);
  auto reference = (*cluster)->WaitForEnd(one->id(), kJobTimeout);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  ASSERT_EQ(reference->state(), mesa::v1::JOB_STATE_SUCCEEDED) << reference->failure_reason();
  EXPECT_EQ(job->attempts(), 1);
  EXPECT_EQ(std::set<std::string>(job->workers().begin(), job->workers().end()),
            (std::set<std::string>{"w1", "w2"}));
  // Same losses up to float summation order (gradients and losses are summed over ranks).
  const double loss = job->result().final_loss(), ref_loss = reference->result().final_loss();
  std::printf("2 ranks: final loss %.9g, val loss %.9g; 1 process: %.9g, %.9g\n", loss,
              job->result().val_loss(), ref_loss, reference->result().val_loss());
  EXPECT_GT(ref_loss, 0);
  EXPECT_NEAR(loss, ref_loss, 1e-4 * ref_loss) << "2 ranks diverged from 1 process";
  EXPECT_NEAR(job->result().val_loss(), reference->result().val_loss(),
              1e-4 * reference->result().val_loss());

  // The rank-0 address went through the coordinator: one worker published it from its own
  // rendezvous directory, the other fetched it into its own; the shared checkpoint directory
  // (the fallback of a trainer without a bridge) was not used.
  auto logs = (*cluster)->Logs(dp->id());
  ASSERT_TRUE(logs.ok()) << logs.status();
  const std::string key = absl::StrCat(dp->id(), ".1.tcp");
  EXPECT_EQ(CountAgentLines(*logs, 1, absl::StrCat("published \"", key, "\"")), 1);
  EXPECT_EQ(CountAgentLines(*logs, 1, absl::StrCat("fetched \"", key, "\"")), 1);
  int rendezvous_dirs_with_value = 0;
  for (const char* worker : {"w1", "w2"}) {
    const std::string dir = (*cluster)->AttemptDir(worker, dp->id(), 1) + "/rendezvous";
    rendezvous_dirs_with_value += std::filesystem::exists(dir + "/" + key);
  }
  EXPECT_EQ(rendezvous_dirs_with_value, 2);
  EXPECT_FALSE(
      std::filesystem::exists((*cluster)->checkpoint_root() + "/" + dp->id() + "/.rendezvous"));
}

// A rank of a running 2-rank job dies (SIGKILL) or hangs (SIGSTOP). The other rank must not
// wait forever: it fails at once on the closed connection, or after the collective timeout; the
// attempt fails as an infrastructure error and the job is retried from its checkpoint.
void RankFailureIsRetriedFromTheCheckpoint(int signal, absl::Duration collective_timeout) {
  ClusterOptions options;
  options.collective_timeout = collective_timeout;
  options.grace_period = absl::Seconds(3);  // The hung rank ignores SIGTERM until SIGKILL.
  auto cluster = Cluster::Start(2, options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  constexpr int64_t kSteps = 300;
  constexpr int64_t kInterval = 25;
  JobSpec spec =
      TinyTrain(signal == SIGKILL ? "dp-rank-killed" : "dp-rank-hung", kSteps, kInterval);
  spec.mutable_resources()->set_cpu_ranks(2);
  auto submitted = (*cluster)->Submit(spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto checkpointed = WaitForCheckpoint(**cluster, submitted->id(), kInterval);
  ASSERT_TRUE(checkpointed.ok()) << checkpointed.status();
  ASSERT_EQ(checkpointed->attempts(), 1);
  // Rank 1 runs on one of the two workers.
  pid_t victim = -1;
  for (const char* worker : {"w1", "w2"}) {
    auto pid = (*cluster)->TrainerPid(worker, submitted->id(), 1, /*rank=*/1);
    if (pid.ok()) victim = *pid;
  }
  ASSERT_GT(victim, 0) << "rank 1's trainer not found";
  const int64_t step_at_failure = checkpointed->progress().step();
  const absl::Time failed_at = absl::Now();
  ASSERT_EQ(kill(victim, signal), 0);

  // The failure is noticed within the collective timeout (plus reporting), not never.
  auto retrying = (*cluster)->WaitFor(
      submitted->id(),
      [](const Job& job) { return job.attempts() >= 2 || IsTerminal(job.state()); },
      collective_timeout + absl::Seconds(30));
  ASSERT_TRUE(retrying.ok()) << retrying.status();
  // A dead peer closes its connection, which the survivor sees at once; a hung one takes the
  // timeout.
  EXPECT_LT(absl::Now() - failed_at,
            (signal == SIGKILL ? absl::ZeroDuration() : collective_timeout) + absl::Seconds(10));
  auto job = (*cluster)->WaitForEnd(submitted->id(), kJobTimeout);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  EXPECT_EQ(job->attempts(), 2);
  EXPECT_EQ(job->progress().step(), kSteps);
  EXPECT_LT(step_at_failure, kSteps) << "the job finished before its rank failed";

  // Retried (not failed) after an infrastructure failure, and resumed from the checkpoint.
  auto events = (*cluster)->Events(submitted->id());
  ASSERT_TRUE(events.ok()) << events.status();
  bool retried = false;
  for (const auto& event : *events) retried |= event.state() == mesa::v1::JOB_STATE_RETRYING;
  EXPECT_TRUE(retried);
  auto logs = (*cluster)->Logs(submitted->id());
  ASSERT_TRUE(logs.ok()) << logs.status();
  EXPECT_GT(CountAgentLines(*logs, 2, "rank 0 resumed from"), 0);
  if (signal == SIGSTOP) {
    // The surviving rank gave up on its peer after the timeout.
    bool timed_out = false;
    for (const auto& line : *logs) {
      timed_out |= line.attempt() == 1 && absl::StrContains(line.text(), "timed out");
    }
    EXPECT_TRUE(timed_out);
  }
}

TEST(EndToEndTest, KilledRankFailsTheAttemptAndTheJobResumes) {
  RankFailureIsRetriedFromTheCheckpoint(SIGKILL, absl::Seconds(30));
}

TEST(EndToEndTest, HungRankTimesOutAndTheJobResumes) {
  // Short, so the test is quick; still far above a step or checkpoint of this tiny model.
  RankFailureIsRetriedFromTheCheckpoint(SIGSTOP, absl::Seconds(6));
}

}  // namespace
}  // namespace mesa::e2e
