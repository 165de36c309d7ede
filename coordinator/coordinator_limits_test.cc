// The coordinator's bounds: finished jobs kept in memory, listing reads, worker input, free text,
// stored text (valid UTF-8), report and log volume, progress events.
#include "coordinator/coordinator.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/utf8.h"
#include "coordinator/test_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "spec/generation.h"
#include "spec/validate_job_spec.h"

namespace mesa::coordinator {
namespace {

using mesa::v1::JobState;

// Finished jobs beyond the bound keep only their index row in memory and are read back from the
// store, complete, when asked for.
TEST_F(CoordinatorTest, FinishedJobsInMemoryAreBounded) {
  max_loaded_finished_jobs_ = 2;
  Restart();
  std::vector<std::string> ids;
  std::vector<mesa::v1::Job> finished;
  for (int i = 0; i < 6; ++i) {
    mesa::v1::JobSpec spec = ValidTrainSpec(absl::StrCat("bounded-", i), 1);
    (*spec.mutable_labels())["batch"] = i % 2 == 0 ? "even" : "odd";
    ids.push_back(Submit(spec));
    mesa::v1::CancelJobRequest cancel;
    cancel.set_id(ids.back());
    cancel.set_reason(absl::StrCat("done ", i));
    ASSERT_TRUE(c_->CancelJob(cancel).ok());
    finished.push_back(*c_->GetJob(ids.back()));
  }
  EXPECT_LE(c_->loaded_finished_jobs(), 3);  // the bound, plus the job the last call read
  for (int i = 0; i < 6; ++i) {
    auto job = c_->GetJob(ids[i]);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*job, finished[i])) << ids[i];
    EXPECT_LE(c_->loaded_finished_jobs(), 3);
  }
  // Watching a dropped job replays all its events; listing by label reads dropped jobs back.
  const std::vector<mesa::v1::JobEvent> events = Events(ids[0]);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().sequence(), finished[0].last_sequence());
  EXPECT_EQ(events.back().state(), JobState::JOB_STATE_CANCELLED);
  mesa::v1::ListJobsRequest list;
  (*list.mutable_labels())["batch"] = "odd";
  auto odd = c_->ListJobs(list);
  ASSERT_TRUE(odd.ok()) << odd.status();
  ASSERT_EQ(odd->jobs_size(), 3);
  EXPECT_EQ(odd->jobs(0).id(), ids[1]);
  EXPECT_EQ(odd->jobs(0).failure_reason(), finished[1].failure_reason());
  // The label filter read every job back; the next call trims the cache to the bound again.
  ASSERT_TRUE(c_->GetJob(ids[5]).ok());
  EXPECT_LE(c_->loaded_finished_jobs(), 3);
}

// After a restart no finished job is in memory: listing by label reads them back, at most 256 per
// call (the coordinator's lock is held meanwhile), and hands out a token to go on; what was read
// keeps its labels once dropped again, so the next listing reads only the matches.
TEST_F(CoordinatorTest, ListingFinishedJobsByLabelReadsTheStoreInBoundedCalls) {
  max_loaded_finished_jobs_ = 4;
  Restart();
  for (int i = 0; i < 600; ++i) {
    mesa::v1::JobSpec spec = ValidTrainSpec(absl::StrCat("listed-", i), 1);
    (*spec.mutable_labels())["team"] = i % 100 == 7 ? "rare" : "common";
    const std::string id = Submit(spec);
    mesa::v1::CancelJobRequest cancel;
    cancel.set_id(id);
    ASSERT_TRUE(c_->CancelJob(cancel).ok());
  }
  Restart();
  auto list_all = [&](int* calls) {
    mesa::v1::ListJobsRequest list;
    (*list.mutable_labels())["team"] = "rare";
    std::vector<std::string> ids;
    *calls = 0;
    while (true) {
      auto page = c_->ListJobs(list);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) break;
      ++*calls;
      for (const mesa::v1::Job& j : page->jobs()) ids.push_back(j.id());
      if (page->next_page_token().empty() || *calls > 100) break;
      list.set_page_token(page->next_page_token());
    }
    return ids;
  };
  int calls = 0;
  std::vector<std::string> rare = list_all(&calls);
  ASSERT_EQ(rare.size(), 6u);
  EXPECT_EQ(calls, 3);  // 600 reads in calls of at most 256
  for (const std::string& id : rare) EXPECT_EQ(c_->GetJob(id)->spec().labels().at("team"), "rare");
  EXPECT_EQ(list_all(&calls), rare);
  EXPECT_EQ(calls, 1);  // labels kept: only the six matches are read
  // Newest first: the same jobs in reverse, across pages of two.
  mesa::v1::ListJobsRequest newest;
  newest.set_newest_first(true);
  newest.set_page_size(2);
  (*newest.mutable_labels())["team"] = "rare";
  std::vector<std::string> reversed;
  for (int pages = 0; pages < 10; ++pages) {
    auto page = c_->ListJobs(newest);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const mesa::v1::Job& j : page->jobs()) reversed.push_back(j.id());
    if (page->next_page_token().empty()) break;
    newest.set_page_token(page->next_page_token());
  }
  EXPECT_EQ(reversed, std::vector<std::string>(rare.rbegin(), rare.rend()));
}

