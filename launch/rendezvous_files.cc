#include "launch/rendezvous_files.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace mesa::launch {

bool IsRendezvousKey(absl::string_view key) {
  if (key.empty() || key.size() > 128 || key == "." || key == "..") return false;
  for (char c : key) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

std::string RendezvousValuePath(absl::string_view dir, absl::string_view key) {
  return absl::StrCat(dir, "/", key);
}

std::string RendezvousWantPath(absl::string_view dir, absl::string_view key) {
  return absl::StrCat(dir, "/", key, kRendezvousWantSuffix);
}

RendezvousEntry ClassifyRendezvousEntry(absl::string_view name, std::string* key) {
  if (IsRendezvousKey(name)) {
    *key = std::string(name);
    return RendezvousEntry::kValue;
  }
  if (absl::ConsumeSuffix(&name, kRendezvousWantSuffix) && IsRendezvousKey(name)) {
    *key = std::string(name);
    return RendezvousEntry::kWant;
  }
  return RendezvousEntry::kOther;
}

}  // namespace mesa::launch
