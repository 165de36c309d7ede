// Quotas and owner-scoped checkpoint paths, end to end: the real mesa-coordinator with
// TLS, client certificates and bearer tokens, started with quota flags or a checkpoint root.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/client.h"
#include "gtest/gtest.h"
#include "security/tls.h"
#include "tests/coordinator_harness.h"
#include "tests/dev_ca.h"
#include "tests/process_harness.h"

namespace mesa::testing {
namespace {

constexpr char kAliceToken[] = "alice-7f3c9a1e5b2d4c6a";
constexpr char kBobToken[] = "bob-5e6f7a8b9c0d1e2f3";
constexpr char kRootToken[] = "root-0d8e2f4a6c1b3e5d7";

class SecureCoordinatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pki_ = new std::string(NewTempDir("pki"));
    absl::Status made = MakeDevCa(*pki_, {"--workers", "node-a"});
    ASSERT_TRUE(made.ok()) << made;
  }
  static void TearDownTestSuite() { delete pki_; }

  static std::string Pki(const std::string& name) { return *pki_ + "/" + name; }

  // Starts a coordinator with TLS, client certificates, the tokens of alice, bob (users) and
  // root (admin), and `flags`.
  void Start(const std::vector<std::string>& flags, const std::string& bob_quota = "") {
    dir_ = NewTempDir("quota_test");
    const std::string tokens = dir_ + "/tokens.yaml";
    std::ofstream(tokens) << "users:\n  - {name: alice, token: " << kAliceToken
                          << ", role: user}\n  - {name: bob, token: " << kBobToken << ", role: user"
                          << bob_quota << "}\n  - {name: root, token: " << kRootToken
                          << ", role: admin}\n";
    std::filesystem::permissions(
        tokens, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    std::vector<std::string> args = {"--tls_cert=" + Pki("server.pem"),
                                     "--tls_key=" + Pki("server.key"),
                                     "--client_ca=" + Pki("ca.pem"), "--tokens_file=" + tokens};
    args.insert(args.end(), flags.begin(), flags.end());
    auto creds = security::ChannelCredentialsFromFiles(
        {.ca = Pki("ca.pem"), .cert = Pki("node-a.pem"), .key = Pki("node-a.key")});
    ASSERT_TRUE(creds.ok()) << creds.status();
    worker_creds_ = *creds;
    auto c = CoordinatorProcess::Start(dir_ + "/mesa.db", args, worker_creds_);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
  }

  std::unique_ptr<cli::JobClient> Client(const std::string& token) {
    auto client = cli::JobClient::Connect(coordinator_->address(), absl::Seconds(5),
                                          {.ca = Pki("ca.pem"), .token = token});
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  static mesa::v1::JobSpec Spec(const std::string& name, int gpus = 0,
                                const std::string& queue = "") {
    mesa::v1::JobSpec spec = TinyTrainSpec(name);
    if (gpus > 0) {
      spec.mutable_resources()->set_gpus(gpus);
      spec.mutable_training()->set_device("cuda");
    }
    spec.set_queue(queue);
    return spec;
  }

  static std::string* pki_;
  std::string dir_;
  std::shared_ptr<grpc::ChannelCredentials> worker_creds_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
};

std::string* SecureCoordinatorTest::pki_ = nullptr;
using QuotaTest = SecureCoordinatorTest;
using OwnerPathsTest = SecureCoordinatorTest;

void ExpectExhausted(const absl::StatusOr<mesa::v1::Job>& job, const std::string& quota) {
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kResourceExhausted) << job.status();
  EXPECT_TRUE(absl::StrContains(job.status().message(), quota)) << job.status();
}

TEST_F(QuotaTest, UserMaxQueuedJobsRefusesTheNextAndAdmitsOnceOneLeaves) {
  Start({"--user_max_queued_jobs=2"});
  auto alice = Client(kAliceToken);
  auto a1 = alice->Submit(Spec("a1"), "");
  ASSERT_TRUE(a1.ok()) << a1.status();
  ASSERT_TRUE(alice->Submit(Spec("a2"), "").ok());
  ExpectExhausted(alice->Submit(Spec("a3"), ""), "quota user_max_queued_jobs=2 of user \"alice\"");
  // Per user: bob is not affected.
  EXPECT_TRUE(Client(kBobToken)->Submit(Spec("b1"), "").ok());
  // Capacity frees when one of alice's jobs leaves the queue.
  ASSERT_TRUE(alice->Cancel(a1->id(), "make room").ok());
  EXPECT_TRUE(alice->Submit(Spec("a3"), "").ok());
}

TEST_F(QuotaTest, UserMaxGpusRefusesTooBigJobsAndHoldsOthersUntilGpusAreFreed) {
  Start({"--user_max_gpus=2"});
  auto alice = Client(kAliceToken);
  ExpectExhausted(alice->Submit(Spec("big", 4), ""), "quota user_max_gpus=2 of user \"alice\"");
  FakeWorker worker(grpc::CreateChannel(coordinator_->address(), worker_creds_), "node-a", 4,
                    /*gpus=*/4);
  ASSERT_TRUE(worker.Register().ok());
  auto first = alice->Submit(Spec("first", 2), "");
  ASSERT_TRUE(first.ok()) << first.status();
  auto a1 = worker.WaitForAssignment(absl::Seconds(20));
  ASSERT_TRUE(a1.ok()) << a1.status();
  EXPECT_EQ(a1->job_id(), first->id());
  ASSERT_TRUE(worker.Running(*a1, {}).ok());
  // Alice's second job would take her to 4 GPUs: admitted, but held queued.
  auto second = alice->Submit(Spec("second", 2), "");
  ASSERT_TRUE(second.ok()) << second.status();
  auto held = worker.Heartbeat(absl::Seconds(1));
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->assignments_size(), 0);
  auto why = alice->Explain(second->id());
  ASSERT_TRUE(why.ok()) << why.status();
  EXPECT_EQ(why->state(), mesa::v1::JOB_STATE_QUEUED);
  EXPECT_TRUE(absl::StrContains(why->reason(), "quota user_max_gpus=2")) << why->reason();
  // Bob's quota is his own: his job takes the 2 free GPUs past alice's held one.
  auto bobs = Client(kBobToken)->Submit(Spec("bobs", 2), "");
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  auto b1 = worker.WaitForAssignment(absl::Seconds(20));
  ASSERT_TRUE(b1.ok()) << b1.status();
  EXPECT_EQ(b1->job_id(), bobs->id());
  ASSERT_TRUE(worker.Running(*b1, {}).ok());
  // Alice's first job ends and frees its GPUs: her second starts (on them).
  ASSERT_TRUE(worker.Succeed(*a1, {}).ok());
  auto a2 = worker.WaitForAssignment(absl::Seconds(20));
  ASSERT_TRUE(a2.ok()) << a2.status();
  EXPECT_EQ(a2->job_id(), second->id());
}

