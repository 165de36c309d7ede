// Issue 19 end to end: a JSONL corpus tokenised by mesa-data with a Llama-3-style tokenizer.json
// trains through a real coordinator (started with --data_roots and --checkpoint_root), a real
// worker and the real mesa-train; its checkpoint records the tokenizer; jobs whose tokenizer or
// vocabulary do not match their shards or their init_from checkpoint are refused at submit naming
// the field; the checkpoint exports with mesa-export, imports back with mesa-import, and
// fine-tunes from there through checkpoint.init_from.
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/cluster.h"
#include "tests/process_harness.h"

namespace mesa::e2e {
namespace {

namespace fs = std::filesystem;
using mesa::v1::Job;
using mesa::v1::JobSpec;
using nlohmann::json;

constexpr absl::Duration kJobTimeout = absl::Seconds(150);
constexpr absl::Duration kToolTimeout = absl::Seconds(60);

std::string Tool(const char* name) {
  return testing::RunfilePath(absl::StrCat("model/main/", name));
}

// Runs a tool; its exit status and output in a failure message.
testing::RunResult RunTool(const char* tool, const std::vector<std::string>& args) {
  absl::StatusOr<testing::RunResult> run = testing::RunProcess(Tool(tool), args, kToolTimeout);
  EXPECT_TRUE(run.ok()) << run.status();
  return run.ok() ? *run : testing::RunResult{.exit_status = -1};
}

// A tiny MesaNet FLA can express (no γ cap, no soft-cap) on the Llama-3-style shards.
JobSpec LlamaTrain(const std::string& data, int64_t steps) {
  JobSpec spec = TinyTrain("llama", steps, 0);
  spec.mutable_model()->set_vocab_size(384);
  spec.mutable_model()->set_gamma_cap(0);
  spec.mutable_model()->set_logit_softcap(0);
  spec.mutable_data()->set_train_path(data + "/llama/train_*.bin");
  spec.mutable_data()->set_val_path(data + "/llama/val_*.bin");
  spec.mutable_data()->set_tokenizer("hf");
  spec.mutable_data()->set_tokenizer_file(data + "/tokenizer.json");
  return spec;
}

std::pair<absl::StatusCode, std::string> SubmitError(Cluster& cluster, const JobSpec& spec) {
  auto job = cluster.Submit(spec);
  if (job.ok()) return {absl::StatusCode::kOk, job->id()};
  return {job.status().code(), std::string(job.status().message())};
}

TEST(TokenizerExportTest, LlamaStyleCorpusTrainsExportsAndFineTunes) {
  // The data root: a JSONL corpus, the tokenizer, another tokenizer, and a byte-level shard set.
  const std::string data = testing::NewTempDir("data-");
  const std::string checkpoints = testing::NewTempDir("ckroot-");
  {
    std::ofstream corpus(data + "/corpus.jsonl");
    for (const std::string& doc : SyntheticDocuments(300, 5)) {
      corpus << json{{"id", 1}, {"text", doc}}.dump() << "\n";
    }
  }
  fs::copy_file(testing::RunfilePath("model/testdata/llama3_style_tokenizer.json"),
                data + "/tokenizer.json");
  fs::copy_file(testing::RunfilePath("model/testdata/tokenizer.json"), data + "/other.json");
  fs::create_directories(data + "/bytes");
  ASSERT_TRUE(WriteByteShard(data + "/bytes/train_000.bin", SyntheticDocuments(50, 6)).ok());
  testing::RunResult prepared =
      RunTool("mesa-data", {"--input=" + data + "/corpus.jsonl", "--output_dir=" + data + "/llama",
                            "--tokenizer=hf", "--tokenizer_file=" + data + "/tokenizer.json",
                            "--val_fraction=0.1", "--progress=false"});
  ASSERT_EQ(prepared.exit_status, 0) << prepared.err;
  const json summary = json::parse(prepared.out);
  EXPECT_EQ(summary["bos_id"], 374);  // <|begin_of_text|>

  ClusterOptions options;
  options.coordinator_args = {"--data_roots=" + data, "--checkpoint_root=" + checkpoints};
  auto cluster = Cluster::Start(1, options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Cluster& c = **cluster;

  // Trains through the service.
  auto submitted = c.Submit(LlamaTrain(data, 12));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto job = c.WaitForEnd(submitted->id(), kJobTimeout);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  const std::string trained = job->result().checkpoint_path();
  const json state = json::parse(*base::ReadFile(trained + "/state.json"));
  EXPECT_EQ(state["tokenizer"]["kind"], "hf");
  EXPECT_EQ(state["tokenizer"]["bos_id"], 374);
  EXPECT_EQ(
      state["tokenizer"]["files"][0]["sha256"],
      json::parse(*base::ReadFile(data + "/llama/mesa_data.json"))["tokenizer_files"][0]["sha256"]);

  // Mismatches are refused at submit, naming the field.
  JobSpec byte_on_llama = LlamaTrain(data, 12);
  byte_on_llama.mutable_data()->set_tokenizer("byte");
  byte_on_llama.mutable_data()->clear_tokenizer_file();
  JobSpec other_file = LlamaTrain(data, 12);
  other_file.mutable_data()->set_tokenizer_file(data + "/other.json");
  JobSpec small_vocab = LlamaTrain(data, 12);
  small_vocab.mutable_model()->set_vocab_size(300);
  JobSpec bytes_from_llama = TinyTrain("bytes", 12, 0);
  bytes_from_llama.mutable_data()->set_train_path(data + "/bytes/train_000.bin");
  bytes_from_llama.mutable_data()->clear_val_path();
  bytes_from_llama.mutable_training()->set_eval_interval(0);
  bytes_from_llama.mutable_model()->set_vocab_size(384);
  bytes_from_llama.mutable_checkpoint()->set_init_from(trained);
  struct Case {
    const char* what;
    JobSpec spec;
    const char* prefix;
  };
  for (const Case& k :
       {Case{"byte on hf shards", byte_on_llama, "data.tokenizer: "},
        Case{"another tokenizer.json", other_file, "data.tokenizer_file: "},
        Case{"vocabulary too small", small_vocab, "model.vocab_size: 300"},
        Case{"init_from of another tokenizer", bytes_from_llama, "checkpoint.init_from: "}}) {
    auto [code, message] = SubmitError(c, k.spec);
    EXPECT_EQ(code, absl::StatusCode::kInvalidArgument) << k.what << ": " << message;
    EXPECT_TRUE(absl::StrContains(message, k.prefix)) << k.what << ": " << message;
  }

  // Export, import, and fine-tune from the import.
  const std::string hf = data + "/hf";
  testing::RunResult exported = RunTool("mesa-export", {"--checkpoint=" + trained, "--out=" + hf});
  ASSERT_EQ(exported.exit_status, 0) << exported.err;
  const json config = json::parse(*base::ReadFile(hf + "/config.json"));
  EXPECT_EQ(config["model_type"], "mesa_net");
  EXPECT_EQ(config["vocab_size"], 384);
  EXPECT_EQ(*base::ReadFile(hf + "/tokenizer.json"), *base::ReadFile(data + "/tokenizer.json"));
  testing::RunResult again = RunTool("mesa-export", {"--checkpoint=" + trained, "--out=" + hf});
  EXPECT_EQ(again.exit_status, 2) << again.err;  // never over an existing directory
  const std::string imported = checkpoints + "/users/imported";
  testing::RunResult back = RunTool("mesa-import", {"--hf_dir=" + hf, "--out=" + imported});
  ASSERT_EQ(back.exit_status, 0) << back.err;
  JobSpec fine_tune = LlamaTrain(data, 6);
  fine_tune.mutable_checkpoint()->set_init_from(imported);
  submitted = c.Submit(fine_tune);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  job = c.WaitForEnd(submitted->id(), kJobTimeout);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  auto logs = c.Logs(submitted->id());
  ASSERT_TRUE(logs.ok()) << logs.status();
  bool initialised = false;
  for (const mesa::v1::LogLine& line : *logs) {
    initialised |= absl::StrContains(line.text(), "initialised weights from " + imported);
  }
  EXPECT_TRUE(initialised) << "the fine-tune did not start from the imported checkpoint";
}

}  // namespace
}  // namespace mesa::e2e
