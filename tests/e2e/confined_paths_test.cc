// Confined paths, end to end: a real coordinator started with --data_roots and
// --checkpoint_root, a real worker and the real mesa-train on loopback. A spec whose paths leave
// the roots is refused at submit (lexically, and through symbolic links the coordinator can see);
// a symbolic link made after the submission is caught by the worker at use, which fails the
// attempt as a user error; a job without checkpoint.dir trains in its own directory. With owners,
// a link made after submit from a user's directory into another user's is refused at use too.
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster.h"
#include "tests/process_harness.h"

namespace mesa::e2e {
namespace {

namespace fs = std::filesystem;
using mesa::v1::Job;
using mesa::v1::JobSpec;

constexpr absl::Duration kJobTimeout = absl::Seconds(150);

struct Roots {
  std::string data;        // the corpus' directory
  std::string checkpoint;  // an empty directory of its own
  std::string outside;     // neither: holds a copy of the training shard
};

Roots MakeRoots() {
  Roots roots;
  roots.data = fs::path(TheCorpus().train).parent_path().string();
  roots.checkpoint = testing::NewTempDir("ckroot-");
  roots.outside = testing::NewTempDir("outside-");
  fs::copy_file(TheCorpus().train, roots.outside + "/train_000.bin");
  return roots;
}

ClusterOptions Confined(const Roots& roots) {
  ClusterOptions options;
  options.coordinator_args = {"--data_roots=" + roots.data,
                              "--checkpoint_root=" + roots.checkpoint};
  return options;
}

// The submission's status code and message.
std::pair<absl::StatusCode, std::string> SubmitError(Cluster& cluster, const JobSpec& spec) {
  auto job = cluster.Submit(spec);
  if (job.ok()) return {absl::StatusCode::kOk, job->id()};
  return {job.status().code(), std::string(job.status().message())};
}

JobSpec WithCheckpointDir(const std::string& dir) {
  JobSpec spec = TinyTrain("confined", 10, 0);
  spec.mutable_checkpoint()->set_dir(dir);
  return spec;
}

TEST(ConfinedPathsTest, SubmitRefusesPathsOutsideTheRootsNamingTheField) {
  const Roots roots = MakeRoots();
  auto cluster = Cluster::Start(0, Confined(roots));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Cluster& c = **cluster;
  fs::create_directories(roots.checkpoint + "/named");
  fs::create_directory_symlink(roots.outside, roots.checkpoint + "/named/escape");
  fs::create_symlink(roots.outside + "/train_000.bin", roots.data + "/linked.bin");

  struct Case {
    const char* what;
    JobSpec spec;
    absl::StatusCode code;
    const char* field;
  };
  JobSpec data_outside = TinyTrain("confined", 10, 0);
  data_outside.mutable_data()->set_train_path(roots.outside + "/train_000.bin");
  JobSpec data_link = TinyTrain("confined", 10, 0);
  data_link.mutable_data()->set_train_path(roots.data + "/linked.bin");
  JobSpec data_dotdot = TinyTrain("confined", 10, 0);
  data_dotdot.mutable_data()->set_train_path(
      roots.data + "/../" + fs::path(roots.outside).filename().string() + "/train_*.bin");
  const Case cases[] = {
      {"outside the root", WithCheckpointDir(roots.outside + "/c"),
       absl::StatusCode::kInvalidArgument, "spec.checkpoint.dir: "},
      {"with ..", WithCheckpointDir(roots.checkpoint + "/named/../../escaped"),
       absl::StatusCode::kInvalidArgument, "spec.checkpoint.dir: "},
      {"into another job's directory", WithCheckpointDir(roots.checkpoint + "/job-1/mine"),
       absl::StatusCode::kInvalidArgument, "spec.checkpoint.dir: "},
      {"the root itself", WithCheckpointDir(roots.checkpoint), absl::StatusCode::kInvalidArgument,
       "spec.checkpoint.dir: "},
      {"through a symlink", WithCheckpointDir(roots.checkpoint + "/named/escape/run"),
       absl::StatusCode::kPermissionDenied, "spec.checkpoint.dir: "},
      {"data outside the data roots", data_outside, absl::StatusCode::kInvalidArgument,
       "spec.data.train_path: "},
      {"data through a symlink", data_link, absl::StatusCode::kPermissionDenied,
       "spec.data.train_path: "},
      {"data with ..", data_dotdot, absl::StatusCode::kInvalidArgument, "spec.data.train_path: "},
  };
  for (const Case& k : cases) {
    auto [code, message] = SubmitError(c, k.spec);
    EXPECT_EQ(code, k.code) << k.what << ": " << message;
    EXPECT_TRUE(absl::StrContains(message, k.field)) << k.what << ": " << message;
  }
  // A directory of one's own under the root is accepted.
  auto [code, id] = SubmitError(c, WithCheckpointDir(roots.checkpoint + "/named/mine"));
  EXPECT_EQ(code, absl::StatusCode::kOk) << id;
}

TEST(ConfinedPathsTest, CoordinatorRefusesRootsThatAreNotAbsoluteAndNormal) {
  for (const std::string& flag : {std::string("--data_roots=/data,relative"),
                                  std::string("--checkpoint_root=/ckpt/../etc")}) {
    auto run = testing::RunProcess(CoordinatorBinary(),
                                   {"--listen=127.0.0.1:0", "--metrics_listen=",
                                    "--db=" + testing::NewTempDir("db-") + "/db", flag},
                                   absl::Seconds(20));
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->exit_status, 2) << flag << ": " << run->err;
    EXPECT_TRUE(absl::StrContains(run->err, "--checkpoint_root and --data_roots")) << run->err;
  }
}

TEST(ConfinedPathsTest, JobWithoutCheckpointDirTrainsInItsOwnDirectoryUnderTheRoot) {
  const Roots roots = MakeRoots();
  auto cluster = Cluster::Start(1, Confined(roots));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto submitted = (*cluster)->Submit(TinyTrain("own-dir", 20, 10));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto job = (*cluster)->WaitForEnd(submitted->id(), kJobTimeout);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  const std::string own = roots.checkpoint + "/" + submitted->id() + "/";
  EXPECT_TRUE(absl::StartsWith(job->result().checkpoint_path(), own))
      << job->result().checkpoint_path();
  EXPECT_TRUE(fs::exists(job->result().checkpoint_path()));
}

TEST(ConfinedPathsTest, SymlinkMadeAfterSubmitIsRefusedByTheWorkerAsAUserError) {
  const Roots roots = MakeRoots();
  auto cluster = Cluster::Start(0, Confined(roots));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Cluster& c = **cluster;
  // Accepted at submit: neither path exists yet, both lie inside their roots.
  JobSpec checkpoint_link = WithCheckpointDir(roots.checkpoint + "/named/later");
  checkpoint_link.set_max_retries(3);
  JobSpec data_link = TinyTrain("data-link", 10, 0);
  data_link.mutable_data()->set_train_path(roots.data + "/later_*.bin");
  data_link.set_max_retries(3);
  auto first = c.Submit(checkpoint_link);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = c.Submit(data_link);
  ASSERT_TRUE(second.ok()) << second.status();
  // Then links that leave the roots appear, before any worker runs the jobs.
  fs::create_directories(roots.checkpoint + "/named");
  fs::create_directory_symlink(roots.outside, roots.checkpoint + "/named/later");
  fs::create_symlink(roots.outside + "/train_000.bin", roots.data + "/later_000.bin");
  ASSERT_TRUE(c.StartWorker("w1").ok());

  for (auto [id, field] : {std::pair{first->id(), "spec.checkpoint.dir: "},
                           std::pair{second->id(), "spec.data.train_path: "}}) {
    auto job = c.WaitForEnd(id, kJobTimeout);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->state(), mesa::v1::JOB_STATE_FAILED) << job->DebugString();
    EXPECT_EQ(job->attempts(), 1) << "a user error is not retried";
    EXPECT_TRUE(absl::StrContains(job->failure_reason(), "confined paths"))
        << job->failure_reason();
    EXPECT_TRUE(absl::StrContains(job->failure_reason(), field)) << job->failure_reason();
  }
  // The trainer never ran: nothing was written through the link.
  EXPECT_FALSE(fs::exists(roots.outside + "/step-00000010"));
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(roots.outside)) ++entries;
  EXPECT_EQ(entries, 1);  // the shard copy only
}

