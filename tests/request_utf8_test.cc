// Requests gRPC's C++ server cannot parse (item 10): a proto3 string field holding bytes
// that are not UTF-8 used to end the call INTERNAL with an empty message. The real coordinator now
// answers INVALID_ARGUMENT naming the request type and the field, and mesactl refuses such
// arguments itself. All against the real binaries on loopback.

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "tests/coordinator_harness.h"

namespace mesa::testing {
namespace {

using ::mesa::v1::Job;

constexpr char kNotUtf8[] = "caf\xe9";  // Latin-1

class RequestUtf8Test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir("request_utf8_test");
    auto c = CoordinatorProcess::Start(dir_ + "/mesa.db");
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    jobs_ = coordinator_->JobStub();
  }

  std::string dir_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
};

void ExpectNamesField(const grpc::Status& s, const std::string& type, const std::string& field) {
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), absl::StrCat("not a valid ", type)))
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), absl::StrCat("field ", field, " is not valid")))
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "UTF-8")) << s.error_message();
  EXPECT_FALSE(absl::StrContains(s.error_message(), "caf")) << "echoes the input";
}

TEST_F(RequestUtf8Test, UnaryAndStreamingCallsNameTheField) {
  {
    v1::CancelJobRequest request;
    request.set_id("job-1");
    request.set_reason(kNotUtf8);
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    Job out;
    ExpectNamesField(jobs_->CancelJob(&context, request, &out), "mesa.v1.CancelJobRequest",
                     "mesa.v1.CancelJobRequest.reason");
  }
  {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = TinyTrainSpec("labels");
    (*request.mutable_spec()->mutable_labels())["team"] = kNotUtf8;
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    Job out;
    ExpectNamesField(jobs_->SubmitJob(&context, request, &out), "mesa.v1.SubmitJobRequest",
                     "mesa.v1.JobSpec.LabelsEntry.value");
  }
  {
    v1::WatchJobRequest request;
    request.set_id(kNotUtf8);
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    auto reader = jobs_->WatchJob(&context, request);
    v1::JobEvent event;
    EXPECT_FALSE(reader->Read(&event));
    ExpectNamesField(reader->Finish(), "mesa.v1.WatchJobRequest", "mesa.v1.WatchJobRequest.id");
  }
  {
    // The worker API too (the agent sanitises what it sends; another client may not).
    auto workers = coordinator_->WorkerStub();
    v1::UpdateAttemptRequest request;
    request.set_worker_id("w1");
    request.set_job_id("job-1");
    request.set_attempt(1);
    request.add_logs()->set_text(kNotUtf8);
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    v1::UpdateAttemptResponse out;
    ExpectNamesField(workers->UpdateAttempt(&context, request, &out),
                     "mesa.v1.UpdateAttemptRequest", "mesa.v1.LogLine.text");
  }
  // The server still answers valid requests, and a later error is not blamed on that field.
  v1::GetJobRequest get;
  get.set_id("job-404");
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(10));
  Job out;
  grpc::Status s = jobs_->GetJob(&context, get, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
}

// Bytes that are no protobuf message at all: no field to name, still INVALID_ARGUMENT and clear.
TEST_F(RequestUtf8Test, MalformedRequestIsInvalidArgument) {
  const std::string garbage = "\x0a\xff\xff\xff\xff\x0f";  // field 1, length past the end
  grpc::Slice slice(garbage);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(10));
  grpc::internal::RpcMethod method("/mesa.v1.JobService/GetJob",
                                   grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::Status status = grpc::internal::BlockingUnaryCall(coordinator_->channel().get(), method,
                                                          &context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "not a valid mesa.v1.GetJobRequest"))
      << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "could not be parsed"))
      << status.error_message();
}

// mesactl names the argument itself instead of sending what the server cannot parse.
TEST_F(RequestUtf8Test, MesactlRefusesArgumentsThatAreNotUtf8) {
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "--server=" + coordinator_->address());
    absl::StatusOr<RunResult> r =
        RunProcess(RunfilePath("cli/mesactl"), args, absl::Seconds(20), {});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{-1, "", r.status().ToString()};
  };
  RunResult reason = run({"cancel", "job-1", std::string("--reason=") + kNotUtf8});
  EXPECT_EQ(reason.exit_status, 2) << reason.err;
  EXPECT_TRUE(absl::StrContains(reason.err,
                                "cancel --reason is not valid UTF-8 (byte 0xe9 at "
                                "offset 3)"))
      << reason.err;
  RunResult id = run({"get", kNotUtf8});
  EXPECT_EQ(id.exit_status, 2) << id.err;
  EXPECT_TRUE(absl::StrContains(id.err, "get argument 1 is not valid UTF-8")) << id.err;
  RunResult label = run({"list", std::string("--label=team=") + kNotUtf8});
  EXPECT_EQ(label.exit_status, 2) << label.err;
  EXPECT_TRUE(absl::StrContains(label.err, "--label is not valid UTF-8")) << label.err;
}

}  // namespace
}  // namespace mesa::testing
