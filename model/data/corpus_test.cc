// mesa-data's inputs end to end through PrepareShards, on real files written here: JSONL against
// plain text, .gz/.zst (written with zlib and libzstd) against their plain counterparts, errors
// that name the file and line, token shards passed through, and shuffling.
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/data/byte_stream.h"
#include "model/data/corpus_reader.h"
#include "model/data/prepare.h"
#include "model/data/token_shard.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "model/tokenizer/gpt2_tokenizer.h"
#include "nlohmann/json.hpp"

namespace mesa::model {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class CorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/corpus_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    EXPECT_TRUE(base::WriteFileAtomically(path, bytes).ok()) << path;
    return path;
  }

  absl::StatusOr<PrepareSummary> Prepare(const std::vector<std::string>& inputs,
                                         const std::string& out, const std::string& split = "file",
                                         std::optional<uint64_t> shuffle_seed = std::nullopt) {
    PrepareOptions options;
    options.inputs = inputs;
    options.output_dir = dir_ + "/" + out;
    options.corpus.split = split;
    options.val_fraction = 0;
    options.shard_tokens = shard_tokens_;
    options.shuffle_seed = shuffle_seed;
    return PrepareShards(options, tokenizer_);
  }

  // Every file of an output directory, by name.
  std::map<std::string, std::string> Files(const std::string& out) {
    std::map<std::string, std::string> files;
    if (!fs::exists(dir_ + "/" + out)) return files;
    for (const auto& entry : fs::directory_iterator(dir_ + "/" + out)) {
      files[entry.path().filename().string()] = *base::ReadFile(entry.path().string());
    }
    return files;
  }

  // The documents of an output directory's train shards, decoded.
  std::vector<std::string> Documents(const std::string& out) {
    std::vector<int32_t> all;
    for (const auto& [name, bytes] : Files(out)) {
      auto shard = TokenShard::Open(dir_ + "/" + out + "/" + name);
      EXPECT_TRUE(shard.ok()) << shard.status();
      std::vector<uint32_t> tokens;
      EXPECT_TRUE((*shard)->Read(0, (*shard)->size(), &tokens).ok());
      all.insert(all.end(), tokens.begin(), tokens.end());
    }
    std::vector<std::string> docs;
    for (int32_t t : all) {
      if (t == ByteTokenizer::kBos) {
        docs.emplace_back();
      } else {
        docs.back().push_back(static_cast<char>(t));
      }
    }
    return docs;
  }

  std::string dir_;
  int64_t shard_tokens_ = 1024;
  ByteTokenizer tokenizer_;
};

std::string Gzip(const std::string& data) {
  z_stream z = {};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = data.size();
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = out.size();
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string Zstd(const std::string& data) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

// About `bytes` of lines, paragraphs separated by blank lines, with non-ASCII text and JSON's
// special characters, so that pieces straddle the readers' 1 MiB chunks.
std::vector<std::string> Lines(size_t bytes) {
  std::vector<std::string> lines;
  size_t total = 0;
  for (int i = 0; total < bytes; ++i) {
    std::string line = absl::StrCat("line ", i, " \"quoted\" back\\slash \ttab caf\xc3\xa9 ");
    line.append(i * 7919 % 200, 'a' + i % 26);
    total += line.size() + 1;
    lines.push_back(std::move(line));
  }
  return lines;
}

std::string TextOf(const std::vector<std::string>& lines) {
  std::string text;
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::StrAppend(&text, lines[i], i % 5 == 4 ? "\n\n" : "\n");
  }
  return text;
}

std::string JsonlOf(const std::vector<std::string>& lines, const std::string& field = "text") {
  std::string jsonl;
  for (const std::string& line : lines) {
    absl::StrAppend(&jsonl, nlohmann::json({{"id", 1}, {field, line}}).dump(), "\n");
  }
  return jsonl;
}

TEST_F(CorpusTest, JsonlGivesTheSameShardsAsPlainText) {
  const std::vector<std::string> lines = Lines(50000);
  ASSERT_TRUE(Prepare({Write("a.txt", TextOf(lines))}, "plain", "line").ok());
  absl::StatusOr<PrepareSummary> jsonl = Prepare({Write("a.jsonl", JsonlOf(lines))}, "jsonl");
  ASSERT_TRUE(jsonl.ok()) << jsonl.status();
  EXPECT_EQ(jsonl->documents, static_cast<int64_t>(lines.size()));
  EXPECT_GT(jsonl->train_shards, 1);
  EXPECT_EQ(Files("jsonl"), Files("plain"));
  EXPECT_EQ(Documents("jsonl"), lines);
}