TEST_F(CoordinatorTest, WorkerInputIsBounded) {
  const std::string job = Submit(ValidTrainSpec("bounded", 1));
  Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  // Rendezvous keys per attempt.
  mesa::v1::PutRendezvousRequest put;
  put.set_worker_id("a");
  put.set_lease_id(leases_["a"]);
  put.set_job_id(job);
  put.set_attempt(1);
  put.set_value("v");
  for (int i = 0; i < 4096; ++i) {
    put.set_key(absl::StrCat("k", i));
    ASSERT_TRUE(c_->PutRendezvous(put).ok()) << i;
  }
  put.set_key("one-too-many");
  EXPECT_EQ(c_->PutRendezvous(put).code(), absl::StatusCode::kResourceExhausted);
  put.set_key("k7");  // overwriting an existing key is fine
  EXPECT_TRUE(c_->PutRendezvous(put).ok());
  // Checkpoint paths are refused past 4 KiB; failure messages are kept, truncated.
  mesa::v1::UpdateAttemptRequest r = Report("a", job, 1, mesa::v1::ATTEMPT_PHASE_RUNNING);
  r.set_checkpoint_path(std::string(5000, 'p'));
  EXPECT_EQ(c_->UpdateAttempt(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.clear_checkpoint_path();
  r.set_phase(mesa::v1::ATTEMPT_PHASE_FAILED);
  r.set_failure_kind(mesa::v1::FAILURE_KIND_USER);
  r.set_message(std::string(100000, 'm'));
  ASSERT_TRUE(c_->UpdateAttempt(r).ok());
  const std::string reason = c_->GetJob(job)->failure_reason();
  EXPECT_LT(reason.size(), 17000u);
  EXPECT_TRUE(absl::EndsWith(reason, "(truncated)")) << reason.substr(reason.size() - 40);
  EXPECT_EQ(State(job), JobState::JOB_STATE_FAILED);
}

TEST_F(CoordinatorTest, FreeTextInRequestsIsBoundedAndNotEchoed) {
  // Regression: a 15 MiB cancel reason was stored, and every later listing failed for everyone.
  const std::string id = Submit(ValidTrainSpec("bounded-text", 1));
  mesa::v1::CancelJobRequest cancel;
  cancel.set_id(id);
  cancel.set_reason(std::string(15 << 20, 'r'));
  auto refused = c_->CancelJob(cancel);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "reason: at most 1024 bytes"));
  EXPECT_LT(refused.status().message().size(), 200u) << "the input is not echoed";
  EXPECT_EQ(State(id), JobState::JOB_STATE_QUEUED);
  cancel.set_reason("enough");
  EXPECT_TRUE(c_->CancelJob(cancel).ok());
  mesa::v1::ListJobsRequest list;
  list.set_page_token(std::string(1 << 20, '9'));
  auto listed = c_->ListJobs(list);
  EXPECT_EQ(listed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(listed.status().message().size(), 200u);
  list.set_page_token("not-a-number");
  listed = c_->ListJobs(list);
  EXPECT_EQ(listed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(absl::StrContains(listed.status().message(), "not-a-number"));
  list.clear_page_token();
  (*list.mutable_labels())[std::string(100, 'k')] = "v";
  EXPECT_EQ(c_->ListJobs(list).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, StoredTextIsValidUtf8EvenWhenReportsAreNotOrAreCut) {
  // Regression: a message cut inside a multi-byte character, or raw Latin-1 bytes, stored as they
  // came made every later read of the job fail to serialise.
  const std::string id = Submit(ValidTrainSpec("utf8", 1));
  Register("a", 2);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  mesa::v1::UpdateAttemptRequest r = Report("a", id, 1, mesa::v1::ATTEMPT_PHASE_FAILED);
  r.set_failure_kind(mesa::v1::FAILURE_KIND_USER);
  // 16,383 bytes, then a 3-byte euro sign across the 16,384-byte limit, then a Latin-1 byte.
  r.set_message(std::string(16383, 'm') + "\xE2\x82\xAC caf\xE9");
  auto* log = r.add_logs();
  log->set_stream("stderr");
  log->set_text(std::string(65535, 'l') + "\xE2\x82\xAC");
  r.add_logs()->set_text("caf\xE9.bin");
  ASSERT_TRUE(c_->UpdateAttempt(r).ok());
  for (int round = 0; round < 2; ++round) {  // and after a restart, from the store
    auto job = c_->GetJob(id);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->state(), JobState::JOB_STATE_FAILED);
    EXPECT_TRUE(base::IsValidUtf8(job->failure_reason()));
    EXPECT_NE(job->failure_reason().find("(truncated)"), std::string::npos);
    std::string bytes;
    EXPECT_TRUE(job->SerializeToString(&bytes));
    mesa::v1::Job parsed;
    EXPECT_TRUE(parsed.ParseFromString(bytes));
    mesa::v1::GetJobLogsRequest logs;
    logs.set_id(id);
    int lines = 0;
    ASSERT_TRUE(c_->GetJobLogs(
                      logs,
                      [&](const mesa::v1::LogLine& line) {
                        ++lines;
                        EXPECT_TRUE(base::IsValidUtf8(line.text()));
                        EXPECT_LE(line.text().size(), 65536u);
                        return true;
                      },
                      nullptr)
                    .ok());
    EXPECT_EQ(lines, 2);
    Restart();
  }
}

TEST_F(CoordinatorTest, ReportsAreBoundedResultsAndLogVolumePerUpdateAndPerJobAcrossRestarts) {
  // Regression: 86 MB/s of log text was accepted and stored without end.
  max_log_bytes_per_job_ = 1000;
  Restart();
  const std::string id = Submit(ValidTrainSpec("chatty", 1));
  Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  auto update = [&](int lines, size_t bytes_each) {
    mesa::v1::UpdateAttemptRequest r = Report("a", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING);
    for (int i = 0; i < lines; ++i) r.add_logs()->set_text(std::string(bytes_each, 'x'));
    return c_->UpdateAttempt(r).status();
  };
  // Per call: more lines than the agent ever sends is refused, naming the limit.
  absl::Status too_many = update(kMaxLogLinesPerUpdate + 1, 1);
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("at most 1000 lines"), std::string::npos) << too_many;
  {
    // A final result is bounded too: metric count, metric names, checkpoint path.
    mesa::v1::UpdateAttemptRequest r = Report("a", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING);
    for (int i = 0; i <= kMaxResultMetrics; ++i) {
      (*r.mutable_result()->mutable_metrics())[absl::StrCat("m", i)] = i;
    }
    EXPECT_EQ(c_->UpdateAttempt(r).status().code(), absl::StatusCode::kInvalidArgument);
    r.mutable_result()->clear_metrics();
    (*r.mutable_result()->mutable_metrics())[std::string(kMaxResultMetricNameBytes + 1, 'n')] = 1;
    EXPECT_EQ(c_->UpdateAttempt(r).status().code(), absl::StatusCode::kInvalidArgument);
    r.mutable_result()->clear_metrics();
    r.mutable_result()->set_checkpoint_path(std::string(1 << 20, 'p'));
    absl::Status path = c_->UpdateAttempt(r).status();
    EXPECT_EQ(path.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_LT(path.message().size(), 200u);  // the input is not echoed
  }
  ASSERT_TRUE(update(3, 300).ok());  // 900 bytes stored
  ASSERT_TRUE(update(5, 300).ok());  // over 1000: one note, then counted only
  Restart();                         // the count survives a restart (it lives in the job)
  Register("a", 1, {{id, 1}});
  ASSERT_TRUE(update(2, 300).ok());
  auto job = c_->GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->log_bytes(), 900);
  EXPECT_EQ(job->dropped_log_lines(), 7);
  std::vector<mesa::v1::LogLine> stored;
  mesa::v1::GetJobLogsRequest logs;
  logs.set_id(id);
  ASSERT_TRUE(c_->GetJobLogs(
                    logs,
                    [&](const mesa::v1::LogLine& line) {
                      stored.push_back(line);
                      return true;
                    },
                    nullptr)
                  .ok());
  ASSERT_EQ(stored.size(), 4u);
  EXPECT_NE(stored[3].text().find("reached its limit of 1000 bytes"), std::string::npos);
  for (size_t i = 0; i < stored.size(); ++i) EXPECT_EQ(stored[i].sequence(), int64_t(i + 1));
}

TEST_F(CoordinatorTest, EvaluationResultsAreBoundedAsTheirSpecsAre) {
  const std::string id = Submit(ValidTrainSpec("evalres", 1));
  Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  // A final result over a bound is refused, naming the field, and leaves the job running.
  auto expect_refused = [&](const mesa::v1::JobResult& result, const std::string& field) {
    mesa::v1::UpdateAttemptRequest r = Report("a", id, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED);
    *r.mutable_result() = result;
    absl::Status s = c_->UpdateAttempt(r).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_TRUE(absl::StartsWith(s.message(), field + ": at most")) << s;
    EXPECT_EQ(State(id), JobState::JOB_STATE_RUNNING) << field;
  };
  auto accepted = [&](const mesa::v1::JobResult& result,
                      mesa::v1::AttemptPhase phase = mesa::v1::ATTEMPT_PHASE_RUNNING) {
    mesa::v1::UpdateAttemptRequest r = Report("a", id, 1, phase);
    *r.mutable_result() = result;
    return c_->UpdateAttempt(r).status();
  };
  // CG sweep settings.
  mesa::v1::JobResult sweep;
  for (int i = 0; i < spec::kMaxCgSweepSettings; ++i) sweep.add_cg_sweep()->set_cg_max_steps(i);
  EXPECT_TRUE(accepted(sweep).ok());
  sweep.add_cg_sweep();
  expect_refused(sweep, "result.cg_sweep");
  // The sweep's per-position curves count toward the curve positions with the datasets'.
  mesa::v1::JobResult curves;
  curves.add_datasets()->mutable_nll_at_position()->Resize(spec::kMaxEvalCurvePositions / 2, 1.0);
  curves.add_cg_sweep()->mutable_cg_steps_at_position()->Resize(spec::kMaxEvalCurvePositions / 4,
                                                                2.0);
  curves.add_cg_sweep()->mutable_cg_steps_at_position()->Resize(spec::kMaxEvalCurvePositions / 4,
                                                                2.0);
  EXPECT_TRUE(accepted(curves).ok());
  curves.mutable_cg_sweep(1)->add_cg_steps_at_position(2.0);
  expect_refused(curves, "result.datasets and result.cg_sweep");
  mesa::v1::JobResult only_sweep;
  only_sweep.add_cg_sweep()->mutable_cg_steps_at_position()->Resize(
      spec::kMaxEvalCurvePositions + 1, 2.0);
  expect_refused(only_sweep, "result.datasets and result.cg_sweep");
  // Internals: a layer each, a head each of a layer, and layer x head entries in all (the spec's
  // bound on n_layers x n_heads): exactly that many over the first layers is accepted.
  static_assert(spec::kMaxInternalsEntries % spec::kMaxHeads == 0);
  constexpr int kFullLayers = spec::kMaxInternalsEntries / spec::kMaxHeads;
  static_assert(kFullLayers < spec::kMaxLayers);
  mesa::v1::JobResult internals;
  for (int l = 0; l < spec::kMaxLayers; ++l) internals.add_internals()->set_layer(l);
  for (int l = 0; l < kFullLayers; ++l) {
    for (int h = 0; h < spec::kMaxHeads; ++h)
      internals.mutable_internals(l)->add_heads()->set_head(h);
  }
  EXPECT_TRUE(accepted(internals).ok());
  internals.mutable_internals(3)->add_heads();
  expect_refused(internals, "result.internals[3].heads");
  internals.mutable_internals(3)->mutable_heads()->RemoveLast();
  internals.mutable_internals(kFullLayers)->add_heads();
  expect_refused(internals, "result.internals.heads");
  internals.mutable_internals(kFullLayers)->mutable_heads()->RemoveLast();
  internals.add_internals();
  expect_refused(internals, "result.internals");
  // Within every bound, the final result is stored.
  internals.mutable_internals()->RemoveLast();
  ASSERT_TRUE(accepted(internals, mesa::v1::ATTEMPT_PHASE_SUCCEEDED).ok());
  EXPECT_EQ(State(id), JobState::JOB_STATE_SUCCEEDED);
  const auto stored = c_->GetJob(id);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->result().internals_size(), spec::kMaxLayers);
  int64_t heads = 0;
  for (const auto& layer : stored->result().internals()) heads += layer.heads_size();
  EXPECT_EQ(heads, spec::kMaxInternalsEntries);
}