TEST_F(QuotaTest, TokensFileOverridesAUsersQuota) {
  Start({"--user_max_queued_jobs=1"}, ", quota: {max_queued_jobs: 3}");
  auto alice = Client(kAliceToken);
  ASSERT_TRUE(alice->Submit(Spec("a1"), "").ok());
  ExpectExhausted(alice->Submit(Spec("a2"), ""), "quota user_max_queued_jobs=1 of user \"alice\"");
  auto bob = Client(kBobToken);
  for (const char* name : {"b1", "b2", "b3"}) ASSERT_TRUE(bob->Submit(Spec(name), "").ok());
  ExpectExhausted(bob->Submit(Spec("b4"), ""), "quota user_max_queued_jobs=3 of user \"bob\"");
}

TEST_F(QuotaTest, UserSubmitRateIsATokenBucket) {
  Start({"--user_submit_rate=1", "--user_submit_burst=2"});
  auto alice = Client(kAliceToken);
  ASSERT_TRUE(alice->Submit(Spec("r1"), "").ok());
  ASSERT_TRUE(alice->Submit(Spec("r2"), "").ok());
  ExpectExhausted(alice->Submit(Spec("r3"), ""), "quota user_submit_rate=1/min");
  EXPECT_TRUE(Client(kBobToken)->Submit(Spec("b1"), "").ok());
  // A retried submission with the same client_job_id takes no token.
  auto bob = Client(kBobToken);
  auto first = bob->Submit(Spec("same"), "bob-same");
  ASSERT_TRUE(first.ok()) << first.status();
  auto again = bob->Submit(Spec("same"), "bob-same");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id(), first->id());
}

TEST_F(QuotaTest, QueueQuotasApplyToEachQueue) {
  Start({"--queue_max_queued_jobs=1"});
  auto alice = Client(kAliceToken);
  ASSERT_TRUE(alice->Submit(Spec("q1", 0, "research"), "").ok());
  ExpectExhausted(Client(kBobToken)->Submit(Spec("q2", 0, "research"), ""),
                  "quota queue_max_queued_jobs=1 of queue \"research\"");
  EXPECT_TRUE(alice->Submit(Spec("q3", 0, "prod"), "").ok());
}

void ExpectDenied(const absl::StatusOr<mesa::v1::Job>& job, const std::string& text) {
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kPermissionDenied) << job.status();
  EXPECT_TRUE(absl::StrContains(job.status().message(), text)) << job.status();
}

