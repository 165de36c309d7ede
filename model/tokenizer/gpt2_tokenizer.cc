#include "model/tokenizer/gpt2_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "nlohmann/json.hpp"

namespace mesa::model {
namespace {

// Python's (Unicode) \s, which the pre-tokenizer regexes use; RE2's \s is ASCII only.
constexpr char kWs[] = "\\t\\n\\x{0B}\\f\\r\\x{1C}-\\x{1F}\\x{85}\\p{Z}";
constexpr char kLookaheadWs[] = "\\s+(?!\\S)";

// A Python-style pre-tokenizer regex in RE2 syntax (see the header).
absl::StatusOr<std::string> TranslatePattern(absl::string_view pattern, absl::string_view source) {
  std::string in(pattern);
  bool emulated = false;
  if (size_t at = in.find(kLookaheadWs); at != std::string::npos) {
    in.replace(at, strlen(kLookaheadWs), "(?P<mesa_ws>\\s+)");
    emulated = true;
  }
  for (const char* look : {"(?=", "(?!", "(?<=", "(?<!"}) {
    if (in.find(look) != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": the pre-tokenizer regex uses a lookaround (", look,
                       ") that RE2 cannot run (only \\s+(?!\\S) is emulated): ", pattern));
    }
  }
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '\\' && i + 1 < in.size()) {
      const char e = in[++i];
      if (e == 's') {
        absl::StrAppend(&out, in_class ? kWs : absl::StrCat("[", kWs, "]"));
      } else if (e == 'S' && !in_class) {
        absl::StrAppend(&out, "[^", kWs, "]");
      } else if (e == 'S') {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": \\S inside a character class is not supported: ", pattern));
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < in.size() && in[i + 1] == '^') out.push_back(in[++i]);
      if (i + 1 < in.size() && in[i + 1] == ']') out.push_back(in[++i]);
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  (void)emulated;
  return out;
}

std::string CodepointToUtf8(int cp) {
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

size_t Utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

}  // namespace

std::string ByteLevelChar(uint8_t byte) {
  // bytes_to_unicode(): printable bytes map to themselves, the rest to 256 + n.
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  };
  if (printable(byte)) return CodepointToUtf8(byte);
  int n = 0;
  for (int b = 0; b < byte; ++b) n += !printable(b);
  return CodepointToUtf8(256 + n);
}

