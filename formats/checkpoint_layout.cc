#include "formats/checkpoint_layout.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file_util.h"

namespace mesa::formats {
namespace fs = std::filesystem;

namespace {

constexpr char kStepPrefix[] = "step_";
constexpr char kTempInfix[] = ".tmp";

}  // namespace

std::string StepDirName(int64_t step) { return absl::StrFormat("%s%08d", kStepPrefix, step); }

std::string TempStepDirName(int64_t step, int pid) {
  return absl::StrCat(StepDirName(step), kTempInfix, ".", pid);
}

bool IsStepDirName(absl::string_view name) {
  return absl::StartsWith(name, kStepPrefix) && !absl::StrContains(name, kTempInfix);
}

bool IsTempStepDirName(absl::string_view name) {
  return absl::StartsWith(name, kStepPrefix) &&
         absl::StrContains(name, absl::StrCat(kTempInfix, "."));
}

std::vector<std::string> ListStepDirs(const std::string& root) {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.is_directory(ec) && IsStepDirName(entry.path().filename().string())) {
      dirs.push_back(entry.path().string());
    }
  }
  std::sort(dirs.rbegin(), dirs.rend());
  return dirs;
}

absl::StatusOr<std::vector<std::string>> CheckpointCandidates(const std::string& path) {
  std::error_code ec;
  if (fs::exists(path + "/" + kCheckpointStateFile, ec)) return std::vector<std::string>{path};
  if (!fs::is_directory(path, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", path, " does not exist"));
  }
  std::vector<std::string> candidates;
  if (auto latest = base::ReadFile(path + "/" + kCheckpointLatestFile, 4096); latest.ok()) {
    candidates.push_back(path + "/" + std::string(absl::StripAsciiWhitespace(*latest)));
  }
  for (const std::string& dir : ListStepDirs(path)) {
    if (std::find(candidates.begin(), candidates.end(), dir) == candidates.end()) {
      candidates.push_back(dir);
    }
  }
  if (candidates.empty()) return absl::NotFoundError(absl::StrCat("no checkpoint under ", path));
  return candidates;
}

}  // namespace mesa::formats
