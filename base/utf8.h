// UTF-8 that protobuf string fields accept. Trainer output and client text are bytes; a single
// invalid sequence in a proto3 string makes the whole message unserialisable, so text is made
// valid once where it enters (the agent's log lines, the coordinator's stored messages).
#ifndef MESANET_BASE_UTF8_H_
#define MESANET_BASE_UTF8_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace mesa::base {

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF).
bool IsValidUtf8(absl::string_view text);

// The offset of the first byte that starts no well-formed sequence; text.size() when valid.
size_t FirstInvalidUtf8(absl::string_view text);

// `text` with every invalid byte sequence replaced by U+FFFD; valid text is returned unchanged.
std::string SanitizeUtf8(absl::string_view text);

// The longest prefix of valid UTF-8 `text` of at most `max_bytes` bytes that ends on a code point
// boundary (never splits a multi-byte character).
size_t Utf8PrefixLength(absl::string_view text, size_t max_bytes);

// Unicode whitespace as Python's str.isspace() and str.strip() know it (ASCII TAB..CR, FS..US,
// space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000): the
// offset where the run of it at the end of valid UTF-8 `text` begins, and `text` without it at
// both ends.
size_t TrailingUnicodeSpaceStart(absl::string_view text);
absl::string_view StripUnicodeSpace(absl::string_view text);

}  // namespace mesa::base

#endif  // MESANET_BASE_UTF8_H_