TEST_F(CorpusTest, JsonlTextFieldIsConfigurable) {
  const std::vector<std::string> lines = Lines(3000);
  PrepareOptions options;
  options.inputs = {Write("a.ndjson", JsonlOf(lines, "content"))};
  options.output_dir = dir_ + "/out";
  options.corpus.text_field = "content";
  options.val_fraction = 0;
  options.shard_tokens = 1 << 20;
  ASSERT_TRUE(PrepareShards(options, tokenizer_).ok());
  EXPECT_EQ(Documents("out"), lines);
}

TEST_F(CorpusTest, MalformedJsonNamesTheLineAndWritesNothing) {
  // Line 1 alone fills more than one shard, so shards exist (staged) when line 3 fails.
  const std::string big = nlohmann::json({{"text", std::string(5000, 'x')}}).dump();
  const std::string path =
      Write("bad.jsonl", absl::StrCat(big, "\n{\"text\": \"ok\"}\n{\"text\": \"no end}\n"));
  absl::StatusOr<PrepareSummary> result = Prepare({path}, "out");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr(path + ", line 3: malformed JSON"));
  EXPECT_TRUE(Files("out").empty()) << "nothing half-written, no staging directory left";
}

TEST_F(CorpusTest, MissingOrNonStringFieldAndBadUtf8NameTheLine) {
  struct Case {
    std::string content, expected;
  };
  for (const Case& c : std::vector<Case>{
           {"{\"text\": \"a\"}\n\n{\"body\": \"b\"}\n", "line 3: no field \"text\""},
           {"{\"text\": \"a\"}\n{\"text\": 42}\n", "line 2: field \"text\" is of JSON type number"},
           {"[\"text\"]\n", "line 1: expected a JSON object, got array"},
           {"{\"text\": \"a\"}\n{\"text\": \"caf\xe9\"}\n", "line 2: invalid UTF-8 at byte 14"},
       }) {
    absl::StatusOr<PrepareSummary> result = Prepare({Write("x.jsonl", c.content)}, "out");
    ASSERT_FALSE(result.ok()) << c.content;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(result.status().message(), HasSubstr(dir_ + "/x.jsonl, " + c.expected));
    EXPECT_TRUE(Files("out").empty());
  }
}

TEST_F(CorpusTest, GzipAndZstdGiveTheSameShardsAsPlainInput) {
  // Over 2 MiB, so that decompressed reads and lines straddle chunk boundaries.
  const std::vector<std::string> lines = Lines(2500000);
  const std::string text = TextOf(lines), jsonl = JsonlOf(lines);
  // Several gzip members and zstd frames in one file, as `cat a.gz b.gz` makes.
  const size_t half = text.size() / 2;
  shard_tokens_ = 1 << 16;  // fewer shards: each is fsynced
  const std::string gz_text = Gzip(text.substr(0, half)) + Gzip(text.substr(half));
  const std::string zst_text = Zstd(text.substr(0, half)) + Zstd(text.substr(half));
  for (const std::string split : {"file", "line", "blankline"}) {
    SCOPED_TRACE(split);
    ASSERT_TRUE(Prepare({Write("a.txt", text)}, "plain_" + split, split).ok());
    ASSERT_TRUE(Prepare({Write("a.txt.gz", gz_text)}, "gz_" + split, split).ok());
    ASSERT_TRUE(Prepare({Write("a.txt.zst", zst_text)}, "zst_" + split, split).ok());
    EXPECT_GT(Files("plain_" + split).size(), 30u);
    EXPECT_EQ(Files("gz_" + split), Files("plain_" + split));
    EXPECT_EQ(Files("zst_" + split), Files("plain_" + split));
  }
  ASSERT_TRUE(Prepare({Write("a.jsonl", jsonl)}, "plain_jsonl").ok());
  ASSERT_TRUE(Prepare({Write("a.jsonl.gz", Gzip(jsonl))}, "gz_jsonl").ok());
  ASSERT_TRUE(Prepare({Write("a.jsonl.zst", Zstd(jsonl))}, "zst_jsonl").ok());
  EXPECT_EQ(Files("gz_jsonl"), Files("plain_jsonl"));
  EXPECT_EQ(Files("zst_jsonl"), Files("plain_jsonl"));
  EXPECT_EQ(Files("plain_jsonl"), Files("plain_line"));
}

