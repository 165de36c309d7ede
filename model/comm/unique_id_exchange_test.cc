#include "model/comm/unique_id_exchange.h"

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace mesa::model {
namespace {

std::string TempDir(const char* name) {
  const char* base = getenv("TEST_TMPDIR");
  std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(FileIdExchangeTest, RootPublishesOthersWait) {
  const std::string dir = TempDir("rv1");
  FileIdExchange root(dir, 0, absl::Seconds(5)), other(dir, 1, absl::Seconds(5));
  std::string got;
  std::thread waiter([&] { ASSERT_TRUE(other.Exchange("job.1.nccl", 0, &got).ok()); });
  absl::SleepFor(absl::Milliseconds(50));  // the reader is already polling
  std::string value("\x00\x01binary id\xff", 13);
  ASSERT_TRUE(root.Exchange("job.1.nccl", 0, &value).ok());
  waiter.join();
  EXPECT_EQ(got, value);
  // Only the final file remains (written under a temporary name, then renamed), next to the
  // waiter's marker that tells the worker agent which key to fetch.
  std::set<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    files.insert(e.path().filename().string());
  }
  EXPECT_EQ(files, (std::set<std::string>{"job.1.nccl", "job.1.nccl+want"}));
}

TEST(FileIdExchangeTest, MissingRootTimesOut) {
  const std::string dir = TempDir("rv2");
  FileIdExchange other(dir, 1, absl::Milliseconds(200));
  std::string got;
  const absl::Time start = absl::Now();
  absl::Status st = other.Exchange("key", 0, &got);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(other.Exchange("../escape", 0, &got).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExchangeFromSpecTest, Schemes) {
  EXPECT_TRUE(ExchangeFromSpec("file:/tmp/x", 0, absl::Seconds(1)).ok());
  EXPECT_TRUE(ExchangeFromSpec("/tmp/x", 0, absl::Seconds(1)).ok());
  EXPECT_EQ(ExchangeFromSpec("grpc://host:1", 0, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExchangeFromSpec("", 0, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CallbackIdExchangeTest, PublishAndLookup) {
  std::string stored;
  auto publish = [&](absl::string_view, const std::string& v) {
    stored = v;
    return absl::OkStatus();
  };
  auto lookup = [&](absl::string_view key, absl::Time) -> absl::StatusOr<std::string> {
    return std::string(key) + "=" + stored;
  };
  CallbackIdExchange root(0, absl::Seconds(1), publish, lookup);
  CallbackIdExchange other(1, absl::Seconds(1), publish, lookup);
  std::string v = "id";
  ASSERT_TRUE(root.Exchange("k", 0, &v).ok());
  std::string got;
  ASSERT_TRUE(other.Exchange("k", 0, &got).ok());
  EXPECT_EQ(got, "k=id");
}

}  // namespace
}  // namespace mesa::model
