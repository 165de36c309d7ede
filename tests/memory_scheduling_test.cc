// Memory as a schedulable worker resource (item 8): workers report their memory when
// they register, jobs may request memory per rank (spec.resources.memory_bytes), and the real
// coordinator places a rank only where that much is free after what the ranks running there
// requested. A job no live worker can hold is explained as such and blocks nobody.

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/coordinator_harness.h"

namespace mesa::testing {
namespace {

using ::mesa::v1::Job;

constexpr int64_t kGiB = int64_t{1} << 30;

class MemorySchedulingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir("memory_scheduling_test");
    auto c = CoordinatorProcess::Start(dir_ + "/mesa.db");
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    jobs_ = coordinator_->JobStub();
  }

  grpc::Status Submit(int64_t memory_bytes, int cpu_threads, Job* out) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = TinyTrainSpec(absl::StrCat("mem-", memory_bytes >> 30, "g"));
    request.mutable_spec()->mutable_resources()->set_memory_bytes(memory_bytes);
    request.mutable_spec()->mutable_resources()->set_cpu_threads(cpu_threads);
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    return jobs_->SubmitJob(&context, request, out);
  }

  Job MustSubmit(int64_t memory_bytes, int cpu_threads = 1) {
    Job job;
    grpc::Status s = Submit(memory_bytes, cpu_threads, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  Job Get(const std::string& id) {
    v1::GetJobRequest request;
    request.set_id(id);
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    Job job;
    grpc::Status s = jobs_->GetJob(&context, request, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  // The workers of the job's attempt once it left the queue (bounded wait); empty if it did not.
  std::vector<std::string> PlacedOn(const std::string& id) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      Job job = Get(id);
      if (job.state() != v1::JOB_STATE_QUEUED) {
        return std::vector<std::string>(job.workers().begin(), job.workers().end());
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return {};
  }

  v1::ExplainJobResponse Explain(const std::string& id) {
    v1::ExplainJobRequest request;
    request.set_id(id);
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    v1::ExplainJobResponse out;
    grpc::Status s = jobs_->ExplainJob(&context, request, &out);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return out;
  }

  std::string dir_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
};

TEST_F(MemorySchedulingTest, RanksArePlacedOnlyWhereTheirMemoryIsFree) {
  // Best fit by CPU slots alone would put a 1-slot job on "small" (the fullest that fits).
  FakeWorker big(coordinator_->channel(), "big", /*cpu_slots=*/8);
  big.set_memory_bytes(8 * kGiB);
  FakeWorker small(coordinator_->channel(), "small", /*cpu_slots=*/4);
  small.set_memory_bytes(2 * kGiB);
  FakeWorker unreported(coordinator_->channel(), "unreported", /*cpu_slots=*/16);
  for (FakeWorker* w : {&big, &small, &unreported}) ASSERT_TRUE(w->Register().ok());

  Job six = MustSubmit(6 * kGiB);
  EXPECT_EQ(PlacedOn(six.id()), std::vector<std::string>{"big"});
  absl::StatusOr<v1::Assignment> six_run = big.WaitForAssignment(absl::Seconds(10));
  ASSERT_TRUE(six_run.ok()) << six_run.status();
  ASSERT_TRUE(big.Running(*six_run, v1::Progress()).ok());

  // 4 GiB: "big" has 2 GiB left, "small" 2 GiB, "unreported" reported none: it waits, as the head
  // with "big" reserved.
  Job four = MustSubmit(4 * kGiB);
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(Get(four.id()).state(), v1::JOB_STATE_QUEUED);
  v1::ExplainJobResponse why = Explain(four.id());
  EXPECT_TRUE(absl::StrContains(why.reason(), "with 4 GiB memory each")) << why.reason();
  EXPECT_TRUE(absl::StrContains(why.reason(), "reserved workers [big]")) << why.reason();

  // More than any live worker has: explained as such, and it blocks nobody.
  Job huge = MustSubmit(64 * kGiB);
  // 1 GiB fits "small" (outside the reservation); a job stating no memory goes to "unreported".
  Job one = MustSubmit(1 * kGiB);
  Job no_memory = MustSubmit(0, /*cpu_threads=*/16);
  EXPECT_EQ(PlacedOn(one.id()), std::vector<std::string>{"small"});
  EXPECT_EQ(PlacedOn(no_memory.id()), std::vector<std::string>{"unreported"});
  EXPECT_EQ(Get(huge.id()).state(), v1::JOB_STATE_QUEUED);
  why = Explain(huge.id());
  EXPECT_TRUE(absl::StrContains(why.reason(), "cannot fit on the live workers")) << why.reason();
  EXPECT_TRUE(absl::StrContains(why.reason(), "memory for at most 0 such rank(s)")) << why.reason();
  EXPECT_TRUE(absl::StrContains(why.reason(), "reported: 8 GiB")) << why.reason();

  // Once the 6 GiB job ends its memory is free again and the 4 GiB job starts on "big".
  ASSERT_TRUE(big.Succeed(*six_run, v1::JobResult()).ok());
  EXPECT_EQ(PlacedOn(four.id()), std::vector<std::string>{"big"});
  EXPECT_EQ(Get(huge.id()).state(), v1::JOB_STATE_QUEUED);
}

TEST_F(MemorySchedulingTest, RequestsAndReportsAreValidated) {
  Job job;
  grpc::Status s = Submit(-1, 1, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(
      absl::StrContains(s.error_message(), "spec.resources.memory_bytes: must be between 0"))
      << s.error_message();
  s = Submit(int64_t{1} << 51, 1, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();

  FakeWorker negative(coordinator_->channel(), "negative", /*cpu_slots=*/1);
  negative.set_memory_bytes(-5);
  absl::Status registered = negative.Register();
  EXPECT_EQ(registered.code(), absl::StatusCode::kInvalidArgument) << registered;
  EXPECT_TRUE(absl::StrContains(registered.message(), "resources.memory_bytes")) << registered;
}

// The real agent reports the memory it offers (here --memory_bytes) when it registers.
TEST_F(MemorySchedulingTest, RealAgentReportsItsMemory) {
  absl::StatusOr<std::unique_ptr<Process>> agent = Process::Start(
      RunfilePath("worker/mesa-worker"),
      {"--coordinator=" + coordinator_->address(), "--worker_id=agent", "--gpus=none",
       "--cpu_slots=2", absl::StrCat("--memory_bytes=", 2 * kGiB), "--workdir=" + dir_ + "/agent",
       "--trainer=/bin/true", "--metrics_listen=127.0.0.1:0"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  Job three = MustSubmit(3 * kGiB);
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  v1::ExplainJobResponse why;
  while (absl::Now() < deadline) {
    why = Explain(three.id());
    if (why.live_workers() == 1) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(why.live_workers(), 1) << why.reason();
  EXPECT_EQ(why.state(), v1::JOB_STATE_QUEUED);
  EXPECT_TRUE(absl::StrContains(why.reason(), "reported: 2 GiB")) << why.reason();
  (*agent)->Terminate(absl::Seconds(10)).IgnoreError();
}

}  // namespace
}  // namespace mesa::testing