TEST_F(CorpusTest, TextSplitsMatchAbslStrSplit) {
  const std::string text = TextOf(Lines(2500000)) + "  \n\n\n\nlast";
  const std::string path = Write("a.txt.gz", Gzip(text));
  for (const auto& [split, delimiter] :
       std::vector<std::pair<std::string, std::string>>{{"line", "\n"}, {"blankline", "\n\n"}}) {
    CorpusOptions options;
    options.split = split;
    auto reader = OpenDocumentReader(path, options, tokenizer_, "byte");
    ASSERT_TRUE(reader.ok()) << reader.status();
    std::vector<std::string> docs;
    Document doc;
    while (true) {
      absl::StatusOr<bool> more = (*reader)->Next(&doc);
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
      docs.push_back(doc.text);
    }
    const std::vector<std::string> expected =
        absl::StrSplit(text, delimiter, absl::SkipWhitespace());
    EXPECT_EQ(docs, expected) << split;
  }
}

TEST_F(CorpusTest, TruncatedOrCorruptCompressedInputIsAnErrorNamingTheFile) {
  const std::string text = TextOf(Lines(200000));
  const std::string gz = Gzip(text), zst = Zstd(text);
  std::string corrupt_gz = gz;
  for (size_t i = gz.size() / 2; i < gz.size() / 2 + 64; ++i) corrupt_gz[i] ^= 0x5a;
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"cut.txt.gz", gz.substr(0, gz.size() / 2)},
           {"tail.txt.gz", gz.substr(0, gz.size() - 4)},  // the trailer's size is missing
           {"corrupt.txt.gz", corrupt_gz},
           {"cut.txt.zst", zst.substr(0, zst.size() / 2)},
           {"empty.txt.gz", ""},
           {"plain.txt.gz", text},
       }) {
    const std::string path = Write(name, bytes);
    absl::StatusOr<PrepareSummary> result = Prepare({path}, "out", "line");
    ASSERT_FALSE(result.ok()) << name;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr(path + ": "));
    EXPECT_TRUE(Files("out").empty());
  }
  absl::StatusOr<PrepareSummary> cut = Prepare({dir_ + "/cut.txt.gz"}, "out");
  EXPECT_THAT(cut.status().message(), HasSubstr("truncated gzip data"));
}

TEST_F(CorpusTest, ShuffleIsDeterministicAndDiffersFromFileOrder) {
  const std::vector<std::string> lines = Lines(20000);
  const std::string path = Write("a.jsonl", JsonlOf(lines));
  ASSERT_TRUE(Prepare({path}, "in_order").ok());
  ASSERT_TRUE(Prepare({path}, "seed7_a", "file", 7).ok());
  ASSERT_TRUE(Prepare({path}, "seed7_b", "file", 7).ok());
  ASSERT_TRUE(Prepare({path}, "seed8", "file", 8).ok());
  EXPECT_EQ(Documents("in_order"), lines);
  EXPECT_EQ(Files("seed7_a"), Files("seed7_b"));
  std::vector<std::string> shuffled = Documents("seed7_a");
  EXPECT_NE(shuffled, lines);
  EXPECT_NE(Documents("seed8"), shuffled);
  std::sort(shuffled.begin(), shuffled.end());
  std::vector<std::string> sorted = lines;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(shuffled, sorted) << "the same documents, only reordered";
  // The permutation itself is pinned, so it is the same with any standard library.
  EXPECT_EQ(ShufflePermutation(5, 7), ShufflePermutation(5, 7));
  EXPECT_EQ(ShufflePermutation(0, 7).size(), 0u);
}

TEST_F(CorpusTest, ShardsDoNotDependOnTheThreadCount) {
  const std::vector<std::string> lines = Lines(400000);
  std::vector<std::string> inputs = {Write("a.jsonl.gz", Gzip(JsonlOf(lines))),
                                     Write("b.txt", TextOf(lines))};
  // The GPT-2 tokenizer shares a cache between threads (the fixture's small vocabulary).
  auto gpt2 = Gpt2Tokenizer::Load("model/testdata/encoder.json", "model/testdata/vocab.bpe");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  for (const Tokenizer* tokenizer :
       {static_cast<const Tokenizer*>(&tokenizer_), static_cast<const Tokenizer*>(gpt2->get())}) {
    std::vector<std::map<std::string, std::string>> outputs;
    for (int threads : {1, 2, 7}) {
      PrepareOptions options;
      options.inputs = inputs;
      options.output_dir = absl::StrCat(dir_, "/", tokenizer->bos_id(), "_threads_", threads);
      options.corpus.split = "line";
      options.val_fraction = 0.1;
      options.shard_tokens = 1 << 16;
      options.shuffle_seed = 5;
      options.threads = threads;
      int64_t reports = 0;
      options.progress = [&reports](const PrepareSummary&) { ++reports; };
      absl::StatusOr<PrepareSummary> summary = PrepareShards(options, *tokenizer);
      ASSERT_TRUE(summary.ok()) << summary.status();
      EXPECT_EQ(summary->documents, 2 * static_cast<int64_t>(lines.size()));
      EXPECT_GT(summary->val_shards, 0);
      EXPECT_GT(reports, 1) << "a progress report after every batch";
      outputs.push_back(Files(absl::StrCat(tokenizer->bos_id(), "_threads_", threads)));
    }
    EXPECT_EQ(outputs[1], outputs[0]);
    EXPECT_EQ(outputs[2], outputs[0]);
  }
}