TEST_F(OwnerPathsTest, NamedDirectoriesBelongToTheirUserAndReadsStayWithTheOwner) {
  const std::string root = NewTempDir("ckpt_root");
  Start({"--checkpoint_root=" + root});
  auto alice = Client(kAliceToken);
  auto bob = Client(kBobToken);
  auto with_dir = [&](const std::string& name, const std::string& dir) {
    mesa::v1::JobSpec spec = Spec(name);
    spec.mutable_checkpoint()->set_dir(dir);
    return spec;
  };
  auto init_from = [&](const std::string& name, const std::string& from) {
    mesa::v1::JobSpec spec = Spec(name);
    spec.mutable_checkpoint()->set_init_from(from);
    return spec;
  };
  // Writing: only below <root>/users/<self>/.
  auto own = alice->Submit(with_dir("own", root + "/users/alice/run1"), "");
  ASSERT_TRUE(own.ok()) << own.status();
  ExpectDenied(alice->Submit(with_dir("bobs", root + "/users/bob/run1"), ""),
               "spec.checkpoint.dir: \"" + root + "/users/bob/run1\" is not below " + root +
                   "/users/alice/");
  ExpectDenied(alice->Submit(with_dir("named", root + "/named/shared"), ""), "spec.checkpoint.dir");
  // Reading: own job directories and own named directories only.
  auto first = alice->Submit(Spec("first"), "");  // checkpoints to <root>/job-<n>
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string job_dir = root + "/" + first->id();
  EXPECT_TRUE(alice->Submit(init_from("continue", job_dir + "/step-100"), "").ok());
  EXPECT_TRUE(alice->Submit(init_from("again", root + "/users/alice/run1"), "").ok());
  ExpectDenied(bob->Submit(init_from("steal", job_dir + "/step-100"), ""),
               "spec.checkpoint.init_from: \"" + job_dir + "/step-100\" is in the directory of " +
                   first->id() + ", a job of another user");
  ExpectDenied(bob->Submit(init_from("peek", root + "/users/alice/run1"), ""),
               "spec.checkpoint.init_from");
  ExpectDenied(bob->Submit(init_from("nojob", root + "/job-999"), ""), "no job of yours");
  mesa::v1::JobSpec eval = Spec("eval");
  eval.set_type(mesa::v1::JOB_TYPE_EVAL);
  eval.mutable_eval()->set_checkpoint(job_dir);
  eval.mutable_data()->set_val_path("/data/tiny/val_*.bin");
  ExpectDenied(bob->Submit(eval, ""), "spec.eval.checkpoint");
  // Symbolic links are followed where the coordinator holds the root.
  std::filesystem::create_directories(root + "/users/alice");
  std::filesystem::create_directories(root + "/users/bob/secret");
  std::filesystem::create_directory_symlink(root + "/users/bob", root + "/users/alice/link");
  ExpectDenied(alice->Submit(with_dir("link", root + "/users/alice/link/run"), ""),
               "(symbolic links followed)");
  // Admins may read and name anything (inside the root).
  auto admin = Client(kRootToken);
  EXPECT_TRUE(admin->Submit(init_from("audit", root + "/users/alice/run1"), "").ok());
  EXPECT_TRUE(admin->Submit(with_dir("ops", root + "/named/ops"), "").ok());
}

// The tokenizer check at submit reads the checkpoints a spec names: it runs only once the
// submitter may read them, so a refusal never tells bob what alice's checkpoint was trained with.
TEST_F(OwnerPathsTest, TokenizerOfAnotherUsersCheckpointIsNotRevealed) {
  const std::string root = NewTempDir("ckpt_root");
  const std::string data = NewTempDir("data_root");
  std::ofstream(data + "/train_000.bin") << "shard";
  const std::string run = root + "/users/alice/run1";
  std::filesystem::create_directories(run + "/step_00000010");
  std::ofstream(run + "/latest") << "step_00000010\n";
  std::ofstream(run + "/step_00000010/state.json")
      << R"({"model": {"vocab_size": 257}, "tokenizer": {"kind": "hf", "vocab_size": 200,)"
      << R"( "bos_id": 199, "files": [{"path": "t.json", "sha256": "ab"}]}})";
  Start({"--checkpoint_root=" + root, "--data_roots=" + data});
  mesa::v1::JobSpec spec = Spec("from-alice");
  spec.mutable_data()->set_train_path(data + "/train_000.bin");
  spec.mutable_data()->clear_val_path();
  spec.mutable_training()->set_eval_interval(0);
  spec.mutable_checkpoint()->set_init_from(run);
  ExpectDenied(Client(kBobToken)->Submit(spec, ""), "spec.checkpoint.init_from");
  auto mine = Client(kAliceToken)->Submit(spec, "");
  ASSERT_FALSE(mine.ok());
  EXPECT_EQ(mine.status().code(), absl::StatusCode::kInvalidArgument) << mine.status();
  EXPECT_TRUE(absl::StrContains(mine.status().message(),
                                "checkpoint.init_from: the job's "
                                "tokenizer is byte"))
      << mine.status();
}

TEST(QuotaFlags, NegativeQuotaRefusesToStart) {
  auto c =
      CoordinatorProcess::Start(NewTempDir("quota_flags") + "/mesa.db", {"--user_max_gpus=-1"});
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace mesa::testing