Gpt2Tokenizer::Gpt2Tokenizer() {
  for (int b = 0; b < 256; ++b) {
    byte_encoder_[b] = ByteLevelChar(static_cast<uint8_t>(b));
    byte_decoder_[byte_encoder_[b]] = static_cast<uint8_t>(b);
  }
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::Load(
    const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
  auto encoder = base::ReadFile(encoder_json_path);
  if (!encoder.ok()) return encoder.status();
  auto merges = base::ReadFile(vocab_bpe_path);
  if (!merges.ok()) return merges.status();
  return FromStrings(*encoder, *merges);
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::FromStrings(
    absl::string_view encoder_json, absl::string_view vocab_bpe) {
  ByteLevelBpeSpec spec;
  spec.source = "encoder.json/vocab.bpe";
  spec.pattern = kGpt2Pattern;
  nlohmann::json json = nlohmann::json::parse(encoder_json.begin(), encoder_json.end(), nullptr,
                                              /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return absl::InvalidArgumentError("encoder.json: expected a JSON object of token -> id");
  }
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("encoder.json: id of \"", it.key(), "\" is not a non-negative integer"));
    }
    spec.vocab[it.key()] = it.value().get<int32_t>();
  }
  for (absl::string_view line : absl::StrSplit(vocab_bpe, '\n')) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || absl::StartsWith(line, "#version")) continue;
    std::vector<std::string> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("vocab.bpe: bad merge line \"", line, "\""));
    }
    spec.merges.emplace_back(parts[0], parts[1]);
  }
  return Create(std::move(spec));
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::Create(ByteLevelBpeSpec spec) {
  std::unique_ptr<Gpt2Tokenizer> tok(new Gpt2Tokenizer());
  RE2::Options options;
  options.set_encoding(RE2::Options::EncodingUTF8);
  if (!spec.pattern.empty()) {
    auto pattern = TranslatePattern(spec.pattern, spec.source);
    if (!pattern.ok()) return pattern.status();
    tok->pattern_ = std::make_unique<RE2>(*pattern, options);
    if (!tok->pattern_->ok()) {
      return absl::InvalidArgumentError(absl::StrCat(spec.source, ": pre-tokenizer regex ",
                                                     spec.pattern, ": ", tok->pattern_->error()));
    }
    auto group = tok->pattern_->NamedCapturingGroups().find("mesa_ws");
    if (group != tok->pattern_->NamedCapturingGroups().end()) tok->ws_group_ = group->second;
  }
  int32_t max_id = -1;
  for (const auto& [token, id] : spec.vocab) {
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.source, ": id of \"", token, "\" is negative"));
    }
    max_id = std::max(max_id, id);
  }
  for (const auto& [content, id] : spec.added_tokens) {
    if (id < 0 || content.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.source, ": added token \"", content, "\" has a bad id or is empty"));
    }
    max_id = std::max(max_id, id);
  }
  tok->encoder_ = std::move(spec.vocab);
  tok->decoder_.assign(max_id + 1, "");
  for (const auto& [token, id] : tok->encoder_) tok->decoder_[id] = token;
  tok->vocab_size_ = max_id + 1;
  for (int b = 0; b < 256; ++b) {
    if (!tok->encoder_.contains(tok->byte_encoder_[b])) {
      return absl::InvalidArgumentError(absl::StrCat(
          spec.source, ": missing the byte-level token for byte ", b, " (not a byte-level BPE?)"));
    }
  }
  if (!spec.added_tokens.empty()) {
    std::vector<std::pair<std::string, int32_t>> added = spec.added_tokens;
    std::stable_sort(added.begin(), added.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    std::string alternation;
    for (const auto& [content, id] : added) {
      if (!alternation.empty()) alternation += "|";
      alternation += RE2::QuoteMeta(content);
      tok->added_ids_[content] = id;
      tok->added_content_[id] = content;
    }
    RE2::Options latin;  // QuoteMeta'd bytes: match them as bytes
    latin.set_encoding(RE2::Options::EncodingLatin1);
    tok->added_ = std::make_unique<RE2>(alternation, latin);
    if (!tok->added_->ok()) return absl::InternalError(tok->added_->error());
  }
  if (spec.bos_id >= 0) {
    tok->bos_id_ = spec.bos_id;
  } else {
    auto bos = tok->encoder_.find("<|endoftext|>");
    tok->bos_id_ = bos != tok->encoder_.end() ? bos->second : max_id;
  }
  int rank = 0;
  for (auto& merge : spec.merges) tok->merge_ranks_.emplace(std::move(merge), rank++);
  tok->ignore_merges_ = spec.ignore_merges;
  tok->add_prefix_space_ = spec.add_prefix_space;
  tok->nfc_ = spec.nfc;
  return tok;
}

std::vector<std::string> Gpt2Tokenizer::PreTokenize(absl::string_view text) const {
  std::vector<std::string> pieces;
  size_t pos = 0;
  if (pattern_ == nullptr) {
    if (!text.empty()) pieces.emplace_back(text);
    return pieces;
  }
  std::vector<re2::StringPiece> groups(ws_group_ + 1);
  while (pos < text.size()) {
    if (!pattern_->Match(re2::StringPiece(text.data(), text.size()), pos, text.size(),
                         RE2::ANCHOR_START, groups.data(), static_cast<int>(groups.size())) ||
        groups[0].empty()) {
      // Not UTF-8 or otherwise unmatched: take one byte as its own piece.
      pieces.emplace_back(text.substr(pos, 1));
      ++pos;
      continue;
    }
    const re2::StringPiece match = groups[0];
    size_t len = match.size();
    // Emulate \s+(?!\S): a whitespace run followed by more text leaves its last character
    // (which may be multi-byte, e.g. U+00A0) to the next piece.
    if (ws_group_ > 0 && groups[ws_group_].data() != nullptr && pos + len < text.size()) {
      size_t last = len - 1;
      while (last > 0 && (static_cast<unsigned char>(match[last]) & 0xC0) == 0x80) --last;
      if (last > 0) len = last;
    }
    pieces.emplace_back(text.substr(pos, len));
    pos += len;
  }
  return pieces;
}

