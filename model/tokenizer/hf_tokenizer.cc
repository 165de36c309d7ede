#include "model/tokenizer/hf_tokenizer.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "nlohmann/json.hpp"

namespace mesa::model {
namespace {

using nlohmann::json;

absl::Status Bad(absl::string_view source, absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", field, ": ", what));
}

// One pre-tokenizer (not a Sequence) into `spec`.
absl::Status AddPreTokenizer(const json& pre, absl::string_view source, absl::string_view field,
                             ByteLevelBpeSpec* spec) {
  const std::string type = pre.value("type", "");
  if (type == "ByteLevel") {
    if (pre.value("use_regex", true)) {
      if (!spec->pattern.empty()) return Bad(source, field, "a second regex pre-tokenizer");
      spec->pattern = kGpt2Pattern;
    }
    spec->add_prefix_space = pre.value("add_prefix_space", false);
    return absl::OkStatus();
  }
  if (type == "Split") {
    if (!pre.contains("pattern") || !pre["pattern"].is_object() ||
        !pre["pattern"].contains("Regex") || !pre["pattern"]["Regex"].is_string()) {
      return Bad(source, field, "only a Split with a {\"Regex\": ...} pattern is supported");
    }
    if (pre.value("behavior", "") != "Isolated" || pre.value("invert", false)) {
      return Bad(source, field,
                 "only a Split with behavior Isolated and invert false is supported");
    }
    if (!spec->pattern.empty()) return Bad(source, field, "a second regex pre-tokenizer");
    spec->pattern = pre["pattern"]["Regex"].get<std::string>();
    return absl::OkStatus();
  }
  return Bad(source, field, absl::StrCat("unsupported pre-tokenizer type \"", type, "\""));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> LoadHfTokenizer(const std::string& path) {
  auto text = base::ReadFile(path);
  if (!text.ok()) return text.status();
  return HfTokenizerFromString(*text, path);
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> HfTokenizerFromString(absl::string_view text,
                                                                     absl::string_view source) {
  json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) return Bad(source, "(top level)", "not a JSON object");
  if (!root.contains("model") || !root["model"].is_object()) {
    return Bad(source, "model", "missing or not an object");
  }
  const json& model = root["model"];
  const std::string type = model.value("type", "");
  if (type != "BPE") {
    return Bad(source, "model.type",
               absl::StrCat("\"", type,
                            "\" is not supported (only byte-level BPE is; for a SentencePiece "
                            "model use --tokenizer spm with its .model file)"));
  }
  if (model.value("byte_fallback", false)) {
    return Bad(source, "model.byte_fallback", "true is not supported (not a byte-level BPE)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      return Bad(source, absl::StrCat("model.", key), "is not supported");
    }
  }
  ByteLevelBpeSpec spec;
  spec.source = std::string(source);
  spec.ignore_merges = model.value("ignore_merges", false);
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return Bad(source, "model.vocab", "missing or not an object");
  }
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > INT32_MAX) {
      return Bad(source, "model.vocab",
                 absl::StrCat("id of \"", it.key(), "\" is not a non-negative integer"));
    }
    spec.vocab[it.key()] = it.value().get<int32_t>();
  }
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return Bad(source, "model.merges", "missing or not an array");
  }
  for (size_t i = 0; i < model["merges"].size(); ++i) {
    const json& merge = model["merges"][i];
    if (merge.is_string()) {
      const std::string s = merge.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return Bad(source, absl::StrCat("model.merges[", i, "]"),
                   absl::StrCat("\"", s, "\" is not two tokens separated by one space"));
      }
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      spec.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      return Bad(source, absl::StrCat("model.merges[", i, "]"),
                 "neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
    for (size_t i = 0; i < root["added_tokens"].size(); ++i) {
      const json& added = root["added_tokens"][i];
      if (!added.is_object() || !added.contains("id") || !added["id"].is_number_integer() ||
          !added.contains("content") || !added["content"].is_string()) {
        return Bad(source, absl::StrCat("added_tokens[", i, "]"), "needs an id and a content");
      }
      spec.added_tokens.emplace_back(added["content"].get<std::string>(),
                                     added["id"].get<int32_t>());
    }
  }
  if (root.contains("normalizer") && !root["normalizer"].is_null()) {
    const std::string norm = root["normalizer"].value("type", "");
    if (norm != "NFC") {
      return Bad(source, "normalizer", absl::StrCat("type \"", norm, "\" is not supported"));
    }
    spec.nfc = true;
  }
  if (root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null()) {
    const json& pre = root["pre_tokenizer"];
    if (pre.value("type", "") == "Sequence") {
      if (!pre.contains("pretokenizers") || !pre["pretokenizers"].is_array()) {
        return Bad(source, "pre_tokenizer.pretokenizers", "missing or not an array");
      }
      for (size_t i = 0; i < pre["pretokenizers"].size(); ++i) {
        absl::Status status =
            AddPreTokenizer(pre["pretokenizers"][i], source,
                            absl::StrCat("pre_tokenizer.pretokenizers[", i, "]"), &spec);
        if (!status.ok()) return status;
      }
    } else {
      absl::Status status = AddPreTokenizer(pre, source, "pre_tokenizer", &spec);
      if (!status.ok()) return status;
    }
  }
  for (const char* name : {"<|begin_of_text|>", "<|endoftext|>", "<s>", "<bos>"}) {
    for (const auto& [content, id] : spec.added_tokens) {
      if (content == name && spec.bos_id < 0) spec.bos_id = id;
    }
    if (auto it = spec.vocab.find(name); it != spec.vocab.end() && spec.bos_id < 0) {
      spec.bos_id = it->second;
    }
    if (spec.bos_id >= 0) break;
  }
  if (spec.bos_id < 0) {
    return Bad(source, "added_tokens",
               "no BOS token found (looked for <|begin_of_text|>, <|endoftext|>, <s>, <bos>)");
  }
  return Gpt2Tokenizer::Create(std::move(spec));
}

}  // namespace mesa::model
