#include "coordinator/auth.h"

#include <sys/stat.h>

#include <fstream>

#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

constexpr char kTokens[] = R"(users:
  - {name: alice, token: alice-0123456789abcdef, role: user}
  - {name: vera, token: vera-0123456789abcdef, role: viewer}
  - name: root
    token: root-0123456789abcdef
    role: admin
)";

TEST(ConstantTimeEquals, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("secret-token", "secret-token"));
  EXPECT_FALSE(ConstantTimeEquals("secret-token", "secret-tokeN"));
  EXPECT_FALSE(ConstantTimeEquals("secret-token", "secret-token2"));
  EXPECT_FALSE(ConstantTimeEquals("secret-token2", "secret-token"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_FALSE(ConstantTimeEquals("x", ""));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(TokenTable, FindsUsersAndRoles) {
  absl::StatusOr<TokenTable> table = TokenTable::Parse(kTokens);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 3u);
  std::optional<Principal> alice = table->Find("alice-0123456789abcdef");
  ASSERT_TRUE(alice.has_value());
  EXPECT_EQ(alice->name, "alice");
  EXPECT_EQ(alice->role, Role::kUser);
  EXPECT_EQ(table->Find("vera-0123456789abcdef")->role, Role::kViewer);
  EXPECT_EQ(table->Find("root-0123456789abcdef")->role, Role::kAdmin);
  EXPECT_FALSE(table->Find("alice-0123456789abcdeF").has_value());
  EXPECT_FALSE(table->Find("").has_value());
}

TEST(TokenTable, RefusesBadFilesWithoutEchoingTokens) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"users: [", "not YAML"},
      {"people: []", "list `users`"},
      {"users: []", "no users"},
      {"users: [{name: a, token: short-secret, role: user}]", "at least 16"},
      {"users: [{name: a, token: 'has space 0123456789', role: user}]", "without spaces"},
      {"users: [{name: a, token: a-0123456789abcdef, role: boss}]", "\"boss\""},
      {"users: [{name: a, token: a-0123456789abcdef}]", "role is required"},
      {"users: [{token: a-0123456789abcdef, role: user}]", "name is required"},
      {"users: [{name: a, token: a-0123456789abcdef, role: user, x: 1}]", "unknown field"},
      {"users: [{name: a, token: a-0123456789abcdef, role: user},"
       " {name: a, token: b-0123456789abcdef, role: user}]",
       "repeats"},
      {"users: [{name: a, token: a-0123456789abcdef, role: user},"
       " {name: b, token: a-0123456789abcdef, role: user}]",
       "also the token of a"},
  };
  for (const auto& [yaml, expected] : cases) {
    absl::StatusOr<TokenTable> table = TokenTable::Parse(yaml);
    ASSERT_FALSE(table.ok()) << yaml;
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(table.status().message().find(expected), std::string::npos) << table.status();
    EXPECT_EQ(table.status().message().find("0123456789"), std::string::npos) << table.status();
  }
}

TEST(TokenTable, PerUserQuotaOverrides) {
  auto table = TokenTable::Parse(
      "users:\n"
      "  - {name: alice, token: aaaaaaaaaaaaaaaa1, role: user, quota: {max_gpus: 8, submit_rate: "
      "0.5}}\n"
      "  - {name: bob, token: bbbbbbbbbbbbbbbb2, role: user}\n");
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->quota_overrides().size(), 1u);
  Quotas q;
  q.user = {.max_queued_jobs = 5, .max_gpus = 2};
  q.user_overrides = table->quota_overrides();
  const QuotaLimits alice = q.ForUser("alice");
  EXPECT_EQ(alice.max_gpus, 8);
  EXPECT_EQ(alice.max_queued_jobs, 5);  // not overridden: the flag's value
  EXPECT_EQ(alice.submit_rate, 0.5);
  EXPECT_EQ(q.ForUser("bob").max_gpus, 2);
  for (const char* bad :
       {"{max_gpus: -1}", "{max_gpus: 1.5}", "{gpus: 1}", "{max_gpus: many}", "[1]"}) {
    auto refused = TokenTable::Parse(
        std::string("users:\n  - {name: a, token: aaaaaaaaaaaaaaaa1, role: user, quota: ") + bad +
        "}\n");
    EXPECT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("users[0] (a): quota"), std::string::npos)
        << refused.status();
    EXPECT_EQ(refused.status().message().find("aaaaaaaaaaaaaaaa1"), std::string::npos);
  }
}