std::vector<int32_t> Gpt2Tokenizer::EncodePiece(const std::string& piece) const {
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto hit = cache_.find(piece);
    if (hit != cache_.end()) return hit->second;
  }
  std::vector<std::string> symbols;
  for (unsigned char c : piece) symbols.push_back(byte_encoder_[c]);
  if (ignore_merges_ && symbols.size() > 1) {
    std::string whole;
    for (const std::string& s : symbols) whole += s;
    if (encoder_.contains(whole)) symbols = {whole};
  }
  while (symbols.size() > 1) {
    int best_rank = std::numeric_limits<int>::max();
    size_t best = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto it = merge_ranks_.find({symbols[i], symbols[i + 1]});
      if (it != merge_ranks_.end() && it->second < best_rank) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best_rank == std::numeric_limits<int>::max()) break;
    // Merge every occurrence of the best pair, left to right (as GPT-2's bpe()).
    const std::string first = symbols[best], second = symbols[best + 1];
    std::vector<std::string> merged;
    for (size_t i = 0; i < symbols.size();) {
      if (i + 1 < symbols.size() && symbols[i] == first && symbols[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(symbols[i++]);
      }
    }
    symbols = std::move(merged);
  }
  std::vector<int32_t> ids;
  for (const std::string& s : symbols) {
    auto it = encoder_.find(s);
    if (it != encoder_.end()) {
      ids.push_back(it->second);
    } else {  // A merge result missing from the vocabulary: fall back to its bytes.
      for (size_t i = 0; i < s.size();) {
        const size_t n = Utf8Length(static_cast<unsigned char>(s[i]));
        ids.push_back(encoder_.at(byte_encoder_[byte_decoder_.at(s.substr(i, n))]));
        i += n;
      }
    }
  }
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() < (1 << 20)) cache_[piece] = ids;
  return ids;
}

void Gpt2Tokenizer::EncodeOrdinary(absl::string_view text, std::vector<int32_t>* ids) const {
  std::string normalized;
  if (nfc_ && !text.empty()) {
    // utf8proc_NFC wants a NUL-terminated string and returns a malloc'ed one, or null for
    // invalid UTF-8 (then the bytes are encoded as they are).
    const std::string terminated(text);
    if (utf8proc_uint8_t* nfc =
            utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(terminated.c_str()))) {
      normalized = reinterpret_cast<const char*>(nfc);
      std::free(nfc);
      text = normalized;
    }
  }
  for (const std::string& piece : PreTokenize(text)) {
    std::vector<int32_t> piece_ids = EncodePiece(piece);
    ids->insert(ids->end(), piece_ids.begin(), piece_ids.end());
  }
}

std::vector<int32_t> Gpt2Tokenizer::Encode(absl::string_view text) const {
  std::string prefixed;
  if (add_prefix_space_ && !text.empty() && text[0] != ' ') {
    prefixed = absl::StrCat(" ", text);
    text = prefixed;
  }
  std::vector<int32_t> ids;
  size_t pos = 0;
  re2::StringPiece special;
  while (added_ != nullptr && pos < text.size() &&
         added_->Match(re2::StringPiece(text.data(), text.size()), pos, text.size(),
                       RE2::UNANCHORED, &special, 1)) {
    const size_t at = special.data() - text.data();
    EncodeOrdinary(text.substr(pos, at - pos), &ids);
    ids.push_back(added_ids_.at(std::string(special.data(), special.size())));
    pos = at + special.size();
  }
  EncodeOrdinary(text.substr(pos), &ids);
  return ids;
}

std::string Gpt2Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= static_cast<int32_t>(decoder_.size()) || id == bos_id_) continue;
    if (auto added = added_content_.find(id); added != added_content_.end()) {
      out += added->second;
      continue;
    }
    const std::string& token = decoder_[id];
    for (size_t i = 0; i < token.size();) {
      const size_t n = Utf8Length(static_cast<unsigned char>(token[i]));
      auto it = byte_decoder_.find(token.substr(i, n));
      if (it != byte_decoder_.end()) out.push_back(static_cast<char>(it->second));
      i += n;
    }
  }
  return out;
}

}  // namespace mesa::model
