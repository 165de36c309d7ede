#include "model/tokenizer/spm_tokenizer.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"
#include "model/tokenizer/spm_processor.h"

namespace mesa::model {
namespace {

// Trains a tiny model with the library's own trainer into TEST_TMPDIR.
std::string TrainModel(const std::string& name, const std::string& extra) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string corpus = dir + "/" + name + ".txt";
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 200; ++i) {
      out << "the quick brown fox jumps over the lazy dog " << i << "\n"
          << "a mesa layer solves a linear system with conjugate gradients\n";
    }
  }
  const std::string error =
      TrainSentencePiece("--input=" + corpus + " --model_prefix=" + dir + "/" + name +
                         " --vocab_size=400 --num_threads=1 --model_type=bpe "
                         "--character_coverage=1.0 --byte_fallback=true "
                         "--minloglevel=2 " +
                         extra);
  EXPECT_EQ(error, "");
  return dir + "/" + name + ".model";
}

TEST(SentencePieceTokenizerTest, EncodesAndRoundTrips) {
  auto tok = SentencePieceTokenizer::Load(TrainModel("spm", ""));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 400);
  EXPECT_EQ((*tok)->bos_id(), 1);  // SentencePiece's default: unk 0, bos 1, eos 2
  const std::string text = "the lazy fox solves a system";
  std::vector<int32_t> ids = (*tok)->Encode(text);
  ASSERT_FALSE(ids.empty());
  EXPECT_LT(ids.size(), text.size());  // merges happened
  for (int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 400);
    EXPECT_NE(id, (*tok)->bos_id());
  }
  ids.insert(ids.begin(), (*tok)->bos_id());
  EXPECT_EQ((*tok)->Decode(ids), text);
  // Unseen characters go through byte fallback and still round-trip.
  EXPECT_EQ((*tok)->Decode((*tok)->Encode("zébra")), "zébra");
}

TEST(SentencePieceTokenizerTest, BosIdComesFromTheModel) {
  auto tok = SentencePieceTokenizer::Load(
      TrainModel("spm_bos", "--bos_id=3 --eos_id=2 --unk_id=0 --pad_id=1"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->bos_id(), 3);
}

TEST(SentencePieceTokenizerTest, ModelWithoutBosIsRefused) {
  const std::string path = TrainModel("spm_nobos", "--bos_id=-1");
  auto tok = SentencePieceTokenizer::Load(path);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find(path), std::string::npos) << tok.status();
  EXPECT_NE(tok.status().message().find("no BOS"), std::string::npos) << tok.status();
}

TEST(SentencePieceTokenizerTest, NotAModel) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  std::ofstream(dir + "/junk.model") << "not a model";
  auto tok = SentencePieceTokenizer::Load(dir + "/junk.model");
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("junk.model"), std::string::npos) << tok.status();
}

}  // namespace
}  // namespace mesa::model

// libsentencepiece_train links Debian's Abseil flags, whose static Mutex destructor hangs at exit
// (__cxa_finalize in libabsl_flags_usage_internal) once the trainer has run; leave without
// running static destructors.
int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  std::fflush(nullptr);
  std::_Exit(result);
}
