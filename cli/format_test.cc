#include "cli/format.h"

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace mesa::cli {
namespace {

using ::mesa::v1::Job;
using ::mesa::v1::JobEvent;
using ::mesa::v1::Progress;

TEST(StateName, StripsPrefix) {
  EXPECT_EQ(StateName(mesa::v1::JOB_STATE_RUNNING), "RUNNING");
  EXPECT_EQ(StateName(mesa::v1::JOB_STATE_RETRYING), "RETRYING");
}

TEST(ExitCodeForState, OnlySucceededIsZero) {
  EXPECT_EQ(ExitCodeForState(mesa::v1::JOB_STATE_SUCCEEDED), 0);
  EXPECT_EQ(ExitCodeForState(mesa::v1::JOB_STATE_FAILED), kExitJobFailed);
  EXPECT_EQ(ExitCodeForState(mesa::v1::JOB_STATE_CANCELLED), kExitJobCancelled);
  EXPECT_NE(ExitCodeForState(mesa::v1::JOB_STATE_RUNNING), 0);
  EXPECT_TRUE(IsTerminal(mesa::v1::JOB_STATE_CANCELLED));
  EXPECT_FALSE(IsTerminal(mesa::v1::JOB_STATE_RETRYING));
}

TEST(ParseStates, AcceptsShortLongAndMixedCase) {
  auto states = ParseStates("queued, RUNNING,JOB_STATE_FAILED");
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(*states, (std::vector<mesa::v1::JobState>{mesa::v1::JOB_STATE_QUEUED,
                                                      mesa::v1::JOB_STATE_RUNNING,
                                                      mesa::v1::JOB_STATE_FAILED}));
  EXPECT_TRUE(ParseStates("")->empty());
}

TEST(ParseStates, RejectsUnknownAndUnspecified) {
  auto bad = ParseStates("queued,runing");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "runing"));
  EXPECT_FALSE(ParseStates("unspecified").ok());
}

TEST(ParseLabels, SplitsPairsAndCommas) {
  auto labels = ParseLabels({"team=nlp,size=small", "empty=", "eq=a=b"});
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(labels->at("team"), "nlp");
  EXPECT_EQ(labels->at("size"), "small");
  EXPECT_EQ(labels->at("empty"), "");
  EXPECT_EQ(labels->at("eq"), "a=b");
  EXPECT_EQ(labels->size(), 4u);
}

TEST(ParseLabels, RejectsMissingEqualsOrKey) {
  EXPECT_FALSE(ParseLabels({"team"}).ok());
  EXPECT_FALSE(ParseLabels({"=x"}).ok());
}

TEST(HumanDuration, PicksTwoUnits) {
  EXPECT_EQ(HumanDuration(absl::Milliseconds(400)), "0s");
  EXPECT_EQ(HumanDuration(absl::Seconds(12)), "12s");
  EXPECT_EQ(HumanDuration(absl::Seconds(185)), "3m05s");
  EXPECT_EQ(HumanDuration(absl::Seconds(3720)), "1h02m");
  EXPECT_EQ(HumanDuration(absl::Hours(50)), "2d02h");
  EXPECT_EQ(HumanDuration(-absl::Seconds(5)), "0s");
}

TEST(FormatAge, CoarseUnits) {
  EXPECT_EQ(FormatAge(absl::Seconds(45)), "45s");
  EXPECT_EQ(FormatAge(absl::Minutes(12)), "12m");
  EXPECT_EQ(FormatAge(absl::Hours(3)), "3h");
  EXPECT_EQ(FormatAge(absl::Hours(24 * 5)), "5d");
  EXPECT_EQ(FormatAge(-absl::Seconds(3)), "0s");
}

TEST(FormatCount, SiSuffixes) {
  EXPECT_EQ(FormatCount(999), "999");
  EXPECT_EQ(FormatCount(12345), "12.3k");
  EXPECT_EQ(FormatCount(2.5e6), "2.5M");
  EXPECT_EQ(FormatCount(3.2e9), "3.2G");
}

TEST(FormatTable, AlignsColumnsAndTrimsTrailingSpace) {
  std::string table =
      FormatTable({"ID", "NAME", "STATE"}, {{"j-1", "a-long-name", "QUEUED"}, {"j-22", "b", ""}});
  EXPECT_EQ(table,
            "ID     NAME          STATE\n"
            "j-1    a-long-name   QUEUED\n"
            "j-22   b\n");
}