TEST_F(CoordinatorTest, GenerationResultsAreBoundedAsTheirSpecsAre) {
  const std::string id = Submit(ValidTrainSpec("genres", 1));
  Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  auto report = [&](const mesa::v1::JobResult& result, mesa::v1::AttemptPhase phase) {
    mesa::v1::UpdateAttemptRequest r = Report("a", id, 1, phase);
    *r.mutable_result() = result;
    return c_->UpdateAttempt(r).status();
  };
  // A final result over a bound is refused, naming the field, and leaves the job running.
  auto expect_refused = [&](const mesa::v1::JobResult& result, const std::string& field) {
    absl::Status s = report(result, mesa::v1::ATTEMPT_PHASE_SUCCEEDED);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_TRUE(absl::StartsWith(s.message(), field + ": at most")) << s;
    EXPECT_EQ(State(id), JobState::JOB_STATE_RUNNING) << field;
  };
  auto accepted = [&](const mesa::v1::JobResult& result) {
    return report(result, mesa::v1::ATTEMPT_PHASE_RUNNING).ok();
  };
  // A completion per prompt.
  mesa::v1::JobResult many;
  for (int i = 0; i < spec::kMaxPrompts; ++i) many.add_completions()->set_prompt("p");
  EXPECT_TRUE(accepted(many));
  many.add_completions();
  expect_refused(many, "result.completions");
  // Each bound of one completion (the second), exactly at the limit and one over.
  auto one_over = [&](const std::string& name, auto fill_to) {
    mesa::v1::JobResult r;
    r.add_completions()->set_completion("first");
    fill_to(*r.add_completions(), 0);
    EXPECT_TRUE(accepted(r)) << name;
    fill_to(*r.mutable_completions(1), 1);
    expect_refused(r, "result.completions[1]." + name);
  };
  one_over("prompt", [](mesa::v1::Completion& c, int over) {
    c.set_prompt(std::string(spec::kMaxPromptBytes + over, 'x'));
  });
  one_over("completion", [](mesa::v1::Completion& c, int over) {
    c.set_completion(std::string(spec::kMaxCompletionBytes + over, 'x'));
  });
  one_over("finish_reason", [](mesa::v1::Completion& c, int over) {
    c.set_finish_reason(std::string(spec::kMaxFinishReasonBytes + over, 'x'));
  });
  one_over("tokens", [](mesa::v1::Completion& c, int over) {
    c.mutable_tokens()->Resize(spec::kMaxNewTokens + over, 7);
  });
  one_over("logprobs", [](mesa::v1::Completion& c, int over) {
    c.mutable_logprobs()->Resize(spec::kMaxNewTokens + over, -1.0);
  });
  one_over("cg_steps", [](mesa::v1::Completion& c, int over) {
    c.mutable_cg_steps()->Resize(spec::kMaxNewTokens + over, 3.0);
  });
  one_over("cg_layers",
           [](mesa::v1::Completion& c, int over) { c.set_cg_layers(spec::kMaxLayers + over); });
  one_over("cg_heads",
           [](mesa::v1::Completion& c, int over) { c.set_cg_heads(spec::kMaxHeads + over); });
  // One CG count per token, Mesa layer and head: 2 tokens x 3 layers x 4 heads.
  one_over("cg_steps_by_layer_head", [](mesa::v1::Completion& c, int over) {
    c.mutable_tokens()->Resize(2, 7);
    c.set_cg_layers(3);
    c.set_cg_heads(4);
    c.mutable_cg_steps_by_layer_head()->Resize(2 * 3 * 4 + over, 5);
  });
  // Within every bound, the final result is stored.
  mesa::v1::JobResult done;
  mesa::v1::Completion& c = *done.add_completions();
  c.set_prompt("Once");
  c.set_completion(" upon");
  c.add_tokens(7);
  c.add_logprobs(-0.5);
  c.set_finish_reason("length");
  ASSERT_TRUE(report(done, mesa::v1::ATTEMPT_PHASE_SUCCEEDED).ok());
  EXPECT_EQ(State(id), JobState::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(c_->GetJob(id)->result().completions(0).completion(), " upon");
}

TEST_F(CoordinatorTest, ProgressEventsAreRateLimited) {
  const std::string id = Submit(ValidTrainSpec("p", 1));
  Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  for (int i = 0; i < 10; ++i) {
    mesa::v1::UpdateAttemptRequest u = Report("a", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING);
    u.mutable_progress()->set_step(i);
    u.mutable_progress()->set_loss(5.0f - i * 0.1f);
    ASSERT_TRUE(c_->UpdateAttempt(u).ok());
    if (i == 4) clock_.Advance(absl::Seconds(1));
  }
  EXPECT_EQ(c_->GetJob(id)->progress().step(), 9);  // always current
  ASSERT_TRUE(Update("a", id, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED).ok());
  int progress_events = 0;
  for (const auto& e : Events(id)) progress_events += e.type() == mesa::v1::JOB_EVENT_TYPE_PROGRESS;
  // Two of the ten reports, and the last step when the job succeeds (below).
  EXPECT_EQ(progress_events, 3);
  // Per-job trainer series are the worker's; the coordinator never exports them.
  EXPECT_EQ(metrics_.Serialize().find("job_id="), std::string::npos);
}

// The last progress kept can be short of the end (reports and events are rate-limited): a
// training job that succeeds ran every step, and shows that as a last progress event
// before the result, so a progress bar and `get` end at 100%.
TEST_F(CoordinatorTest, ASucceededTrainingJobEndsAtItsLastStep) {
  const std::string id = Submit(ValidTrainSpec("full", 1));
  Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  mesa::v1::UpdateAttemptRequest u = Report("a", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING);
  u.mutable_progress()->set_step(1250);
  u.mutable_progress()->set_total_steps(1500);
  u.mutable_progress()->set_eta_seconds(12);
  ASSERT_TRUE(c_->UpdateAttempt(u).ok());
  mesa::v1::UpdateAttemptRequest done = Report("a", id, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED);
  done.mutable_result()->set_final_loss(1.5);
  ASSERT_TRUE(c_->UpdateAttempt(done).ok());
  const auto job = c_->GetJob(id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->progress().step(), 1500);
  EXPECT_EQ(job->progress().total_steps(), 1500);
  EXPECT_EQ(job->progress().eta_seconds(), 0);
  const auto events = Events(id);
  int last_progress = -1, result = -1;
  for (int i = 0; i < static_cast<int>(events.size()); ++i) {
    if (events[i].type() == mesa::v1::JOB_EVENT_TYPE_PROGRESS) last_progress = i;
    if (events[i].type() == mesa::v1::JOB_EVENT_TYPE_RESULT) result = i;
  }
  ASSERT_GE(last_progress, 0);
  EXPECT_LT(last_progress, result);
  EXPECT_EQ(events[last_progress].progress().step(), 1500);
}

}  // namespace
}  // namespace mesa::coordinator
