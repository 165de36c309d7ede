#include "base/sha256.h"

#include <openssl/evp.h>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"

namespace mesa::base {

std::string Sha256Hex(absl::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  // EVP_Digest fails only on allocation failure; an empty digest then is visible in the hex.
  EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < size; ++i) {
    absl::StrAppend(&hex, absl::Hex(digest[i], absl::kZeroPad2));
  }
  return hex;
}

absl::StatusOr<std::string> FileSha256(const std::string& path, size_t max_bytes) {
  absl::StatusOr<std::string> bytes = ReadFile(path, max_bytes);
  if (!bytes.ok()) return bytes.status();
  const std::string hex = Sha256Hex(*bytes);
  if (hex.empty()) return absl::InternalError(absl::StrCat(path, ": SHA-256 failed"));
  return hex;
}

}  // namespace mesa::base