// Owner-scoped checkpoint paths at use: alice's job is accepted at submit (its checkpoint.dir and
// init_from lie in <root>/users/alice/ and do not exist yet); then links from her directory into
// bob's appear. The worker resolves them before it starts the trainer and fails each job as a
// user error; nothing is written into bob's directory.
TEST(ConfinedPathsTest, LinkIntoAnotherUsersDirectoryIsRefusedByTheWorkerAsAUserError) {
  const Roots roots = MakeRoots();
  auto cluster = Cluster::Start(0, Confined(roots));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Cluster& c = **cluster;
  const std::string alice = roots.checkpoint + "/users/alice";
  const std::string bob = roots.checkpoint + "/users/bob";
  fs::create_directories(alice);
  fs::create_directories(bob + "/secret");
  auto as_alice = c.ClientAs("alice");
  ASSERT_TRUE(as_alice.ok()) << as_alice.status();
  JobSpec write_link = WithCheckpointDir(alice + "/run");
  write_link.set_max_retries(3);
  JobSpec read_link = TinyTrain("read-link", 10, 0);
  read_link.mutable_checkpoint()->set_init_from(alice + "/from");
  read_link.set_max_retries(3);
  auto first = (*as_alice)->Submit(write_link, "");
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = (*as_alice)->Submit(read_link, "");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->owner(), "alice");
  fs::create_directory_symlink(bob, alice + "/run");
  fs::create_directory_symlink(bob + "/secret", alice + "/from");
  ASSERT_TRUE(c.StartWorker("w1").ok());

  for (auto [id, field] : {std::pair{first->id(), "spec.checkpoint.dir: "},
                           std::pair{second->id(), "spec.checkpoint.init_from: "}}) {
    auto job = c.WaitForEnd(id, kJobTimeout);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->state(), mesa::v1::JOB_STATE_FAILED) << job->DebugString();
    EXPECT_EQ(job->attempts(), 1) << "a user error is not retried";
    EXPECT_TRUE(absl::StrContains(job->failure_reason(), field)) << job->failure_reason();
    EXPECT_TRUE(absl::StrContains(job->failure_reason(), "directory of another user"))
        << job->failure_reason();
    EXPECT_FALSE(absl::StrContains(job->failure_reason(), "/users/bob")) << job->failure_reason();
  }
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : fs::recursive_directory_iterator(bob)) ++entries;
  EXPECT_EQ(entries, 1);  // bob's own, empty "secret" only
}

}  // namespace
}  // namespace mesa::e2e
