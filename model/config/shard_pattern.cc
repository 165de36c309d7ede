#include "model/config/shard_pattern.h"

#include <sys/stat.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spec/path_list.h"

namespace mesa::model {

absl::StatusOr<std::vector<std::string>> ExpandShardPattern(const std::string& pattern,
                                                            const std::string& field) {
  std::vector<std::string> files;
  // The same expansion as the worker's confined-paths check (spec/confined_paths.h).
  for (const std::string& item : spec::PathListItems(pattern)) {
    if (item.find_first_of("*?[") != std::string::npos) {
      std::vector<std::string> matches = spec::ExpandPatternItem(item);
      if (matches.empty()) {
        return absl::NotFoundError(absl::StrCat(field, ": pattern \"", item, "\" matches no file"));
      }
      files.insert(files.end(), matches.begin(), matches.end());
    } else {
      struct stat info;
      if (stat(item.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
        return absl::NotFoundError(absl::StrCat(field, ": shard \"", item, "\" does not exist"));
      }
      files.push_back(item);
    }
  }
  if (files.empty())
    return absl::InvalidArgumentError(absl::StrCat(field, ": names no shard file"));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace mesa::model
