#include "model/tokenizer/gpt2_tokenizer.h"

#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "nlohmann/json.hpp"

namespace mesa::model {
namespace {

// Python's (Unicode) \s, which GPT-2's regex uses; RE2's \s is ASCII only.
#define MESA_WS "\\t\\n\\x{0B}\\f\\r\\x{1C}-\\x{1F}\\x{85}\\p{Z}"
// GPT-2's pattern without the `\s+(?!\S)` alternative (emulated in PreTokenize).
constexpr char kPattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" MESA_WS "\\p{L}\\p{N}]+|[" MESA_WS "]+";
constexpr char kSpacesPattern[] = "[" MESA_WS "]+";
#undef MESA_WS

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

Gpt2Tokenizer::Gpt2Tokenizer() {
  // bytes_to_unicode(): printable bytes map to themselves, the rest to 256 + n.
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    byte_encoder_[b] = CodepointToUtf8(printable ? b : 256 + n++);
    byte_decoder_[byte_encoder_[b]] = static_cast<uint8_t>(b);
  }
  RE2::Options options;
  options.set_encoding(RE2::Options::EncodingUTF8);
  pattern_ = std::make_unique<RE2>(kPattern, options);
  spaces_ = std::make_unique<RE2>(kSpacesPattern, options);
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
  std::unique_ptr<Gpt2Tokenizer> tok(new Gpt2Tokenizer());
  if (!tok->pattern_->ok()) return absl::InternalError(tok->pattern_->error());
  if (!tok->spaces_->ok()) return absl::InternalError(tok->spaces_->error());
  nlohmann::json json = nlohmann::json::parse(encoder_json.begin(), encoder_json.end(), nullptr,
                                              /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return absl::InvalidArgumentError("encoder.json: expected a JSON object of token -> id");
  }
  int32_t max_id = -1;
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("encoder.json: id of \"", it.key(), "\" is not a non-negative integer"));
    }
    const int32_t id = it.value().get<int32_t>();
    tok->encoder_[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  tok->decoder_.assign(max_id + 1, "");
  for (const auto& [token, id] : tok->encoder_) tok->decoder_[id] = token;
  tok->vocab_size_ = max_id + 1;
  for (int b = 0; b < 256; ++b) {
    if (!tok->encoder_.contains(tok->byte_encoder_[b])) {
      return absl::InvalidArgumentError(
          absl::StrCat("encoder.json: missing the byte-level token for byte ", b));
    }
  }
  auto bos = tok->encoder_.find("<|endoftext|>");
  tok->bos_id_ = bos != tok->encoder_.end() ? bos->second : max_id;
  int rank = 0;
  for (absl::string_view line : absl::StrSplit(vocab_bpe, '\n')) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || absl::StartsWith(line, "#version")) continue;
    std::vector<std::string> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("vocab.bpe: bad merge line \"", line, "\""));
    }
    tok->merge_ranks_.emplace(std::make_pair(parts[0], parts[1]), rank++);
  }
  return tok;
}

std::vector<std::string> Gpt2Tokenizer::PreTokenize(absl::string_view text) const {
  std::vector<std::string> pieces;
  size_t pos = 0;
  while (pos < text.size()) {
    re2::StringPiece match;
    if (!pattern_->Match(re2::StringPiece(text.data(), text.size()), pos, text.size(),
                         RE2::ANCHOR_START, &match, 1) ||
        match.empty()) {
      // Not UTF-8 or otherwise unmatched: take one byte as its own piece.
      pieces.emplace_back(text.substr(pos, 1));
      ++pos;
      continue;
    }
    size_t len = match.size();
    // Emulate \s+(?!\S): a whitespace run followed by more text leaves its last character
    // (which may be multi-byte, e.g. U+00A0) to the next piece.
    if (pos + len < text.size() && RE2::FullMatch(match, *spaces_)) {
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

std::vector<int32_t> Gpt2Tokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> ids;
  for (const std::string& piece : PreTokenize(text)) {
    std::vector<int32_t> piece_ids = EncodePiece(piece);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  }
  return ids;
}

std::string Gpt2Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= static_cast<int32_t>(decoder_.size()) || id == bos_id_) continue;
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
