// Runs the real mesactl binary against the real coordinator and checks what people and scripts see.

#include <unistd.h>

#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/coordinator_harness.h"

namespace mesa::testing {
namespace {

using nlohmann::json;

class MesactlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir("mesactl_test");
    auto c = CoordinatorProcess::Start(dir_ + "/mesa.db");
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
  }

  // Runs `mesactl --server=<coordinator> args...` (bounded).
  RunResult Mesactl(std::vector<std::string> args, Process::Options options = {}) {
    args.insert(args.begin(), "--server=" + coordinator_->address());
    return MesactlRaw(args, options);
  }

  RunResult MesactlRaw(const std::vector<std::string>& args, Process::Options options = {}) {
    absl::StatusOr<RunResult> r =
        RunProcess(RunfilePath("cli/mesactl"), args, absl::Seconds(20), options);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{-1, "", r.status().ToString()};
  }

  // Parses stdout as JSON; fails the test (and returns null) if it is not.
  static json ParseJson(const RunResult& r) {
    json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON:\n" << r.out << "\nstderr:\n" << r.err;
    return j;
  }

  std::string Example(const std::string& name) { return RunfilePath("examples/" + name); }

  // Submits examples/`example` with mesactl and has `worker` register and take it; *id is the
  // job's id.
  absl::StatusOr<mesa::v1::Assignment> SubmitAndAssign(const std::string& example,
                                                       FakeWorker& worker, std::string* id) {
    RunResult submit = Mesactl({"submit", Example(example), "--json"});
    if (submit.exit_status != 0) return absl::InternalError("submit failed: " + submit.err);
    *id = ParseJson(submit)["id"];
    if (absl::Status s = worker.Register(); !s.ok()) return s;
    return worker.WaitForAssignment(absl::Seconds(10));
  }

  std::string WriteFile(const std::string& name, const std::string& content) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    return path;
  }

  std::string dir_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
};

TEST_F(MesactlTest, SubmitGetListWithJson) {
  RunResult submit =
      Mesactl({"submit", Example("train_tiny_cpu.yaml"), "--client_job_id=cli-1", "--json"});
  ASSERT_EQ(submit.exit_status, 0) << submit.err;
  json job = ParseJson(submit);
  const std::string id = job.value("id", "");
  ASSERT_FALSE(id.empty()) << submit.out;
  EXPECT_EQ(job["state"], "JOB_STATE_QUEUED");
  EXPECT_EQ(job["client_job_id"], "cli-1");
  EXPECT_EQ(job["spec"]["name"], "tiny-mesanet-cpu");
  EXPECT_EQ(job["spec"]["model"]["d_model"], 64);  // snake_case field names
  EXPECT_EQ(job["spec"]["data"]["seq_len"], 128);

  // Same key, same file: the same job.
  RunResult again =
      Mesactl({"submit", Example("train_tiny_cpu.yaml"), "--client_job_id=cli-1", "--json"});
  ASSERT_EQ(again.exit_status, 0) << again.err;
  EXPECT_EQ(ParseJson(again)["id"], id);

  RunResult get = Mesactl({"get", id, "--json"});
  ASSERT_EQ(get.exit_status, 0) << get.err;
  json got = ParseJson(get);
  EXPECT_EQ(got["id"], id);
  EXPECT_EQ(got["spec"]["training"]["steps"], "200");  // int64 is a string in proto JSON

  RunResult list = Mesactl({"list", "--json"});
  ASSERT_EQ(list.exit_status, 0) << list.err;
  json jobs = ParseJson(list)["jobs"];
  ASSERT_TRUE(jobs.is_array());
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0]["id"], id);

  RunResult queued = Mesactl({"list", "--state=queued", "--label", "size=tiny", "--json"});
  ASSERT_EQ(queued.exit_status, 0) << queued.err;
  EXPECT_EQ(ParseJson(queued)["jobs"].size(), 1u);
  RunResult other_label = Mesactl({"list", "--label=size=huge", "--json"});
  ASSERT_EQ(other_label.exit_status, 0) << other_label.err;
  EXPECT_EQ(ParseJson(other_label)["jobs"].size(), 0u);
  RunResult cancelled = Mesactl({"list", "--state=cancelled", "--json"});
  ASSERT_EQ(cancelled.exit_status, 0) << cancelled.err;
  EXPECT_EQ(ParseJson(cancelled)["jobs"].size(), 0u);
}

// --set edits the job file before mesactl checks it; the coordinator gets the edited spec, and a
// bad override fails like a bad file, naming the field, before any request.
TEST_F(MesactlTest, SubmitSetOverridesTheJobFile) {
  RunResult submit =
      Mesactl({"submit", Example("train_tiny_cpu.yaml"), "--set", "training.steps=70",
               "--set=max_run_seconds=600", "--set", "labels.sweep=a", "--json"});
  ASSERT_EQ(submit.exit_status, 0) << submit.err;
  json job = ParseJson(submit);
  EXPECT_EQ(job["spec"]["training"]["steps"], "70");
  EXPECT_EQ(job["spec"]["max_run_seconds"], "600");
  EXPECT_EQ(job["spec"]["labels"]["sweep"], "a");
  EXPECT_EQ(job["spec"]["model"]["d_model"], 64);  // the file's other fields stay

  RunResult typo = Mesactl({"submit", Example("train_tiny_cpu.yaml"), "--set", "training.stepz=7"});
  EXPECT_EQ(typo.exit_status, 1);
  EXPECT_NE(typo.err.find("did you mean steps"), std::string::npos) << typo.err;
  RunResult invalid =
      Mesactl({"submit", Example("train_tiny_cpu.yaml"), "--set", "max_run_seconds=-5"});
  EXPECT_EQ(invalid.exit_status, 1);
  EXPECT_NE(invalid.err.find("max_run_seconds"), std::string::npos) << invalid.err;
}