TEST(Roles, UserOwnJobsViewerReadsAdminAll) {
  const Principal alice{"alice", Role::kUser}, vera{"vera", Role::kViewer},
      root{"root", Role::kAdmin};
  EXPECT_TRUE(CheckMaySubmit(alice).ok());
  EXPECT_EQ(CheckMaySubmit(vera).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckMaySubmit(root).ok());
  EXPECT_TRUE(CheckMayRead(alice, "job-1", "alice").ok());
  EXPECT_EQ(CheckMayRead(alice, "job-1", "bob").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckMayRead(vera, "job-1", "bob").ok());
  EXPECT_TRUE(CheckMayRead(root, "job-1", "bob").ok());
  EXPECT_TRUE(CheckMayCancel(alice, "job-1", "alice").ok());
  EXPECT_EQ(CheckMayCancel(alice, "job-1", "bob").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckMayCancel(vera, "job-1", "vera").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckMayCancel(root, "job-1", "bob").ok());
  EXPECT_EQ(ListFilter(alice), "alice");
  EXPECT_EQ(ListFilter(vera), "");
  EXPECT_EQ(ListFilter(root), "");
}

TEST(ConfigureServerSecurity, PlaintextOnlyOnLoopback) {
  absl::StatusOr<ServerSecurity> dev = ConfigureServerSecurity({.listen = "127.0.0.1:0"});
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_FALSE(dev->tls);
  ASSERT_FALSE(dev->warnings.empty());
  EXPECT_NE(dev->warnings[0].find("INSECURE"), std::string::npos);
  EXPECT_FALSE(dev->authenticator->tokens_required());

  EXPECT_TRUE(ConfigureServerSecurity({.listen = "[::1]:0", .insecure = true}).ok());
  for (const char* listen : {"0.0.0.0:50051", "10.1.2.3:50051", "[::]:50051"}) {
    for (bool insecure : {false, true}) {
      absl::StatusOr<ServerSecurity> s =
          ConfigureServerSecurity({.listen = listen, .insecure = insecure});
      ASSERT_FALSE(s.ok()) << listen;
      EXPECT_NE(s.status().message().find("not a loopback address"), std::string::npos);
    }
  }
}

TEST(ConfigureServerSecurity, RefusesContradictoryFlags) {
  EXPECT_FALSE(ConfigureServerSecurity({.listen = "127.0.0.1:0", .client_ca = "ca.pem"}).ok());
  EXPECT_FALSE(
      ConfigureServerSecurity(
          {.listen = "127.0.0.1:0", .tls_cert = "c.pem", .tls_key = "k.pem", .insecure = true})
          .ok());
  EXPECT_FALSE(ConfigureServerSecurity({.listen = "127.0.0.1:0", .tls_cert = "c.pem"}).ok());
  EXPECT_FALSE(
      ConfigureServerSecurity({.listen = "127.0.0.1:0", .tokens_file = "/nonexistent.yaml"}).ok());
}

TEST(ConfigureServerSecurity, LoadsTokens) {
  const std::string path = ::testing::TempDir() + "/tokens.yaml";
  std::ofstream(path) << kTokens;
  chmod(path.c_str(), 0644);
  absl::StatusOr<ServerSecurity> s =
      ConfigureServerSecurity({.listen = "127.0.0.1:0", .tokens_file = path});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->authenticator->tokens_required());
  bool mode_warning = false;
  for (const std::string& warning : s->warnings) {
    EXPECT_EQ(warning.find("0123456789"), std::string::npos);
    if (warning.find("chmod 600") != std::string::npos) mode_warning = true;
  }
  EXPECT_EQ(mode_warning, true);  // written with the default umask: readable by others
  chmod(path.c_str(), 0600);
  s = ConfigureServerSecurity({.listen = "127.0.0.1:0", .tokens_file = path});
  ASSERT_TRUE(s.ok()) << s.status();
  for (const std::string& warning : s->warnings) {
    EXPECT_EQ(warning.find("chmod 600"), std::string::npos) << warning;
  }
}

}  // namespace
}  // namespace mesa::coordinator
