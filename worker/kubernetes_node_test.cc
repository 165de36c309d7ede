// The Node reading and the follower's rules. The HTTPS path against a stand-in API server (real
// TLS, bearer token) is tested end to end in //tests/e2e:cordon_test.
#include "worker/kubernetes_node.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mesa::worker {
namespace {

std::string NodeJson(const std::string& name, const std::string& spec) {
  return "{\"kind\": \"Node\", \"apiVersion\": \"v1\", \"metadata\": {\"name\": \"" + name +
         "\"}, \"spec\": " + spec + "}";
}

TEST(ParseNodeUnschedulable, ReadsSpecUnschedulable) {
  EXPECT_TRUE(*ParseNodeUnschedulable(NodeJson("n1", "{\"unschedulable\": true}"), "n1"));
  EXPECT_FALSE(*ParseNodeUnschedulable(NodeJson("n1", "{\"unschedulable\": false}"), "n1"));
  // kubectl uncordon removes the field.
  EXPECT_FALSE(*ParseNodeUnschedulable(NodeJson("n1", "{\"podCIDR\": \"10.0.0.0/24\"}"), "n1"));
  EXPECT_FALSE(
      *ParseNodeUnschedulable("{\"kind\": \"Node\", \"metadata\": {\"name\": \"n1\"}}", "n1"));
}

TEST(ParseNodeUnschedulable, RefusesWhatIsNotThisNode) {
  for (const std::string& bad :
       {std::string("not json"), std::string("[]"),
        std::string("{\"kind\": \"Status\", \"message\": \"x\"}"),
        NodeJson("other", "{\"unschedulable\": true}"),
        NodeJson("n1", "{\"unschedulable\": \"yes\"}"), NodeJson("n1", "[]")}) {
    auto parsed = ParseNodeUnschedulable(bad, "n1");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(CheckNodeName, DnsSubdomainsOnly) {
  EXPECT_TRUE(CheckNodeName("gpu-node-1.example").ok());
  for (const std::string& bad : {std::string(""), std::string("Node"), std::string("-a"),
                                 std::string("a/b"), std::string("a?x=1"), std::string(254, 'a')}) {
    EXPECT_EQ(CheckNodeName(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(NodeClient, MissingTokenAndUnreachableServerAreErrors) {
  KubernetesApiOptions options;
  options.server = "https://127.0.0.1:1";  // nothing listens on port 1
  options.token_file = ::testing::TempDir() + "/no-such-token";
  options.ca_file = ::testing::TempDir() + "/no-such-ca";
  options.timeout = absl::Seconds(2);
  EXPECT_EQ(NodeClient(options).Unschedulable("n1").status().code(),
            absl::StatusCode::kFailedPrecondition);
  options.token_file = ::testing::TempDir() + "/token";
  std::ofstream(options.token_file) << "secret\n";
  auto refused = NodeClient(options).Unschedulable("n1");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_EQ(NodeClient(options).Unschedulable("../x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(InClusterApiOptions, FromTheServiceEnvironment) {
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  EXPECT_EQ(InClusterApiOptions().server, "https://10.96.0.1:443");
  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  EXPECT_EQ(InClusterApiOptions().server, "https://[fd00::1]:443");
  EXPECT_EQ(InClusterApiOptions().token_file,
            "/var/run/secrets/kubernetes.io/serviceaccount/token");
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_EQ(InClusterApiOptions().server, "");
}

// A failed read never reaches the agent (the drain state stays); errors are logged once per
// change, not on every poll.
TEST(NodeCordonFollower, ReadErrorsNeverChangeTheDrainState) {
  std::vector<absl::StatusOr<bool>> readings = {true, absl::UnavailableError("down"),
                                                absl::UnavailableError("down"), false};
  size_t next = 0;
  std::vector<bool> applied;
  int failures = 0;
  std::vector<std::string> log;
  NodeCordonFollower follower("n1", absl::Seconds(5),
                              {.read = [&]() { return readings[next++]; },
                               .apply =
                                   [&](bool cordoned) {
                                     applied.push_back(cordoned);
                                     return absl::OkStatus();
                                   },
                               .read_failed = [&](const absl::Status&) { ++failures; },
                               .log = [&](const std::string& line) { log.push_back(line); }});
  EXPECT_TRUE(follower.PollOnce().ok());
  EXPECT_FALSE(follower.PollOnce().ok());
  EXPECT_FALSE(follower.PollOnce().ok());
  EXPECT_TRUE(follower.PollOnce().ok());
  EXPECT_EQ(applied, (std::vector<bool>{true, false}));
  EXPECT_EQ(failures, 2);
  ASSERT_EQ(log.size(), 2u);  // the error once, then the recovery
  EXPECT_TRUE(absl::StrContains(log[0], "reading node n1 failed")) << log[0];
  EXPECT_TRUE(absl::StrContains(log[0], "drain state stays")) << log[0];
  EXPECT_TRUE(absl::StrContains(log[1], "followed again")) << log[1];
}

}  // namespace
}  // namespace mesa::worker