// --then submits a pipeline: the second job depends on the first and its job:previous names it;
// describe shows what it waits for. A bad --then file is refused before anything is submitted.
TEST_F(MesactlTest, SubmitThenMakesAPipeline) {
  RunResult bad = Mesactl({"submit", Example("train_tiny_cpu.yaml"), "--then",
                           Example("eval_tiny_cpu.yaml"), "--then", dir_ + "/missing.yaml"});
  EXPECT_EQ(bad.exit_status, 1);
  EXPECT_NE(bad.err.find("missing.yaml"), std::string::npos) << bad.err;
  EXPECT_EQ(ParseJson(Mesactl({"list", "--json"}))["jobs"].size(), 0u);

  RunResult submit = Mesactl({"submit", Example("train_tiny_cpu.yaml"), "--then",
                              Example("eval_after_train_cpu.yaml"), "--json"});
  ASSERT_EQ(submit.exit_status, 0) << submit.err;
  std::vector<std::string> lines = absl::StrSplit(submit.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << submit.out;
  const json train = json::parse(lines[0]), eval = json::parse(lines[1]);
  const std::string train_id = train["id"];
  EXPECT_EQ(eval["spec"]["depends_on"][0]["job_id"], train_id);
  EXPECT_EQ(eval["spec"]["depends_on"][0]["after"], "DEPENDENCY_CONDITION_SUCCESS");
  EXPECT_EQ(eval["spec"]["eval"]["checkpoint"], "job:" + train_id);
  EXPECT_EQ(eval["waiting_for"][0], train_id);

  RunResult describe = Mesactl({"get", eval["id"]});
  ASSERT_EQ(describe.exit_status, 0) << describe.err;
  EXPECT_NE(describe.out.find("Depends on:"), std::string::npos) << describe.out;
  EXPECT_NE(describe.out.find(train_id + " (after success)"), std::string::npos) << describe.out;
  EXPECT_NE(describe.out.find("Waiting for:"), std::string::npos) << describe.out;
  RunResult explain = Mesactl({"explain", eval["id"]});
  EXPECT_NE(explain.out.find("waiting for " + train_id), std::string::npos) << explain.out;
  // Text output names what each job waits for.
  RunResult text = Mesactl(
      {"submit", Example("train_tiny_cpu.yaml"), "--then", Example("eval_after_train_cpu.yaml")});
  ASSERT_EQ(text.exit_status, 0) << text.err;
  EXPECT_NE(text.out.find(", waiting for job-"), std::string::npos) << text.out;
}

TEST_F(MesactlTest, EveryExampleIsAcceptedByTheCoordinator) {
  for (const std::string name :
       {"train_tiny_cpu.yaml", "train_small_gpu.yaml", "eval_tiny_cpu.yaml"}) {
    RunResult r = Mesactl({"submit", Example(name), "--json"});
    EXPECT_EQ(r.exit_status, 0) << name << ": " << r.err;
  }
  RunResult list = Mesactl({"list", "--json"});
  EXPECT_EQ(ParseJson(list)["jobs"].size(), 3u);
  // Newest first; a limit that leaves jobs out says so on stderr.
  json all = ParseJson(list)["jobs"];
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0]["spec"]["name"], "tiny-mesanet-eval") << all;
  RunResult limited = Mesactl({"list", "--limit=2", "--json"});
  ASSERT_EQ(limited.exit_status, 0) << limited.err;
  json newest = ParseJson(limited)["jobs"];
  ASSERT_EQ(newest.size(), 2u);
  EXPECT_EQ(newest[0]["id"], all[0]["id"]);
  EXPECT_EQ(newest[1]["id"], all[1]["id"]);
  EXPECT_TRUE(absl::StrContains(limited.err, "the newest 2 shown; more may match")) << limited.err;
  EXPECT_EQ(Mesactl({"list", "--limit=3"}).err, "");
  RunResult evals = Mesactl({"list", "--label=size=tiny", "--json"});
  EXPECT_EQ(ParseJson(evals)["jobs"].size(), 1u);  // only the tiny training job has the label
}

// An array job through mesactl: the parent and its children (labelled with the parent's id), its
// table in `get` and as CSV, and cancelling the parent cancels every child.
TEST_F(MesactlTest, ArrayJobExpandsListsPrintsAndCancels) {
  RunResult submit = Mesactl({"submit", Example("eval_array_cpu.yaml"), "--json"});
  ASSERT_EQ(submit.exit_status, 0) << submit.err;
  const std::string parent = ParseJson(submit)["id"];
  RunResult children = Mesactl({"list", "--label", "mesa.array=" + parent, "--json"});
  ASSERT_EQ(children.exit_status, 0) << children.err;
  const json jobs = ParseJson(children)["jobs"];
  ASSERT_EQ(jobs.size(), 8u);  // 2 checkpoints x 2 CG settings x 2 shards
  std::set<std::string> names;
  for (const json& j : jobs) {
    names.insert(j["spec"]["name"].get<std::string>());
    EXPECT_EQ(j["state"], "JOB_STATE_QUEUED");
    EXPECT_TRUE(absl::StartsWith(j["spec"]["eval"]["checkpoint"].get<std::string>(), "/"));
  }
  EXPECT_TRUE(names.count("tiny-mesanet-sweep-c1-s1-k1")) << children.out;

  RunResult get = Mesactl({"get", parent});
  ASSERT_EQ(get.exit_status, 0) << get.err;
  EXPECT_TRUE(absl::StrContains(get.out, "Children: ")) << get.out;
  RunResult csv = Mesactl({"get", parent, "--csv"});
  ASSERT_EQ(csv.exit_status, 0) << csv.err;
  EXPECT_EQ(csv.out,
            "checkpoint,cg_setting,kind,name,metric,value,stderr,count,cg_steps_mean,"
            "cg_steps_mean_prefill,cg_steps_mean_decode,draw_std,job_ids\n");
  const std::string child = jobs[0]["id"];
  RunResult not_array = Mesactl({"get", child, "--csv"});
  EXPECT_EQ(not_array.exit_status, 2);
  EXPECT_TRUE(absl::StrContains(not_array.err, "is not an array job")) << not_array.err;

  RunResult cancel = Mesactl({"cancel", parent, "--json"});
  ASSERT_EQ(cancel.exit_status, 0) << cancel.err;
  EXPECT_EQ(ParseJson(cancel)["state"], "JOB_STATE_CANCELLED");
  RunResult after =
      Mesactl({"list", "--label", "mesa.array=" + parent, "--state=cancelled", "--json"});
  EXPECT_EQ(ParseJson(after)["jobs"].size(), 8u) << after.out;
}