// Byte tokens with a BOS past uint16: a vocabulary of 100,000 ids.
class WideTokenizer : public ByteTokenizer {
 public:
  int32_t bos_id() const override { return 99999; }
  int32_t vocab_size() const override { return 100000; }
};

TEST_F(CorpusTest, LargeVocabularyWritesUint32Shards) {
  PrepareOptions options;
  options.inputs = {Write("a.txt", "hello\nworld\n")};
  options.output_dir = dir_ + "/wide";
  options.corpus.split = "line";
  options.val_fraction = 0;
  WideTokenizer wide;
  ASSERT_TRUE(PrepareShards(options, wide).ok());
  auto shard = TokenShard::Open(dir_ + "/wide/train_000000.bin");
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ((*shard)->version(), kShardVersionU32);
  std::vector<uint32_t> tokens;
  ASSERT_TRUE((*shard)->Read(0, (*shard)->size(), &tokens).ok());
  EXPECT_EQ(tokens, (std::vector<uint32_t>{99999, 'h', 'e', 'l', 'l', 'o', 99999, 'w', 'o', 'r',
                                           'l', 'd'}));
  // The byte tokenizer's vocabulary fits: uint16.
  options.output_dir = dir_ + "/narrow";
  ASSERT_TRUE(PrepareShards(options, tokenizer_).ok());
  shard = TokenShard::Open(dir_ + "/narrow/train_000000.bin");
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ((*shard)->version(), kShardVersionU16);
}

TEST_F(CorpusTest, TokenShardsArePassedThrough) {
  const std::vector<std::string> lines = Lines(20000);
  ASSERT_TRUE(Prepare({Write("a.txt", TextOf(lines))}, "first", "line").ok());
  std::vector<std::string> shards;
  for (const auto& [name, bytes] : Files("first")) shards.push_back(dir_ + "/first/" + name);
  ASSERT_GT(shards.size(), 1u);
  // Documents run across shards: the second shard starts inside one, which continues the first's.
  ASSERT_TRUE(Prepare(shards, "again").ok());
  EXPECT_EQ(Files("again"), Files("first"));
  ASSERT_TRUE(Prepare(shards, "shuffled", "file", 3).ok());
  std::vector<std::string> docs = Documents("shuffled"), sorted = lines;
  std::sort(docs.begin(), docs.end());
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(docs, sorted);
  // Alone, a shard that starts inside a document is refused.
  EXPECT_THAT(Prepare({shards[1]}, "out").status().message(),
              HasSubstr("must come right before it in --input"));
  // Mixed with text: the shard's documents, then the text's.
  ASSERT_TRUE(Prepare({shards[0], Write("b.txt", "tail")}, "mixed").ok());
  EXPECT_EQ(Documents("mixed").back(), "tail");
}

TEST_F(CorpusTest, TokenShardsOfAnotherTokenizerAreRefused) {
  const std::string gpt2 = dir_ + "/gpt2.bin";
  ASSERT_TRUE(WriteTokenShard(gpt2, {50256, 464, 2068}).ok());
  absl::StatusOr<PrepareSummary> result = Prepare({gpt2}, "out");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("is outside the vocabulary of tokenizer byte"));
  const std::string no_bos = dir_ + "/no_bos.bin";
  ASSERT_TRUE(WriteTokenShard(no_bos, {104, 105, 256, 104}).ok());
  result = Prepare({no_bos}, "out");
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr(no_bos + " starts with token 104, not the BOS token 256"));
  const std::string zipped = Write("x.bin.gz", Gzip("x"));
  EXPECT_THAT(Prepare({zipped}, "out").status().message(), HasSubstr("read uncompressed"));
  EXPECT_TRUE(Files("out").empty());
}

}  // namespace
}  // namespace mesa::model
