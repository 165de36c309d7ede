#include <sys/stat.h>

#include <cerrno>
#include <fstream>

#include "gtest/gtest.h"
#include "model/data/data_loader.h"
#include "model/data/token_shard.h"

namespace mesa::model {
namespace {

std::string TempPath(const std::string& name) {
  return std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/" + name;
}

TEST(TokenShardTest, RoundTripsUint16AndUint32) {
  std::vector<uint32_t> small = {256, 1, 2, 3, 65535};
  ASSERT_TRUE(WriteTokenShard(TempPath("small.bin"), small).ok());
  auto shard = TokenShard::Open(TempPath("small.bin"));
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ((*shard)->version(), kShardVersionU16);
  ASSERT_EQ((*shard)->size(), 5);
  std::vector<uint32_t> read;
  ASSERT_TRUE((*shard)->Read(0, 5, &read).ok());
  EXPECT_EQ(read, small);
  EXPECT_EQ((*shard)->Read(3, 3, &read).code(), absl::StatusCode::kOutOfRange);

  std::vector<uint32_t> big = {50256, 70000, 3};
  ASSERT_TRUE(WriteTokenShard(TempPath("big.bin"), big).ok());
  shard = TokenShard::Open(TempPath("big.bin"));
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ((*shard)->version(), kShardVersionU32);
  std::vector<uint32_t> read_big;
  ASSERT_TRUE((*shard)->Read(1, 2, &read_big).ok());
  EXPECT_EQ(read_big, (std::vector<uint32_t>{70000, 3}));

  // A large vocabulary's shards are uint32 even when their tokens would fit in uint16.
  ASSERT_TRUE(WriteTokenShard(TempPath("wide.bin"), small, /*wide=*/true).ok());
  shard = TokenShard::Open(TempPath("wide.bin"));
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ((*shard)->version(), kShardVersionU32);
  ASSERT_TRUE((*shard)->Read(0, 5, &read).ok());
  EXPECT_EQ(read, small);
}

TEST(TokenShardTest, ErrorsAboutFilesThatAreNotShardsRevealNeitherTheirBytesNorTheirSize) {
  // Regression: "bad magic 1953460082" gave away the first 4 bytes of any readable file
  // through the job's failure reason, "only N bytes" its size.
  const std::string secret = TempPath("secret.txt");
  std::ofstream(secret) << "root:x:0:0:root:/root:/bin/bash\n" << std::string(2000, 's');
  auto shard = TokenShard::Open(secret);
  ASSERT_EQ(shard.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(shard.status().message().find("1953460082"), std::string::npos) << shard.status();
  EXPECT_EQ(shard.status().message().find("2032"), std::string::npos) << shard.status();
  EXPECT_NE(shard.status().message().find("not a token shard"), std::string::npos);
  const std::string tiny = TempPath("tiny.txt");
  std::ofstream(tiny) << "hunter2";
  auto small = TokenShard::Open(tiny);
  EXPECT_EQ(small.status().message().find(" 7 "), std::string::npos) << small.status();
}

TEST(TokenShardTest, ErrorsDoNotRevealWhetherAFileExists) {
  // Regression: "No such file or directory" against "is corrupt" told a user which paths
  // exist. Missing files, directories and files that are not shards now read alike.
  const std::string missing = TempPath("nothing_here.bin"), text = TempPath("exists.txt"),
                    dir = TempPath("a_directory");
  std::ofstream(text) << std::string(3000, 'z');
  ASSERT_EQ(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST, true);
  auto message_without_path = [](const std::string& path) {
    absl::Status s = TokenShard::Open(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    std::string m(s.message());
    return m.replace(m.find(path), path.size(), "PATH");
  };
  const std::string expected = message_without_path(missing);
  EXPECT_EQ(message_without_path(text), expected);
  EXPECT_EQ(message_without_path(dir), expected);
  EXPECT_NE(expected.find("missing, unreadable or not a token shard"), std::string::npos);
}

TEST(TokenShardTest, AShardTruncatedWhileInUseGivesAnErrorNotSigbus) {
  // Regression: the memory-mapped reader died of SIGBUS when a shard shrank under a trainer.
  std::vector<uint32_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = i % 250;
  ASSERT_TRUE(WriteTokenShard(TempPath("shrinks.bin"), tokens).ok());
  auto loader = DataLoader::Open({TempPath("shrinks.bin")}, 4, 64, 0, 1);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<int32_t> x, y;
  ASSERT_TRUE((*loader)->Next(&x, &y).ok());
  ASSERT_EQ(truncate(TempPath("shrinks.bin").c_str(), 1024 + 2 * 100), 0);
  absl::Status next = (*loader)->Next(&x, &y);
  EXPECT_EQ(next.code(), absl::StatusCode::kDataLoss) << next;
  EXPECT_NE(next.message().find("changed while in use"), std::string::npos) << next;
}

TEST(TokenShardTest, DetectsMissingTruncatedAndCorruptShards) {
  EXPECT_EQ(TokenShard::Open(TempPath("missing.bin")).status().code(), absl::StatusCode::kNotFound);
  std::vector<uint32_t> tokens(100, 7);
  ASSERT_TRUE(WriteTokenShard(TempPath("t.bin"), tokens).ok());
  // Truncate: drop the last token.
  ASSERT_EQ(truncate(TempPath("t.bin").c_str(), 1024 + 99 * 2), 0);
  auto shard = TokenShard::Open(TempPath("t.bin"));
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(shard.status().message().find("truncated"), std::string::npos);
  {
    std::ofstream out(TempPath("garbage.bin"), std::ios::binary);
    out << std::string(2000, 'x');
  }
  shard = TokenShard::Open(TempPath("garbage.bin"));
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(shard.status().message().find("not a token shard"), std::string::npos);
}

TEST(DataLoaderTest, ShardsByRankAndResumes) {
  std::vector<uint32_t> a(50), b(30);
  for (int i = 0; i < 50; ++i) a[i] = i;
  for (int i = 0; i < 30; ++i) b[i] = 100 + i;
  ASSERT_TRUE(WriteTokenShard(TempPath("a.bin"), a).ok());
  ASSERT_TRUE(WriteTokenShard(TempPath("b.bin"), b).ok());
  const std::vector<std::string> paths = {TempPath("a.bin"), TempPath("b.bin")};
  // B=2, T=3: window 6 tokens; world 2 -> a step covers 12 (+1) tokens.
  auto rank0 = DataLoader::Open(paths, 2, 3, 0, 2);
  auto rank1 = DataLoader::Open(paths, 2, 3, 1, 2);
  ASSERT_TRUE(rank0.ok() && rank1.ok());
  std::vector<int32_t> x0, y0, x1, y1;
  ASSERT_TRUE((*rank0)->Next(&x0, &y0).ok());
  ASSERT_TRUE((*rank1)->Next(&x1, &y1).ok());
  EXPECT_EQ(x0, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(y0, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(x1, (std::vector<int32_t>{6, 7, 8, 9, 10, 11}));
  // Steps at offsets 0, 12, 24, 36 fit shard a (36 + 13 <= 50); then shard b at 0; then wrap.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*rank0)->Next(&x0, &y0).ok());
  EXPECT_EQ(x0[0], 36);
  ASSERT_TRUE((*rank0)->Next(&x0, &y0).ok());
  EXPECT_EQ(x0[0], 100);
  const DataPosition saved = (*rank0)->position();
  ASSERT_TRUE((*rank0)->Next(&x0, &y0).ok());
  EXPECT_EQ(x0[0], 112);
  ASSERT_TRUE((*rank0)->Next(&x0, &y0).ok());
  EXPECT_EQ(x0[0], 0);
  EXPECT_EQ((*rank0)->position().epoch, 1);
  // Resume from the saved position: same tokens.
  auto resumed = DataLoader::Open(paths, 2, 3, 0, 2);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE((*resumed)->SetPosition(saved).ok());
  ASSERT_TRUE((*resumed)->Next(&x1, &y1).ok());
  EXPECT_EQ(x1[0], 112);
  // Without wrapping, the end of the data is OutOfRange.
  auto once = DataLoader::Open(paths, 2, 3, 0, 1);
  int batches = 0;
  absl::Status s;
  while ((s = (*once)->Next(&x0, &y0, /*wrap=*/false)).ok()) ++batches;
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(batches, 8 + 4);  // a: offsets 0, 6, ..., 42 (42 + 7 <= 50); b: 0, 6, 12, 18
}

TEST(DataLoaderTest, RejectsShardsTooSmallForABatch) {
  std::vector<uint32_t> tiny(5, 1);
  ASSERT_TRUE(WriteTokenShard(TempPath("tiny.bin"), tiny).ok());
  auto loader = DataLoader::Open({TempPath("tiny.bin")}, 2, 8, 0, 1);
  EXPECT_EQ(loader.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mesa::model