TEST_F(MesactlTest, HumanTablesAndDetails) {
  RunResult submit = Mesactl({"submit", Example("train_tiny_cpu.yaml")});
  ASSERT_EQ(submit.exit_status, 0) << submit.err;
  EXPECT_TRUE(absl::StartsWith(submit.out, "Submitted job ")) << submit.out;
  std::string id = std::vector<std::string>(absl::StrSplit(submit.out, ' '))[2];

  RunResult list = Mesactl({"list"});
  ASSERT_EQ(list.exit_status, 0) << list.err;
  std::vector<std::string> lines = absl::StrSplit(list.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << list.out;
  EXPECT_TRUE(absl::StartsWith(lines[0], "ID")) << list.out;
  EXPECT_TRUE(absl::StartsWith(lines[1], id)) << list.out;
  EXPECT_EQ(lines[1].substr(lines[0].find("STATE"), 6), "QUEUED") << list.out;

  RunResult get = Mesactl({"get", id});
  ASSERT_EQ(get.exit_status, 0) << get.err;
  EXPECT_TRUE(absl::StrContains(get.out, "Name:")) << get.out;
  EXPECT_TRUE(absl::StrContains(get.out, "tiny-mesanet-cpu")) << get.out;
  EXPECT_TRUE(absl::StrContains(get.out, "QUEUED")) << get.out;

  RunResult explain = Mesactl({"explain", id});
  ASSERT_EQ(explain.exit_status, 0) << explain.err;
  EXPECT_TRUE(absl::StrContains(explain.out, "Queue position:  1 of 1")) << explain.out;

  // The server address may come from the environment instead of --server.
  Process::Options env;
  env.env = {"MESA_SERVER=" + coordinator_->address()};
  RunResult from_env = MesactlRaw({"get", id, "--json"}, env);
  ASSERT_EQ(from_env.exit_status, 0) << from_env.err;
  EXPECT_EQ(ParseJson(from_env)["id"], id);
}

TEST_F(MesactlTest, ErrorsNameTheCodeAndField) {
  RunResult missing = Mesactl({"get", "no-such-job"});
  EXPECT_EQ(missing.exit_status, 1);
  EXPECT_TRUE(absl::StrContains(missing.err, "NOT_FOUND")) << missing.err;

  std::string typo = WriteFile("typo.yaml", "name: typo\ntype: train\nmodel:\n  d_modle: 64\n");
  RunResult unknown_key = Mesactl({"submit", typo});
  EXPECT_EQ(unknown_key.exit_status, 1);
  EXPECT_TRUE(absl::StrContains(unknown_key.err, "model.d_modle")) << unknown_key.err;

  std::string bad = WriteFile("bad.yaml", "name: Bad_Name\ntype: train\n");
  RunResult invalid = Mesactl({"submit", bad});
  EXPECT_EQ(invalid.exit_status, 1);
  EXPECT_TRUE(absl::StrContains(invalid.err, "INVALID_ARGUMENT")) << invalid.err;
  // Every problem on its own line.
  EXPECT_TRUE(absl::StrContains(invalid.err, "INVALID_ARGUMENT:\n  spec.")) << invalid.err;
  EXPECT_TRUE(absl::StrContains(invalid.err, "\n  spec.name: ")) << invalid.err;
  EXPECT_TRUE(absl::StrContains(invalid.err, "\n  spec.model.d_model: ")) << invalid.err;

  RunResult usage = Mesactl({"frobnicate"});
  EXPECT_EQ(usage.exit_status, 2);
  RunResult bad_state = Mesactl({"list", "--state=sleeping"});
  EXPECT_EQ(bad_state.exit_status, 2);
  EXPECT_TRUE(absl::StrContains(bad_state.err, "sleeping")) << bad_state.err;

  RunResult unreachable = MesactlRaw({"--server=127.0.0.1:1", "--timeout=2s", "get", "x"});
  EXPECT_EQ(unreachable.exit_status, 1);
  EXPECT_TRUE(absl::StrContains(unreachable.err, "UNAVAILABLE")) << unreachable.err;
}

TEST_F(MesactlTest, SubmitChecksTheConfinedPathRootsItIsGiven) {
  // The coordinator runs without roots; mesactl, given some, refuses before sending.
  RunResult refused = Mesactl({"submit", "--data_roots=/nowhere/data",
                               "--checkpoint_root=/nowhere/ckpt", Example("train_tiny_cpu.yaml")});
  EXPECT_EQ(refused.exit_status, 1);
  EXPECT_TRUE(absl::StrContains(refused.err, "spec.data.train_path: ")) << refused.err;
  EXPECT_TRUE(absl::StrContains(refused.err, "outside the data roots (/nowhere/data)"))
      << refused.err;
  RunResult list = Mesactl({"list", "--json"});
  EXPECT_FALSE(absl::StrContains(list.out, "job-")) << list.out;
  // Without them the same file is accepted (behaviour unchanged).
  RunResult accepted = Mesactl({"submit", Example("train_tiny_cpu.yaml")});
  EXPECT_EQ(accepted.exit_status, 0) << accepted.err;
}

// A GENERATE job's result can be megabytes (64 prompts x 7,000 tokens here, about 8.5 MB): it must
// not break list, get or watch for anyone (gRPC's 4 MiB client default), before or after a restart;
// listings leave the completions out; a result over kMaxJobResultBytes is refused naming the bound.
TEST_F(MesactlTest, LargeGenerationResultsStayReadable) {
  FakeWorker worker(coordinator_->channel(), "w1", /*cpu_slots=*/4);
  std::string id;
  absl::StatusOr<mesa::v1::Assignment> a = SubmitAndAssign("generate_tiny_cpu.yaml", worker, &id);
  ASSERT_TRUE(a.ok()) << a.status();

  mesa::v1::JobResult result;
  for (int p = 0; p < 64; ++p) {
    mesa::v1::Completion& c = *result.add_completions();
    c.set_prompt(absl::StrCat("prompt ", p));
    c.set_completion(std::string(7000, 'a' + p % 26));
    for (int t = 0; t < 7000; ++t) {
      c.add_tokens(300 + t % 200);
      c.add_logprobs(-1.0 - t * 1e-4);
      c.add_cg_steps(5.0 + t % 3);
    }
    c.set_finish_reason("length");
  }
  ASSERT_GT(result.ByteSizeLong(), size_t{8} << 20);
  // One completion too many bytes in all: refused, naming the bound; the job keeps running.
  mesa::v1::JobResult too_big = result;
  for (int p = 0; p < 40; ++p) *too_big.add_completions() = result.completions(p);
  absl::Status refused = worker.Succeed(*a, too_big);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "result: at most")) << refused;
  ASSERT_TRUE(worker.Succeed(*a, result).ok());

  auto check_readable = [&] {
    RunResult list = Mesactl({"list", "--json"});
    ASSERT_EQ(list.exit_status, 0) << list.err;
    EXPECT_LT(list.out.size(), size_t{1} << 20);
    json listed = ParseJson(list);
    ASSERT_EQ(listed["jobs"].size(), 1u);
    EXPECT_TRUE(listed["jobs"][0]["result"].value("completions", json::array()).empty());
    EXPECT_EQ(Mesactl({"list"}).exit_status, 0);
    RunResult get = Mesactl({"get", id, "--json"});
    ASSERT_EQ(get.exit_status, 0) << get.err;
    json job = ParseJson(get);
    EXPECT_EQ(job["state"], "JOB_STATE_SUCCEEDED");
    EXPECT_EQ(job["result"]["completions"].size(), 64u);
    RunResult watch = Mesactl({"watch", id});
    EXPECT_EQ(watch.exit_status, 0) << watch.err;
  };
  check_readable();
  // The same after a restart from the store.
  coordinator_.reset();
  auto c = CoordinatorProcess::Start(dir_ + "/mesa.db");
  ASSERT_TRUE(c.ok()) << c.status();
  coordinator_ = std::move(*c);
  check_readable();
}

