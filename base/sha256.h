// SHA-256 of a file, for records that identify a file by its content (tokenizer files in
// mesa_data.json and checkpoints).
#ifndef MESANET_BASE_SHA256_H_
#define MESANET_BASE_SHA256_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mesa::base {

// Lowercase hex of the SHA-256 of the file's bytes; the file is read whole, up to max_bytes
// (ResourceExhausted beyond).
absl::StatusOr<std::string> FileSha256(const std::string& path, size_t max_bytes = size_t{1} << 30);

// Lowercase hex of the SHA-256 of `bytes` (for a file already read).
std::string Sha256Hex(absl::string_view bytes);

}  // namespace mesa::base

#endif  // MESANET_BASE_SHA256_H_
