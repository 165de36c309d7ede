// hf-encode: token ids of texts under a Hugging Face tokenizer.json, for comparing our encoder
// with Hugging Face's (model/tokenizer/hf_conformance_test.sh).
//   hf-encode --tokenizer_file tokenizer.json --texts texts.jsonl
// texts.jsonl holds one {"text": "..."} per line; prints one JSON array of ids per line (no BOS).
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "base/cli_flags.h"
#include "model/tokenizer/hf_tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, tokenizer_file, "", "The tokenizer.json to encode with.");
ABSL_FLAG(std::string, texts, "", "JSONL file of {\"text\": ...} objects.");

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(argc, argv,
                               "hf-encode --tokenizer_file tokenizer.json --texts texts.jsonl");
  absl::StatusOr<std::unique_ptr<mesa::model::Gpt2Tokenizer>> tokenizer =
      mesa::model::LoadHfTokenizer(absl::GetFlag(FLAGS_tokenizer_file));
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "hf-encode: %s\n", std::string(tokenizer.status().message()).c_str());
    return 2;
  }
  std::ifstream in(absl::GetFlag(FLAGS_texts));
  if (!in) {
    std::fprintf(stderr, "hf-encode: cannot read --texts %s\n", absl::GetFlag(FLAGS_texts).c_str());
    return 2;
  }
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const nlohmann::json doc = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object() || !doc.contains("text") || !doc["text"].is_string()) {
      std::fprintf(stderr, "hf-encode: %s:%d: not a {\"text\": string} object\n",
                   absl::GetFlag(FLAGS_texts).c_str(), n);
      return 2;
    }
    std::printf(
        "%s\n",
        nlohmann::json((*tokenizer)->Encode(doc["text"].get<std::string>())).dump().c_str());
  }
  return 0;
}