// Cancelling a running job asks its trainer to stop: mesactl says so, and how to follow it, instead
// of printing the job's (still running) state as if that were the outcome.
TEST_F(MesactlTest, CancelOfARunningJobSaysItWasRequested) {
  FakeWorker worker(coordinator_->channel(), "w1", /*cpu_slots=*/4);
  std::string id;
  absl::StatusOr<mesa::v1::Assignment> a = SubmitAndAssign("train_tiny_cpu.yaml", worker, &id);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(worker.Running(*a, mesa::v1::Progress()).ok());
  RunResult cancel = Mesactl({"cancel", id});
  ASSERT_EQ(cancel.exit_status, 0) << cancel.err;
  EXPECT_TRUE(absl::StrContains(cancel.out, "cancellation requested")) << cancel.out;
  EXPECT_TRUE(absl::StrContains(cancel.out, "mesactl watch " + id)) << cancel.out;
}

// A token read from a CRLF file ends in "\r\n": trimmed, it works. Control or non-ASCII bytes
// inside a token are a usage error (exit 2) whose message never contains the token.
TEST_F(MesactlTest, TokensAreTrimmedAndCheckedNeverEchoed) {
  Process::Options crlf;
  crlf.env = {"MESA_TOKEN=s3cretQXZ\r\n"};
  RunResult ok = Mesactl({"list"}, crlf);
  EXPECT_EQ(ok.exit_status, 0) << ok.err;
  for (const std::string& bad : {std::string("s3cret\tQXZ"), std::string("s3cret\x01QXZ"),
                                 std::string("s3cr\xc3\xa9tQXZ"), std::string("s3cret QXZ")}) {
    Process::Options env;
    env.env = {"MESA_TOKEN=" + bad};
    RunResult r = Mesactl({"list"}, env);
    EXPECT_EQ(r.exit_status, 2) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "bearer token")) << r.err;
    EXPECT_FALSE(absl::StrContains(r.err, "s3cr")) << r.err;
    EXPECT_FALSE(absl::StrContains(r.err, "QXZ")) << r.err;
    RunResult flag = Mesactl({"--token=" + bad, "list"});
    EXPECT_EQ(flag.exit_status, 2) << flag.err;
    EXPECT_FALSE(absl::StrContains(flag.err, "s3cr")) << flag.err;
  }
}

// Every RPC that names a job bounds its id the same way (128 bytes), without echoing it back:
// through mesactl (an argument holds at most 128 KiB) and, at 1 MiB, through the API itself.
TEST_F(MesactlTest, EveryJobRpcBoundsTheIdWithoutEchoingIt) {
  const std::string long_id(100000, 'q');
  for (const std::vector<std::string>& command :
       std::vector<std::vector<std::string>>{{"get", long_id},
                                             {"watch", long_id},
                                             {"logs", long_id},
                                             {"explain", long_id},
                                             {"cancel", long_id}}) {
    RunResult r = Mesactl(command);
    EXPECT_EQ(r.exit_status, 1) << command[0] << ": " << r.err.substr(0, 300);
    EXPECT_TRUE(absl::StrContains(r.err, "at most 128 bytes"))
        << command[0] << ": " << r.err.substr(0, 300);
    EXPECT_LT(r.err.size(), 1000u) << command[0];
  }
  const std::string huge_id(1 << 20, 'z');
  auto stub = coordinator_->JobStub();
  auto expect_bounded = [](const grpc::Status& s, const char* what) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << what << ": " << s.error_message().size();
    EXPECT_LT(s.error_message().size(), 200u) << what;
  };
  {
    grpc::ClientContext ctx;
    mesa::v1::GetJobRequest req;
    req.set_id(huge_id);
    mesa::v1::Job job;
    expect_bounded(stub->GetJob(&ctx, req, &job), "GetJob");
  }
  {
    grpc::ClientContext ctx;
    mesa::v1::ExplainJobRequest req;
    req.set_id(huge_id);
    mesa::v1::ExplainJobResponse resp;
    expect_bounded(stub->ExplainJob(&ctx, req, &resp), "ExplainJob");
  }
  {
    grpc::ClientContext ctx;
    mesa::v1::WatchJobRequest req;
    req.set_id(huge_id);
    auto reader = stub->WatchJob(&ctx, req);
    mesa::v1::JobEvent event;
    while (reader->Read(&event)) {
    }
    expect_bounded(reader->Finish(), "WatchJob");
  }
  {
    grpc::ClientContext ctx;
    mesa::v1::GetJobLogsRequest req;
    req.set_id(huge_id);
    auto reader = stub->GetJobLogs(&ctx, req);
    mesa::v1::LogLine line;
    while (reader->Read(&line)) {
    }
    expect_bounded(reader->Finish(), "GetJobLogs");
  }
  // The coordinator is still there.
  EXPECT_EQ(Mesactl({"list"}).exit_status, 0);
}

