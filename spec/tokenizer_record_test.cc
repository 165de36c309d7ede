#include "spec/tokenizer_record.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mesa::spec {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

class TokenizerRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    Write(dir_ + "/tok.json", "{\"a tokenizer\": 1}");
    Write(dir_ + "/other.json", "{\"another\": 2}");
    sha_ = *FileSha256(dir_ + "/tok.json");
    // A shard set written with tok.json.
    Write(dir_ + "/data/train_000000.bin", "x");
    Write(dir_ + "/data/mesa_data.json",
          json{{"tokenizer", "hf"},
               {"vocab_size", 70001},
               {"bos_id", 264},
               {"tokenizer_files", json::array({{{"path", "tok.json"}, {"sha256", sha_}}})}}
              .dump());
  }
  mesa::v1::JobSpec HfSpec(const std::string& file) const {
    mesa::v1::JobSpec spec;
    spec.mutable_data()->set_train_path(dir_ + "/data/train_*.bin");
    spec.mutable_data()->set_tokenizer("hf");
    spec.mutable_data()->set_tokenizer_file(file);
    spec.mutable_model()->set_vocab_size(70144);
    return spec;
  }
  // A checkpoint root whose latest step records `record`, with an embedding of `vocab` rows.
  std::string Checkpoint(const std::string& name, const TokenizerRecord& record, int vocab) {
    const std::string root = dir_ + "/" + name;
    Write(root + "/latest", "step_00000010\n");
    Write(root + "/step_00000010/state.json",
          json{{"model", {{"vocab_size", vocab}}},
               {"tokenizer", json::parse(TokenizerRecordJson(record))}}
              .dump());
    return root;
  }
  std::string dir_, sha_;
};

TEST_F(TokenizerRecordTest, RoundTripsAndReadsMesaDataJson) {
  const TokenizerRecord r{"hf", 128256, 128000, {{"/d/tokenizer.json", "ab12"}}};
  auto back = TokenizerRecordFromJson(TokenizerRecordJson(r), "x");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, "hf");
  EXPECT_EQ(back->vocab_size, 128256);
  EXPECT_EQ(back->bos_id, 128000);
  ASSERT_EQ(back->files.size(), 1u);
  EXPECT_EQ(back->files[0].path, "/d/tokenizer.json");
  auto data = ReadShardSetTokenizer(dir_ + "/data");
  ASSERT_TRUE(data.ok() && data->has_value());
  EXPECT_EQ((*data)->bos_id, 264);
  EXPECT_EQ((*data)->files[0].sha256, sha_);
  EXPECT_FALSE(TokenizerRecordFromJson("{\"kind\": 3}", "bad.json").ok());
  EXPECT_TRUE(
      absl::StrContains(TokenizerRecordFromJson("[]", "bad.json").status().message(), "bad.json"));
}

TEST_F(TokenizerRecordTest, MatchingJobTakesVocabularyAndBosFromTheData) {
  auto job = CheckJobTokenizer(HfSpec(dir_ + "/tok.json"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->vocab_size, 70001);
  EXPECT_EQ(job->bos_id, 264);
  EXPECT_EQ(job->files[0].sha256, sha_);
}

TEST_F(TokenizerRecordTest, OtherTokenizerFileIsRefusedNamingTheField) {
  auto job = CheckJobTokenizer(HfSpec(dir_ + "/other.json"));
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(job.status().message(), "data.tokenizer_file: ")) << job.status();
  EXPECT_TRUE(absl::StrContains(job.status().message(), "mesa_data.json")) << job.status();
}

TEST_F(TokenizerRecordTest, OtherKindAndSmallVocabularyAreRefused) {
  mesa::v1::JobSpec byte = HfSpec("");
  byte.mutable_data()->set_tokenizer("byte");
  auto job = CheckJobTokenizer(byte);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::StartsWith(job.status().message(),
                               "data.tokenizer: the job's tokenizer is "
                               "byte"))
      << job.status();
  mesa::v1::JobSpec small = HfSpec(dir_ + "/tok.json");
  small.mutable_model()->set_vocab_size(70000);
  job = CheckJobTokenizer(small);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::StartsWith(job.status().message(), "model.vocab_size: 70000 is smaller"))
      << job.status();
}

TEST_F(TokenizerRecordTest, CheckpointOfAnotherTokenizerOrVocabularyIsRefused) {
  mesa::v1::JobSpec spec = HfSpec(dir_ + "/tok.json");
  const TokenizerRecord same{"hf", 70001, 264, {{"tok.json", sha_}}};
  spec.mutable_checkpoint()->set_init_from(Checkpoint("same", same, 70144));
  EXPECT_TRUE(CheckJobTokenizer(spec).ok());

  spec.mutable_checkpoint()->set_init_from(Checkpoint("bytes", *BuiltinTokenizer("byte"), 70144));
  auto job = CheckJobTokenizer(spec);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::StartsWith(job.status().message(), "checkpoint.init_from: the job's tokenizer"))
      << job.status();
  EXPECT_TRUE(absl::StrContains(job.status().message(), "was trained with byte")) << job.status();

  spec.mutable_checkpoint()->set_init_from(Checkpoint("wider", same, 80000));
  job = CheckJobTokenizer(spec);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::StrContains(job.status().message(), "embedding of 80000 rows")) << job.status();

  // Evaluation: the same check on eval.checkpoint.
  mesa::v1::JobSpec eval = HfSpec(dir_ + "/tok.json");
  eval.mutable_eval()->set_checkpoint(dir_ + "/bytes");
  job = CheckJobTokenizer(eval);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::StartsWith(job.status().message(), "eval.checkpoint: ")) << job.status();
}

TEST_F(TokenizerRecordTest, MissingFilesAreLeftToTheTrainer) {
  mesa::v1::JobSpec spec;
  spec.mutable_data()->set_train_path("/nonexistent/train_*.bin");
  spec.mutable_model()->set_vocab_size(257);
  spec.mutable_checkpoint()->set_init_from("/nonexistent/ckpt");
  auto job = CheckJobTokenizer(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->kind, "byte");
  EXPECT_EQ(job->bos_id, 256);
}

}  // namespace
}  // namespace mesa::spec
