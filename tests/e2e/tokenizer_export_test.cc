// End to end: a JSONL corpus tokenised by mesa-data with a Llama-3-style tokenizer.json
// trains through a real coordinator (started with --data_roots and --checkpoint_root), a real
// worker and the real mesa-train; its checkpoint records the tokenizer; jobs whose tokenizer or
// vocabulary do not match their shards or their init_from checkpoint are refused at submit naming
// the field; the checkpoint exports with mesa-export, imports back with mesa-import, and
// fine-tunes from there through checkpoint.init_from; the same for an untied model, whose
// fine-tune starts from the imported weights.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "formats/safetensors.h"
#include "google/protobuf/util/json_util.h"
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

// A tiny MesaNet FLA can express (no γ cap, no soft-cap, no resets at BOS) on the Llama-3-style
// shards.
JobSpec LlamaTrain(const std::string& data, int64_t steps) {
  JobSpec spec = TinyTrain("llama", steps, 0);
  spec.mutable_model()->set_vocab_size(384);
  spec.mutable_model()->set_gamma_cap(0);
  spec.mutable_model()->set_logit_softcap(0);
  spec.mutable_data()->set_train_path(data + "/llama/train_*.bin");
  spec.mutable_data()->set_val_path(data + "/llama/val_*.bin");
  spec.mutable_data()->set_tokenizer("hf");
  spec.mutable_data()->set_tokenizer_file(data + "/tokenizer.json");
  spec.mutable_data()->set_reset_at_bos(false);  // FLA's model carries state across documents
  return spec;
}

std::pair<absl::StatusCode, std::string> SubmitError(Cluster& cluster, const JobSpec& spec) {
  auto job = cluster.Submit(spec);
  if (job.ok()) return {absl::StatusCode::kOk, job->id()};
  return {job.status().code(), std::string(job.status().message())};
}

// Submits `spec` and waits for the job to end.
absl::StatusOr<Job> SubmitAndWait(Cluster& cluster, const JobSpec& spec) {
  auto submitted = cluster.Submit(spec);
  if (!submitted.ok()) return submitted.status();
  return cluster.WaitForEnd(submitted->id(), kJobTimeout);
}

// The loss of a job's first step, from its log line "step 1/N loss X ..."; NaN if there is none.
double FirstStepLoss(Cluster& cluster, const std::string& job_id) {
  auto logs = cluster.Logs(job_id);
  EXPECT_TRUE(logs.ok()) << logs.status();
  if (!logs.ok()) return NAN;
  for (const mesa::v1::LogLine& line : *logs) {
    const size_t at = line.text().find("step 1/");
    double loss = NAN;
    if (at != std::string::npos &&
        std::sscanf(line.text().c_str() + at, "step 1/%*d loss %lf", &loss) == 1) {
      return loss;
    }
  }
  ADD_FAILURE() << "no first step in the log of " << job_id;
  return NAN;
}

bool SameBytes(const safetensors::TensorView& a, const safetensors::TensorView& b) {
  return a.dtype == b.dtype && a.shape == b.shape && std::ranges::equal(a.data, b.data);
}

// Tensor `name` of `a` and of `b`: the same dtype, shape and bytes.
void ExpectSameTensor(const safetensors::SafetensorsFile& a, const safetensors::SafetensorsFile& b,
                      const std::string& name) {
  auto x = a.Get(name);
  auto y = b.Get(name);
  ASSERT_TRUE(x.ok() && y.ok()) << name << ": " << x.status() << " / " << y.status();
  EXPECT_TRUE(SameBytes(*x, *y)) << name << " differs";
}