// kubectl's conventions: -h/--help exit 0 (a command's own help after its name); an unknown
// flag, a bad flag value or a missing argument is a usage error, exit 2, naming the mistake.
// The CLI11 model itself is tested in //cli:command_line_test; this runs the binary.
TEST_F(MesactlTest, HelpExitsZeroAndUsageErrorsExitTwo) {
  RunResult help = MesactlRaw({"--help"});
  EXPECT_EQ(help.exit_status, 0) << help.err;
  EXPECT_TRUE(absl::StrContains(help.out, "Commands:")) << help.out;
  RunResult list_help = MesactlRaw({"list", "-h"});
  EXPECT_EQ(list_help.exit_status, 0) << list_help.err;
  EXPECT_TRUE(absl::StrContains(list_help.out, "Usage: mesactl list [FLAGS]")) << list_help.out;
  EXPECT_TRUE(absl::StrContains(list_help.out, "  --state")) << list_help.out;
  EXPECT_FALSE(absl::StrContains(list_help.out, "--evict")) << list_help.out;
  EXPECT_TRUE(absl::StrContains(list_help.out, "Global flags")) << list_help.out;

  RunResult unknown = Mesactl({"list", "--bogus"});
  EXPECT_EQ(unknown.exit_status, 2);
  EXPECT_TRUE(absl::StrContains(unknown.err, "unknown flag --bogus")) << unknown.err;
  RunResult bad_value = Mesactl({"list", "--limit=many"});
  EXPECT_EQ(bad_value.exit_status, 2);
  EXPECT_TRUE(absl::StrContains(bad_value.err, "--limit")) << bad_value.err;
  RunResult no_value = Mesactl({"list", "--limit"});
  EXPECT_EQ(no_value.exit_status, 2);
  EXPECT_TRUE(absl::StrContains(no_value.err, "--limit")) << no_value.err;
  RunResult bad_duration = Mesactl({"list", "--timeout=soon"});
  EXPECT_EQ(bad_duration.exit_status, 2);
  EXPECT_TRUE(absl::StrContains(bad_duration.err, "--timeout")) << bad_duration.err;
  EXPECT_EQ(Mesactl({"get"}).exit_status, 2);
  EXPECT_EQ(Mesactl({"frobnicate"}).exit_status, 2);
  // A boolean's explicit value is not a mistake.
  EXPECT_EQ(Mesactl({"list", "--json=false"}).exit_status, 0);
}

// `cancel --label` cancels every unfinished job the selector picks, and only those.
// kubectl's -o: name lines, YAML, JSON; -o name only where there are names; unknown formats and
// a --json that disagrees are usage errors.
TEST_F(MesactlTest, OutputFormats) {
  RunResult submit = Mesactl({"submit", Example("train_tiny_cpu.yaml"), "-o", "name"});
  ASSERT_EQ(submit.exit_status, 0) << submit.err;
  ASSERT_TRUE(absl::StartsWith(submit.out, "job/")) << submit.out;
  const std::string id = std::string(absl::StripSuffix(submit.out.substr(4), "\n"));
  RunResult names = Mesactl({"list", "-o=name"});
  EXPECT_EQ(names.exit_status, 0) << names.err;
  EXPECT_EQ(names.out, "job/" + id + "\n");
  RunResult yaml = Mesactl({"get", id, "--output=yaml"});
  EXPECT_EQ(yaml.exit_status, 0) << yaml.err;
  EXPECT_TRUE(absl::StartsWith(yaml.out, "id: " + id + "\nspec:\n  name: tiny-mesanet-cpu\n"))
      << yaml.out;
  RunResult json = Mesactl({"get", id, "-o", "json"});
  EXPECT_EQ(ParseJson(json)["id"], id);
  RunResult wide = Mesactl({"list", "-o", "wide"});
  EXPECT_TRUE(absl::StrContains(wide.out, "STATE")) << wide.out;

  EXPECT_EQ(Mesactl({"explain", id, "-o", "name"}).exit_status, 2);
  EXPECT_EQ(Mesactl({"list", "-o", "xml"}).exit_status, 2);
  EXPECT_EQ(Mesactl({"list", "-o", "yaml", "--json"}).exit_status, 2);
}

