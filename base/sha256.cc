#include "base/sha256.h"

#include <openssl/evp.h>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"

namespace mesa::base {

absl::StatusOr<std::string> FileSha256(const std::string& path, size_t max_bytes) {
  absl::StatusOr<std::string> bytes = ReadFile(path, max_bytes);
  if (!bytes.ok()) return bytes.status();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(bytes->data(), bytes->size(), digest, &size, EVP_sha256(), nullptr) != 1) {
    return absl::InternalError(absl::StrCat(path, ": SHA-256 failed"));
  }
  std::string hex;
  for (unsigned int i = 0; i < size; ++i) {
    absl::StrAppend(&hex, absl::Hex(digest[i], absl::kZeroPad2));
  }
  return hex;
}

}  // namespace mesa::base
