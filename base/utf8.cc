#include "base/utf8.h"

#include <cstdint>

namespace mesa::base {
namespace {

// Length of the well-formed sequence starting at text[i] (1..4), or 0 when it is not one.
size_t SequenceLength(absl::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    cp = b0 & 0x07;
  } else {
    return 0;  // continuation byte, overlong lead (C0, C1) or past U+10FFFF (F5..FF)
  }
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0;  // overlong
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;                        // surrogate
  if (cp > 0x10FFFF) return 0;
  return n;
}

bool IsUnicodeSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// The code point of the well-formed sequence of `n` bytes at text[i].
uint32_t CodePointAt(absl::string_view text, size_t i, size_t n) {
  static constexpr uint8_t kLeadMask[] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  uint32_t cp = static_cast<uint8_t>(text[i]) & kLeadMask[n];
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[i + k]) & 0x3F);
  return cp;
}

}  // namespace

size_t TrailingUnicodeSpaceStart(absl::string_view text) {
  size_t start = text.size();  // where the current run of whitespace began
  for (size_t i = 0; i < text.size();) {
    const size_t n = SequenceLength(text, i);
    if (n == 0) {  // invalid bytes are not whitespace
      start = text.size();
      ++i;
      continue;
    }
    if (!IsUnicodeSpace(CodePointAt(text, i, n))) {
      start = text.size();
    } else if (start == text.size()) {
      start = i;
    }
    i += n;
  }
  return start;
}

absl::string_view StripUnicodeSpace(absl::string_view text) {
  text = text.substr(0, TrailingUnicodeSpaceStart(text));
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = SequenceLength(text, i);
    if (n == 0 || !IsUnicodeSpace(CodePointAt(text, i, n))) break;
    i += n;
  }
  return text.substr(i);
}

size_t FirstInvalidUtf8(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = SequenceLength(text, i);
    if (n == 0) return i;
    i += n;
  }
  return text.size();
}

bool IsValidUtf8(absl::string_view text) { return FirstInvalidUtf8(text) == text.size(); }

std::string SanitizeUtf8(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = SequenceLength(text, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      out.append(text.data() + i, n);
      i += n;
    }
  }
  return out;
}

size_t Utf8PrefixLength(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text.size();
  size_t end = max_bytes;
  // Step back over continuation bytes to the start of the character that would be split.
  while (end > 0 && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) --end;
  return end;
}

}  // namespace mesa::base