// `source <(mesactl completion bash)` completes commands, flags and, by asking mesactl, job IDs.
TEST_F(MesactlTest, BashCompletion) {
  RunResult submit = Mesactl({"submit", Example("train_tiny_cpu.yaml"), "-o", "name"});
  ASSERT_EQ(submit.exit_status, 0) << submit.err;
  const std::string id = std::string(absl::StripSuffix(submit.out.substr(4), "\n"));
  const std::string mesactl = RunfilePath("cli/mesactl");
  auto complete = [&](const std::string& words, int cword) {
    const std::string script =
        absl::StrCat("source <(", mesactl, " completion bash) || exit 9\n", "mesactl() { ", mesactl,
                     " --server=", coordinator_->address(), " \"$@\"; }\n", "COMP_WORDS=(", words,
                     "); COMP_CWORD=", cword, "; _mesactl; echo \"${COMPREPLY[*]}\"\n");
    absl::StatusOr<RunResult> r = RunProcess("/bin/bash", {"-c", script}, absl::Seconds(20));
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_status, 0) << r->err;
    return std::string(absl::StripSuffix(r->out, "\n"));
  };
  EXPECT_EQ(complete("mesactl dr", 1), "drain");
  EXPECT_EQ(complete("mesactl list --lim", 2), "--limit");
  EXPECT_EQ(complete("mesactl get ''", 2), id);
  // Each command's own flags, after the global ones (also with a value between).
  EXPECT_EQ(complete("mesactl get --lim", 2), "");
  EXPECT_EQ(complete("mesactl audit --lim", 2), "--limit");
  EXPECT_EQ(complete("mesactl drain node-1 --e", 3), "--evict");
  EXPECT_EQ(complete("mesactl --server h list --st", 4), "--state");
  EXPECT_EQ(complete("mesactl --ser", 1), "--server");
  EXPECT_EQ(complete("mesactl list -o y", 3), "yaml");
  EXPECT_EQ(MesactlRaw({"completion", "fish"}).exit_status, 2);
}