// A data root holding a JSONL corpus, the Llama-3-style tokenizer.json and the corpus tokenised
// with it by mesa-data (DATA/llama/{train,val}_*.bin); empty on failure (reported).
std::string LlamaDataRoot() {
  const std::string data = testing::NewTempDir("data-");
  {
    std::ofstream corpus(data + "/corpus.jsonl");
    for (const std::string& doc : SyntheticDocuments(300, 5)) {
      corpus << json{{"id", 1}, {"text", doc}}.dump() << "\n";
    }
  }
  fs::copy_file(testing::RunfilePath("model/testdata/llama3_style_tokenizer.json"),
                data + "/tokenizer.json");
  testing::RunResult prepared =
      RunTool("mesa-data", {"--input=" + data + "/corpus.jsonl", "--output_dir=" + data + "/llama",
                            "--tokenizer=hf", "--tokenizer_file=" + data + "/tokenizer.json",
                            "--val_fraction=0.1", "--progress=false"});
  EXPECT_EQ(prepared.exit_status, 0) << prepared.err;
  if (prepared.exit_status != 0) return "";
  EXPECT_EQ(json::parse(prepared.out)["bos_id"], 374);  // <|begin_of_text|>
  return data;
}

TEST(TokenizerExportTest, LlamaStyleCorpusTrainsExportsAndFineTunes) {
  // The data root, plus another tokenizer and a byte-level shard set.
  const std::string data = LlamaDataRoot();
  ASSERT_FALSE(data.empty());
  const std::string checkpoints = testing::NewTempDir("ckroot-");
  fs::copy_file(testing::RunfilePath("model/testdata/tokenizer.json"), data + "/other.json");
  fs::create_directories(data + "/bytes");
  ASSERT_TRUE(WriteByteShard(data + "/bytes/train_000.bin", SyntheticDocuments(50, 6)).ok());

  ClusterOptions options;
  options.coordinator_args = {"--data_roots=" + data, "--checkpoint_root=" + checkpoints};
  auto cluster = Cluster::Start(1, options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Cluster& c = **cluster;

  // Trains through the service.
  auto job = SubmitAndWait(c, LlamaTrain(data, 12));
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
  job = SubmitAndWait(c, fine_tune);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  auto logs = c.Logs(job->id());
  ASSERT_TRUE(logs.ok()) << logs.status();
  bool initialised = false;
  for (const mesa::v1::LogLine& line : *logs) {
    initialised |= absl::StrContains(line.text(), "initialised weights from " + imported);
  }
  EXPECT_TRUE(initialised) << "the fine-tune did not start from the imported checkpoint";
}

// The untied model (model.tie_embeddings: false, FLA's own convention: an lm_head.weight of its
// own, an unscaled lookup) through the service: it trains on the Llama-3-style shards, exports with
// an independent head, imports back bit for bit, and fine-tunes from the import through
// checkpoint.init_from, starting from the imported weights; a tied job cannot take the import.
TEST(TokenizerExportTest, UntiedModelTrainsExportsImportsAndFineTunes) {
  const std::string data = LlamaDataRoot();
  ASSERT_FALSE(data.empty());
  const std::string checkpoints = testing::NewTempDir("ckroot-");
  ClusterOptions options;
  options.coordinator_args = {"--data_roots=" + data, "--checkpoint_root=" + checkpoints};
  auto cluster = Cluster::Start(1, options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Cluster& c = **cluster;

  auto untied = [&](int64_t steps) {
    JobSpec spec = LlamaTrain(data, steps);
    spec.mutable_model()->set_tie_embeddings(false);
    return spec;
  };
  auto job = SubmitAndWait(c, untied(12));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  // The same spec and seed, so what a fine-tune that ignored init_from would start with.
  const double fresh_first_loss = FirstStepLoss(c, job->id());
  const std::string trained = job->result().checkpoint_path();
  auto trained_weights = safetensors::SafetensorsFile::ReadFile(trained + "/model.safetensors");
  ASSERT_TRUE(trained_weights.ok()) << trained_weights.status();

  // The export: FLA's untied layout, both tensors as trained (the lookup unscaled), the head
  // independent of the embedding.
  const std::string hf = data + "/hf";
  testing::RunResult exported = RunTool("mesa-export", {"--checkpoint=" + trained, "--out=" + hf});
  ASSERT_EQ(exported.exit_status, 0) << exported.err;
  EXPECT_EQ(json::parse(*base::ReadFile(hf + "/config.json"))["tie_word_embeddings"], false);
  auto hf_weights = safetensors::SafetensorsFile::ReadFile(hf + "/model.safetensors");
  ASSERT_TRUE(hf_weights.ok()) << hf_weights.status();
  ExpectSameTensor(*trained_weights, *hf_weights, "model.embeddings.weight");
  ExpectSameTensor(*trained_weights, *hf_weights, "lm_head.weight");
  auto head = hf_weights->Get("lm_head.weight");
  auto embedding = hf_weights->Get("model.embeddings.weight");
  ASSERT_TRUE(head.ok() && embedding.ok());
  EXPECT_FALSE(SameBytes(*head, *embedding)) << "the exported head is the embedding";

  // The import: every tensor bit for bit what the service trained, and an untied model.
  const std::string imported = checkpoints + "/users/untied";
  testing::RunResult back = RunTool("mesa-import", {"--hf_dir=" + hf, "--out=" + imported});
  ASSERT_EQ(back.exit_status, 0) << back.err;
  const json import_summary = json::parse(back.out);
  EXPECT_EQ(import_summary["model"]["tie_embeddings"], false) << back.out;
  auto imported_weights = safetensors::SafetensorsFile::ReadFile(
      import_summary["checkpoint"].get<std::string>() + "/model.safetensors");
  ASSERT_TRUE(imported_weights.ok()) << imported_weights.status();
  EXPECT_EQ(imported_weights->tensors().size(), trained_weights->tensors().size());
  for (const safetensors::TensorView& tensor : trained_weights->tensors()) {
    ExpectSameTensor(*trained_weights, *imported_weights, tensor.name);
  }

  // mesa-train --eval of the import on the first training batch (the loader reads the shards in
  // order from the start, for training and evaluation alike).
  JobSpec eval = untied(0);
  eval.set_type(mesa::v1::JOB_TYPE_EVAL);
  eval.clear_optimizer();
  eval.clear_checkpoint();
  eval.mutable_data()->set_val_path(eval.data().train_path());
  eval.mutable_eval()->set_checkpoint(imported);
  eval.mutable_eval()->set_max_batches(1);
  std::string eval_json;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(eval, &eval_json, print).ok());
  ASSERT_TRUE(base::WriteFileAtomically(data + "/eval.yaml", eval_json).ok());
  testing::RunResult evaluated =
      RunTool("mesa-train", {"--config=" + data + "/eval.yaml", "--eval", "--threads=1",
                             "--workdir=" + testing::NewTempDir("eval-")});
  ASSERT_EQ(evaluated.exit_status, 0) << evaluated.err;
  const double imported_loss = json::parse(evaluated.out)["eval"]["val_loss"].get<double>();

  // The fine-tune through the service: its first step's loss is the import's on that batch (the
  // log prints 4 decimals), not a fresh model's.
  JobSpec fine_tune = untied(6);
  fine_tune.mutable_checkpoint()->set_init_from(imported);
  job = SubmitAndWait(c, fine_tune);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  EXPECT_NEAR(FirstStepLoss(c, job->id()), imported_loss, 1e-4);
  EXPECT_GT(std::abs(fresh_first_loss - imported_loss), 0.05)
      << "the imported model is no better than a fresh one on the first batch";

  // A tied job of the same sizes cannot take the untied import: a different model.
  JobSpec tied = LlamaTrain(data, 6);
  tied.mutable_checkpoint()->set_init_from(imported);
  job = SubmitAndWait(c, tied);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), mesa::v1::JOB_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(job->failure_reason(), "tie_embeddings")) << job->failure_reason();
}

}  // namespace
}  // namespace mesa::e2e