Job SampleJob() {
  Job job;
  job.set_id("j-42");
  job.set_state(mesa::v1::JOB_STATE_RUNNING);
  job.set_client_job_id("cid-1");
  auto* spec = job.mutable_spec();
  spec->set_name("tiny");
  spec->set_type(mesa::v1::JOB_TYPE_TRAIN);
  spec->set_priority(5);
  spec->mutable_resources()->set_gpus(2);
  (*spec->mutable_labels())["team"] = "nlp";
  spec->mutable_model()->set_n_layers(2);
  spec->mutable_model()->set_d_model(64);
  job.mutable_create_time()->set_seconds(1'700'000'000);
  job.mutable_start_time()->set_seconds(1'700'000'030);
  job.set_attempts(1);
  job.mutable_progress()->set_step(120);
  job.mutable_progress()->set_total_steps(200);
  job.mutable_progress()->set_loss(3.25f);
  return job;
}

TEST(FormatJobTable, OneAlignedRowPerJob) {
  Job a = SampleJob();
  Job b;
  b.set_id("j-7");
  b.set_state(mesa::v1::JOB_STATE_QUEUED);
  b.mutable_spec()->set_name("eval-something");
  b.mutable_spec()->set_type(mesa::v1::JOB_TYPE_EVAL);
  b.mutable_spec()->set_queue("research");
  b.mutable_create_time()->set_seconds(1'700'000'000);
  absl::Time now = absl::FromUnixSeconds(1'700'000'000 + 600);
  std::string table = FormatJobTable({a, b}, now);
  std::vector<std::string> lines = absl::StrSplit(table, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(absl::StartsWith(lines[0], "ID"));
  // Columns line up: STATE starts at the same offset in every line.
  size_t col = lines[0].find("STATE");
  EXPECT_EQ(lines[1].substr(col, 7), "RUNNING");
  EXPECT_EQ(lines[2].substr(col, 6), "QUEUED");
  EXPECT_TRUE(absl::StrContains(lines[1], "2 GPU"));
  EXPECT_TRUE(absl::StrContains(lines[1], "120/200"));
  EXPECT_TRUE(absl::StrContains(lines[1], "10m"));
  EXPECT_TRUE(absl::StrContains(lines[2], "research"));
  EXPECT_TRUE(absl::StrContains(lines[2], "eval"));
}

TEST(FormatJobDetails, ShowsSetFieldsAligned) {
  absl::Time now = absl::FromUnixSeconds(1'700'000'000 + 90);
  std::string details = FormatJobDetails(SampleJob(), now);
  EXPECT_TRUE(absl::StrContains(details, "ID:             j-42\n")) << details;
  EXPECT_TRUE(absl::StrContains(details, "State:          RUNNING\n")) << details;
  EXPECT_TRUE(absl::StrContains(details, "Client job ID:  cid-1\n")) << details;
  EXPECT_TRUE(absl::StrContains(details, "Labels:         team=nlp\n")) << details;
  EXPECT_TRUE(absl::StrContains(details, "2023-11-14T22:13:20Z (90s ago)")) << details;
  EXPECT_TRUE(absl::StrContains(details, "Run time:       1m00s")) << details;
  EXPECT_TRUE(absl::StrContains(details, "step 120/200  loss 3.2500")) << details;
  EXPECT_FALSE(absl::StrContains(details, "Failure")) << details;
  EXPECT_FALSE(absl::StrContains(details, "Retention")) << details;  // the coordinator's
  mesa::v1::Job kept = SampleJob();
  kept.mutable_spec()->set_retention_seconds(-1);
  EXPECT_TRUE(absl::StrContains(FormatJobDetails(kept, now), "Retention:      kept for ever"))
      << FormatJobDetails(kept, now);
  kept.mutable_spec()->set_retention_seconds(7200);
  EXPECT_TRUE(absl::StrContains(FormatJobDetails(kept, now), "Retention:      2h00m after it ends"))
      << FormatJobDetails(kept, now);
}

TEST(FormatResources, ShowsMemoryPerRank) {
  mesa::v1::Resources r;
  r.set_cpu_ranks(2);
  EXPECT_EQ(FormatResources(r), "CPU 2x1");
  r.set_memory_bytes(int64_t{4} << 30);
  EXPECT_EQ(FormatResources(r), "CPU 2x1 4GiB/rank");
  r.set_gpus(8);
  r.set_memory_bytes(int64_t{1536} << 20);
  EXPECT_EQ(FormatResources(r), "8 GPU 1.5GiB/rank");
  r.set_memory_bytes(int64_t{512} << 20);
  EXPECT_EQ(FormatResources(r), "8 GPU 512MiB/rank");
}

TEST(FormatJobDetails, EvalJobShowsValidationDataAndCheckpoint) {
  Job job;
  job.set_id("j-9");
  job.mutable_spec()->set_type(mesa::v1::JOB_TYPE_EVAL);
  job.mutable_spec()->mutable_data()->set_val_path("data/val.bin");
  job.mutable_spec()->mutable_eval()->set_checkpoint("ckpt/run1");
  std::string details = FormatJobDetails(job, absl::UnixEpoch());
  EXPECT_TRUE(absl::StrContains(details, "Data:             val data/val.bin  tokenizer byte\n"))
      << details;
  EXPECT_TRUE(absl::StrContains(details, "Eval checkpoint:  ckpt/run1\n")) << details;
  EXPECT_FALSE(absl::StrContains(details, "Steps:")) << details;
}

TEST(FormatJobDetails, GenerateJobShowsEachCompletionOnOneLine) {
  Job job;
  job.set_id("j-10");
  job.mutable_spec()->set_type(mesa::v1::JOB_TYPE_GENERATE);
  mesa::v1::Completion* c = job.mutable_result()->add_completions();
  c->set_prompt("Hi");
  c->set_completion(" there\n\"you\"");
  c->add_tokens(1);
  c->add_tokens(2);
  c->set_finish_reason("stop");
  c->set_cg_steps_mean(7.5);
  const std::string details = FormatJobDetails(job, absl::UnixEpoch());
  EXPECT_TRUE(absl::StrContains(details, "generate\n")) << details;
  EXPECT_TRUE(absl::StrContains(details, "Completion 0:")) << details;
  EXPECT_TRUE(absl::StrContains(
      details, "\"Hi\" -> \" there\\n\\\"you\\\"\"  (2 tokens, stop, mean CG steps 7.50)\n"))
      << details;
}

TEST(FormatEventLine, StateChangeAndProgress) {
  JobEvent e;
  e.set_sequence(12);
  e.mutable_time()->set_seconds(1'700'000'000);
  e.set_type(mesa::v1::JOB_EVENT_TYPE_STATE_CHANGED);
  e.set_previous_state(mesa::v1::JOB_STATE_QUEUED);
  e.set_state(mesa::v1::JOB_STATE_SCHEDULED);
  e.set_attempt(1);
  e.set_message("placed on w1");
  EXPECT_EQ(FormatEventLine(e),
            "2023-11-14T22:13:20Z  #12  STATE  QUEUED -> SCHEDULED  attempt 1  placed on w1");

  JobEvent p;
  p.set_sequence(13);
  p.set_type(mesa::v1::JOB_EVENT_TYPE_PROGRESS);
  p.mutable_progress()->set_step(5);
  p.mutable_progress()->set_total_steps(10);
  p.mutable_progress()->set_tokens_per_second(1500);
  EXPECT_EQ(FormatEventLine(p), "-  #13  PROGRESS  step 5/10  1.5k tok/s");
}

TEST(FormatEventLine, Resumed) {
  JobEvent r;
  r.set_sequence(14);
  r.set_type(mesa::v1::JOB_EVENT_TYPE_RESUMED);
  r.set_attempt(2);
  r.set_message("resumed from step 100 (/ck/step_00000100)");
  EXPECT_EQ(FormatEventLine(r),
            "-  #14  RESUMED  attempt 2  resumed from step 100 (/ck/step_00000100)");
}

TEST(FormatProgressBar, FillsProportionallyAndFitsWidth) {
  Progress p;
  p.set_step(50);
  p.set_total_steps(100);
  p.set_loss(2.5f);
  p.set_tokens_per_second(12300);
  p.set_eta_seconds(80);
  std::string bar = FormatProgressBar(p, 100);
  EXPECT_TRUE(absl::StartsWith(bar, "["));
  size_t close = bar.find(']');
  ASSERT_NE(close, std::string::npos);
  std::string cells = bar.substr(1, close - 1);
  EXPECT_EQ(std::count(cells.begin(), cells.end(), '#'), static_cast<long>(cells.size() / 2));
  EXPECT_TRUE(absl::StrContains(bar, "step 50/100  loss 2.5000  12.3k tok/s  ETA 1m20s  50%"))
      << bar;
  EXPECT_LE(FormatProgressBar(p, 30).size(), 30u);
  Progress done;
  done.set_step(100);
  done.set_total_steps(100);
  std::string full = FormatProgressBar(done, 80);
  EXPECT_EQ(full.find('.'), std::string::npos) << full;
  EXPECT_EQ(FormatProgressBar(Progress(), 80), "waiting for progress");
}

TEST(FormatExplain, QueuePosition) {
  mesa::v1::ExplainJobResponse x;
  x.set_state(mesa::v1::JOB_STATE_QUEUED);
  x.set_reason("needs 8 GPUs, 4 free");
  x.set_queue_position(3);
  x.set_pending_jobs(10);
  x.set_free_gpus(4);
  std::string text = FormatExplain("j-1", x);
  EXPECT_TRUE(absl::StrContains(text, "Reason:          needs 8 GPUs, 4 free\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "Queue position:  3 of 10\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "Free GPUs:       4\n")) << text;
}

TEST(FormatLogLine, PrefixesOnlyNonDefaultStreams) {
  mesa::v1::LogLine l;
  l.set_text("step 1 loss 5.0\n");
  l.set_stream("stdout");
  EXPECT_EQ(FormatLogLine(l), "step 1 loss 5.0");
  l.set_rank(1);
  l.set_stream("stderr");
  EXPECT_EQ(FormatLogLine(l), "[rank 1 stderr] step 1 loss 5.0");
}

TEST(ToJson, SnakeCaseAllFieldsEnumNames) {
  Job job;
  job.set_id("j-1");
  job.set_state(mesa::v1::JOB_STATE_QUEUED);
  job.set_client_job_id("c");
  auto json = ToJson(job, /*multiline=*/false);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->find('\n'), std::string::npos);
  EXPECT_TRUE(absl::StrContains(*json, "\"client_job_id\":\"c\"")) << *json;
  EXPECT_TRUE(absl::StrContains(*json, "\"state\":\"JOB_STATE_QUEUED\"")) << *json;
  EXPECT_TRUE(absl::StrContains(*json, "\"attempts\":0")) << *json;
  auto pretty = ToJson(job, /*multiline=*/true);
  ASSERT_TRUE(pretty.ok());
  EXPECT_NE(pretty->find('\n'), std::string::npos);
  EXPECT_NE(pretty->back(), '\n');
}

TEST(FormatTimestamp, UtcOrDash) {
  google::protobuf::Timestamp ts;
  EXPECT_EQ(FormatTimestamp(ts), "-");
  ts.set_seconds(0);
  ts.set_nanos(1);
  EXPECT_EQ(FormatTimestamp(ts), "1970-01-01T00:00:00Z");
}

}  // namespace
TEST(RenderMachineTest, NamesYamlAndJson) {
  mesa::v1::ListJobsResponse list;
  list.add_jobs()->set_id("job-1");
  list.add_jobs()->set_id("job-2");
  auto names = RenderMachine(list, true, OutputFormat::kName);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, "job/job-1\njob/job-2");
  auto none = RenderMachine(mesa::v1::ListJobsResponse(), true, OutputFormat::kName);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
  EXPECT_FALSE(RenderMachine(mesa::v1::LogLine(), true, OutputFormat::kName).ok());

  mesa::v1::Job job;
  job.set_id("job-3");
  job.mutable_spec()->set_name("n");
  job.mutable_spec()->mutable_labels()->insert({"team", "a"});
  auto yaml = RenderMachine(job, true, OutputFormat::kYaml);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_TRUE(absl::StartsWith(*yaml, "id: job-3\nspec:\n  name: n\n")) << *yaml;
  EXPECT_TRUE(absl::StrContains(*yaml, "  labels:\n    team: a\n")) << *yaml;
  EXPECT_TRUE(absl::StrContains(*yaml, "workers: []")) << *yaml;  // empty stays flow style
  // One document of a stream starts with "---".
  auto streamed = RenderMachine(job, false, OutputFormat::kYaml);
  ASSERT_TRUE(streamed.ok());
  EXPECT_TRUE(absl::StartsWith(*streamed, "---\nid: job-3\n")) << *streamed;
  auto json = RenderMachine(job, false, OutputFormat::kJson);
  ASSERT_TRUE(json.ok());
  EXPECT_TRUE(absl::StartsWith(*json, "{\"id\":\"job-3\"")) << *json;
}

TEST(ParseOutputFormatTest, KubectlNames) {
  EXPECT_EQ(*ParseOutputFormat(""), OutputFormat::kText);
  EXPECT_EQ(*ParseOutputFormat("wide"), OutputFormat::kText);
  EXPECT_EQ(*ParseOutputFormat("json"), OutputFormat::kJson);
  EXPECT_EQ(*ParseOutputFormat("yaml"), OutputFormat::kYaml);
  EXPECT_EQ(*ParseOutputFormat("name"), OutputFormat::kName);
  EXPECT_FALSE(ParseOutputFormat("xml").ok());
}

}  // namespace mesa::cli