TEST_F(MesactlTest, CancelByLabelSelector) {
  std::ifstream in(Example("train_tiny_cpu.yaml"));
  const std::string example((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(absl::StrContains(example, "size: tiny"));
  std::vector<std::string> ids;
  for (const std::string size : {"doomed", "doomed", "spared"}) {
    std::string spec = example;
    spec.replace(spec.find("size: tiny"), 10, "size: " + size);
    RunResult r =
        Mesactl({"submit", WriteFile(absl::StrCat("job", ids.size(), ".yaml"), spec), "--json"});
    ASSERT_EQ(r.exit_status, 0) << r.err;
    ids.push_back(ParseJson(r)["id"].get<std::string>());
  }
  RunResult cancel = Mesactl({"cancel", "--label=size=doomed", "--reason=bulk"});
  ASSERT_EQ(cancel.exit_status, 0) << cancel.err;
  EXPECT_TRUE(absl::StrContains(cancel.out, ids[0] + " CANCELLED")) << cancel.out;
  EXPECT_TRUE(absl::StrContains(cancel.out, ids[1] + " CANCELLED")) << cancel.out;
  json spared = ParseJson(Mesactl({"get", ids[2], "--json"}));
  EXPECT_EQ(spared["state"], "JOB_STATE_QUEUED") << spared;
  // Nothing left to cancel is not an error; finished jobs are not touched again.
  RunResult again = Mesactl({"cancel", "--label=size=doomed"});
  EXPECT_EQ(again.exit_status, 0) << again.err;
  EXPECT_TRUE(absl::StrContains(again.out, "No unfinished job matches.")) << again.out;
  // No selector, or an ID and a selector: usage errors.
  EXPECT_EQ(Mesactl({"cancel"}).exit_status, 2);
  EXPECT_EQ(Mesactl({"cancel", ids[2], "--label=size=spared"}).exit_status, 2);
}

TEST_F(MesactlTest, CancelAndWatchExitCodes) {
  RunResult submit = Mesactl({"submit", Example("train_tiny_cpu.yaml"), "--json"});
  ASSERT_EQ(submit.exit_status, 0) << submit.err;
  std::string id = ParseJson(submit)["id"];

  RunResult cancel = Mesactl({"cancel", id, "--reason=not needed"});
  ASSERT_EQ(cancel.exit_status, 0) << cancel.err;
  EXPECT_TRUE(absl::StrContains(cancel.out, "CANCELLED")) << cancel.out;
  RunResult again = Mesactl({"cancel", id});
  EXPECT_EQ(again.exit_status, 1);
  EXPECT_TRUE(absl::StrContains(again.err, "FAILED_PRECONDITION")) << again.err;

  // The job has already ended: watch replays and exits with the CANCELLED code.
  RunResult watch = Mesactl({"watch", id});
  EXPECT_EQ(watch.exit_status, 4) << watch.out << watch.err;
  EXPECT_TRUE(absl::StrContains(watch.out, "QUEUED -> CANCELLED")) << watch.out;

  // --json gives one event per line.
  RunResult watch_json = Mesactl({"watch", id, "--json"});
  EXPECT_EQ(watch_json.exit_status, 4);
  std::vector<std::string> lines = absl::StrSplit(watch_json.out, '\n', absl::SkipEmpty());
  ASSERT_FALSE(lines.empty());
  json last = json::parse(lines.back(), nullptr, false);
  ASSERT_FALSE(last.is_discarded()) << lines.back();
  EXPECT_EQ(last["state"], "JOB_STATE_CANCELLED");
}

TEST_F(MesactlTest, WatchFollowsAJobToSuccessAndLogsShowIt) {
  RunResult submit = Mesactl({"submit", Example("train_tiny_cpu.yaml"), "--json"});
  ASSERT_EQ(submit.exit_status, 0) << submit.err;
  std::string id = ParseJson(submit)["id"];

  // Watch first, then run the job as a fake worker: watch must follow live and exit 0.
  absl::StatusOr<std::unique_ptr<Process>> watch = Process::Start(
      RunfilePath("cli/mesactl"), {"--server=" + coordinator_->address(), "watch", id});
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE((*watch)->WaitForLinePrefix("", absl::Seconds(10)).ok())
      << "watch printed nothing for the queued job";

  FakeWorker worker(coordinator_->channel(), "mesactl-test-worker", 4);
  ASSERT_TRUE(worker.Register().ok());
  absl::StatusOr<v1::Assignment> a = worker.WaitForAssignment(absl::Seconds(10));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->job_id(), id);
  v1::UpdateAttemptRequest update;
  update.set_job_id(id);
  update.set_attempt(a->attempt());
  update.set_phase(v1::ATTEMPT_PHASE_RUNNING);
  update.mutable_progress()->set_step(200);
  update.mutable_progress()->set_total_steps(200);
  update.mutable_progress()->set_loss(1.5f);
  auto* log = update.add_logs();
  log->set_stream("stdout");
  log->set_text("hello from the trainer");
  ASSERT_TRUE(worker.Update(update).ok());
  v1::JobResult result;
  result.set_final_loss(1.5f);
  ASSERT_TRUE(worker.Succeed(*a, result).ok());

  absl::StatusOr<int> status = (*watch)->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status() << "\n" << (*watch)->Stdout();
  EXPECT_EQ(*status, 0) << (*watch)->Stdout() << (*watch)->Stderr();
  std::string out = (*watch)->Stdout();
  EXPECT_TRUE(absl::StrContains(out, "RUNNING")) << out;
  EXPECT_TRUE(absl::StrContains(out, "Job " + id + " SUCCEEDED (final loss 1.5000)")) << out;

  RunResult logs = Mesactl({"logs", id});
  ASSERT_EQ(logs.exit_status, 0) << logs.err;
  EXPECT_TRUE(absl::StrContains(logs.out, "hello from the trainer\n")) << logs.out;

  RunResult get = Mesactl({"get", id});
  EXPECT_TRUE(absl::StrContains(get.out, "SUCCEEDED")) << get.out;
  EXPECT_TRUE(absl::StrContains(get.out, "final loss 1.5000")) << get.out;
}

// Two EVAL jobs with per-position curves (results reported as a worker does): `get` shows the
// datasets, `get --json` has the curves in full, `compare` prints ΔNLL per position.
TEST_F(MesactlTest, GetShowsDatasetsAndCompareComputesDeltaNll) {
  FakeWorker worker(coordinator_->channel(), "mesactl-eval-worker", 4);
  ASSERT_TRUE(worker.Register().ok());
  std::vector<std::string> ids;
  for (double base : {2.0, 1.5}) {
    RunResult submit = Mesactl({"submit", Example("eval_datasets_cpu.yaml"), "--json"});
    ASSERT_EQ(submit.exit_status, 0) << submit.err;
    ids.push_back(ParseJson(submit)["id"]);
    absl::StatusOr<v1::Assignment> a = worker.WaitForAssignment(absl::Seconds(10));
    ASSERT_TRUE(a.ok()) << a.status();
    v1::JobResult result;
    for (const char* name : {"val", "val-512"}) {
      v1::DatasetResult* d = result.add_datasets();
      d->set_name(name);
      d->set_seq_len(3);
      d->set_loss(base);
      for (int k = 0; k < 3; ++k) {
        d->add_nll_at_position(base - 0.1 * k);
        d->add_mean_nll_so_far(base - 0.05 * k);
        d->add_count_at_position(7);
      }
    }
    result.set_average_loss(base);
    ASSERT_TRUE(worker.Succeed(*a, result).ok());
  }
  RunResult get = Mesactl({"get", ids[0]});
  ASSERT_EQ(get.exit_status, 0) << get.err;
  EXPECT_TRUE(absl::StrContains(get.out, "Dataset val-512")) << get.out;
  EXPECT_TRUE(absl::StrContains(get.out, "per-position curve of 3 positions")) << get.out;
  json full = ParseJson(Mesactl({"get", ids[0], "--json"}));
  EXPECT_EQ(full["result"]["datasets"][1]["nll_at_position"].size(), 3u) << full.dump();

  RunResult compare = Mesactl({"compare", ids[0], ids[1]});
  ASSERT_EQ(compare.exit_status, 0) << compare.err;
  EXPECT_TRUE(absl::StrContains(compare.out, "Dataset val-512")) << compare.out;
  EXPECT_TRUE(absl::StrContains(compare.out, "+0.5000")) << compare.out;
  json delta = ParseJson(Mesactl({"compare", ids[0], ids[0], "--json"}));
  ASSERT_EQ(delta["datasets"].size(), 2u) << delta.dump();
  for (const json& d : delta["datasets"]) {
    ASSERT_EQ(d["delta_nll"].size(), 3u);
    for (const json& v : d["delta_nll"]) EXPECT_EQ(v.get<double>(), 0.0);
  }
  RunResult usage = Mesactl({"compare", ids[0]});
  EXPECT_EQ(usage.exit_status, 2) << usage.err;
}

TEST_F(MesactlTest, SubmitFromStdinAndWatchFlag) {
  std::string yaml;
  std::ifstream in(Example("train_tiny_cpu.yaml"));
  yaml.assign(std::istreambuf_iterator<char>(in), {});
  Process::Options options;
  options.stdin_data = yaml;
  RunResult r = Mesactl({"submit", "-", "--json"}, options);
  ASSERT_EQ(r.exit_status, 0) << r.err;
  std::string id = ParseJson(r)["id"];

  // submit --watch on a job that someone cancels: exits with the CANCELLED code.
  absl::StatusOr<std::unique_ptr<Process>> p = Process::Start(
      RunfilePath("cli/mesactl"), {"--server=" + coordinator_->address(), "submit",
                                   Example("train_tiny_cpu.yaml"), "--watch", "--json"});
  ASSERT_TRUE(p.ok());
  absl::StatusOr<std::string> first = (*p)->WaitForLinePrefix("{", absl::Seconds(10));
  ASSERT_TRUE(first.ok()) << first.status();
  json submitted = json::parse(*first, nullptr, false);
  ASSERT_FALSE(submitted.is_discarded()) << *first;
  RunResult cancel = Mesactl({"cancel", submitted["id"]});
  ASSERT_EQ(cancel.exit_status, 0) << cancel.err;
  absl::StatusOr<int> status = (*p)->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 4) << (*p)->Stdout();
}

