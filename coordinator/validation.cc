#include "coordinator/validation.h"

#include "absl/strings/ascii.h"

namespace mesa::coordinator {

bool IsValidIdentifier(absl::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

}  // namespace mesa::coordinator
