#include "cli/config.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mesa::cli {
namespace {

constexpr char kToken[] = "alice-7f3c9a1e5b2d4c6a";

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    path_ = dir_ + "/config.yaml";
  }
  void Write(const std::string& text, mode_t mode = 0600) {
    std::ofstream(path_) << text;
    chmod(path_.c_str(), mode);
  }
  std::string dir_;
  std::string path_;
};

TEST_F(ConfigTest, CurrentContextAndNamedContexts) {
  std::ofstream(dir_ + "/prod.token") << kToken << "\n";
  chmod((dir_ + "/prod.token").c_str(), 0600);
  Write(absl::StrCat("current_context: prod\ncontexts:\n",
                     "  - {name: prod, server: mesa.example:50051, ca: certs/ca.pem, "
                     "token_file: prod.token}\n",
                     "  - {name: dev, server: 127.0.0.1:50051, token: ", kToken, "}\n"));
  absl::StatusOr<ContextSettings> prod = LoadContext(path_, "", true);
  ASSERT_TRUE(prod.ok()) << prod.status();
  EXPECT_EQ(prod->server, "mesa.example:50051");
  EXPECT_EQ(prod->ca, dir_ + "/certs/ca.pem");  // relative to the file
  EXPECT_EQ(prod->token, kToken);
  EXPECT_TRUE(prod->warnings.empty());
  absl::StatusOr<ContextSettings> dev = LoadContext(path_, "dev", true);
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(dev->server, "127.0.0.1:50051");
  EXPECT_EQ(dev->ca, "");
  EXPECT_EQ(dev->token, kToken);
  absl::StatusOr<ContextSettings> missing = LoadContext(path_, "staging", true);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "no context \"staging\""));
}

TEST_F(ConfigTest, NoFileNoContext) {
  absl::StatusOr<ContextSettings> none = LoadContext(dir_ + "/absent.yaml", "", false);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->server, "");
  EXPECT_FALSE(LoadContext(dir_ + "/absent.yaml", "", true).ok());       // named by --config
  EXPECT_FALSE(LoadContext(dir_ + "/absent.yaml", "prod", false).ok());  // --context needs it
  Write("contexts:\n  - {name: dev, server: 127.0.0.1:1}\n");
  absl::StatusOr<ContextSettings> unselected = LoadContext(path_, "", true);
  ASSERT_TRUE(unselected.ok()) << unselected.status();
  EXPECT_EQ(unselected->server, "");  // no current_context, no --context
}

TEST_F(ConfigTest, ErrorsNameTheKeyAndNeverTheToken) {
  Write(absl::StrCat("contexts:\n  - {name: a, token: ", kToken, ", sever: x:1}\n"));
  absl::StatusOr<ContextSettings> typo = LoadContext(path_, "a", true);
  ASSERT_FALSE(typo.ok());
  EXPECT_TRUE(absl::StrContains(typo.status().message(), "unknown key \"sever\""));
  EXPECT_FALSE(absl::StrContains(typo.status().message(), kToken));
  Write(absl::StrCat("contexts:\n  - {name: a, token: ", kToken, ", token_file: t}\n"));
  EXPECT_TRUE(
      absl::StrContains(LoadContext(path_, "a", true).status().message(), "token and token_file"));
  Write(absl::StrCat("contexts: [{name: a, token: ", kToken, "\n"));  // not YAML
  absl::StatusOr<ContextSettings> broken = LoadContext(path_, "a", true);
  ASSERT_FALSE(broken.ok());
  EXPECT_FALSE(absl::StrContains(broken.status().message(), kToken));
}

TEST_F(ConfigTest, TokenInAFileOthersMayReadIsAWarning) {
  Write(absl::StrCat("current_context: a\ncontexts:\n  - {name: a, token: ", kToken, "}\n"), 0644);
  absl::StatusOr<ContextSettings> a = LoadContext(path_, "", true);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->warnings.size(), 1u);
  EXPECT_TRUE(absl::StrContains(a->warnings[0], "chmod 600"));
  EXPECT_FALSE(absl::StrContains(a->warnings[0], kToken));
}

}  // namespace
}  // namespace mesa::cli