TEST_F(MesactlTest, WatchResumesAcrossCoordinatorRestart) {
  RunResult submit = Mesactl({"submit", Example("train_tiny_cpu.yaml"), "--json"});
  ASSERT_EQ(submit.exit_status, 0) << submit.err;
  std::string id = ParseJson(submit)["id"];
  const std::string address = coordinator_->address();
  absl::StatusOr<std::unique_ptr<Process>> watch =
      Process::Start(RunfilePath("cli/mesactl"), {"--server=" + address, "watch", id});
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE((*watch)->WaitForLinePrefix("", absl::Seconds(10)).ok());

  // Crash the coordinator under the open stream and bring it back on the same address.
  ASSERT_TRUE(coordinator_->process().Kill().ok());
  coordinator_.reset();
  auto restarted = CoordinatorProcess::Start(dir_ + "/mesa.db", {"--listen=" + address});
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  coordinator_ = std::move(*restarted);
  // Still watching: the job has not ended.
  EXPECT_EQ((*watch)->Wait(absl::Milliseconds(300)).status().code(),
            absl::StatusCode::kDeadlineExceeded);

  RunResult cancel = Mesactl({"cancel", id});
  ASSERT_EQ(cancel.exit_status, 0) << cancel.err;
  absl::StatusOr<int> status = (*watch)->Wait(absl::Seconds(15));
  ASSERT_TRUE(status.ok()) << status.status() << "\n" << (*watch)->Stdout();
  EXPECT_EQ(*status, 4) << (*watch)->Stdout() << (*watch)->Stderr();
  std::string out = (*watch)->Stdout();
  // Resumed after the last event seen: the submission event is not printed twice.
  std::set<std::string> sequences;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> fields = absl::StrSplit(line, "  ");
    if (fields.size() < 2 || !absl::StartsWith(fields[1], "#")) continue;
    EXPECT_TRUE(sequences.insert(fields[1]).second) << "event " << fields[1] << " twice:\n" << out;
  }
  EXPECT_GE(sequences.size(), 2u) << out;
  EXPECT_TRUE(absl::StrContains(out, "QUEUED -> CANCELLED")) << out;
}

// On a terminal, watch draws a progress bar redrawn in place. `script` gives mesactl a pty.
TEST_F(MesactlTest, WatchDrawsAProgressBarOnATerminal) {
  if (access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/script";
  RunResult submit = Mesactl({"submit", Example("train_tiny_cpu.yaml"), "--json"});
  ASSERT_EQ(submit.exit_status, 0) << submit.err;
  std::string id = ParseJson(submit)["id"];
  FakeWorker worker(coordinator_->channel(), "tty-worker", 4);
  ASSERT_TRUE(worker.Register().ok());
  absl::StatusOr<v1::Assignment> a = worker.WaitForAssignment(absl::Seconds(10));
  ASSERT_TRUE(a.ok()) << a.status();
  v1::Progress progress;
  progress.set_step(100);
  progress.set_total_steps(200);
  progress.set_loss(2.5f);
  progress.set_tokens_per_second(12300);
  progress.set_eta_seconds(80);
  ASSERT_TRUE(worker.Running(*a, progress).ok());

  std::string command = absl::StrCat(RunfilePath("cli/mesactl"),
                                     " --server=", coordinator_->address(), " watch ", id);
  absl::StatusOr<std::unique_ptr<Process>> p =
      Process::Start("/usr/bin/script", {"-qfec", command, "/dev/null"});
  ASSERT_TRUE(p.ok()) << p.status();
  // The replayed progress event draws the bar (no newline after it, so poll the raw output).
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!absl::StrContains((*p)->Stdout(), "step 100/200") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  std::string out = (*p)->Stdout();
  EXPECT_TRUE(absl::StrContains(out, "Watching job " + id)) << out;
  EXPECT_TRUE(absl::StrContains(out, "\r\033[K[##########")) << out;
  EXPECT_TRUE(absl::StrContains(out, "]  step 100/200  loss 2.5000  12.3k tok/s  ETA 1m20s  50%"))
      << out;

  v1::JobResult result;
  result.set_final_loss(2.0f);
  ASSERT_TRUE(worker.Succeed(*a, result).ok());
  absl::StatusOr<int> status = (*p)->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status() << (*p)->Stdout();
  EXPECT_EQ(*status, 0) << (*p)->Stdout();
  EXPECT_TRUE(absl::StrContains((*p)->Stdout(), "SUCCEEDED (final loss 2.0000)")) << (*p)->Stdout();
}

TEST_F(MesactlTest, LogsFollowStreamsUntilTheJobEnds) {
  RunResult submit = Mesactl({"submit", Example("train_tiny_cpu.yaml"), "--json"});
  ASSERT_EQ(submit.exit_status, 0) << submit.err;
  std::string id = ParseJson(submit)["id"];
  FakeWorker worker(coordinator_->channel(), "logs-worker", 4);
  ASSERT_TRUE(worker.Register().ok());
  absl::StatusOr<v1::Assignment> a = worker.WaitForAssignment(absl::Seconds(10));
  ASSERT_TRUE(a.ok()) << a.status();

  auto send = [&](const std::string& text, const std::string& stream, int rank) {
    v1::UpdateAttemptRequest update;
    update.set_job_id(id);
    update.set_attempt(a->attempt());
    update.set_phase(v1::ATTEMPT_PHASE_RUNNING);
    auto* line = update.add_logs();
    line->set_text(text);
    line->set_stream(stream);
    line->set_rank(rank);
    line->set_attempt(a->attempt());
    ASSERT_TRUE(worker.Update(update).ok());
  };
  send("first line", "stdout", 0);
  absl::StatusOr<std::unique_ptr<Process>> logs = Process::Start(
      RunfilePath("cli/mesactl"), {"--server=" + coordinator_->address(), "logs", id, "--follow"});
  ASSERT_TRUE(logs.ok()) << logs.status();
  EXPECT_TRUE((*logs)->WaitForLinePrefix("first line", absl::Seconds(10)).ok());
  send("second line", "stderr", 1);  // arrives while following
  EXPECT_TRUE((*logs)->WaitForLinePrefix("[rank 1 stderr] second line", absl::Seconds(10)).ok())
      << (*logs)->Stdout();
  v1::JobResult result;
  ASSERT_TRUE(worker.Succeed(*a, result).ok());
  absl::StatusOr<int> status = (*logs)->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << "logs --follow did not end with the job: " << status.status();
  EXPECT_EQ(*status, 0) << (*logs)->Stderr();
}

}  // namespace
}  // namespace mesa::testing
