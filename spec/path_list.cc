#include "spec/path_list.h"

#include <glob.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"

namespace mesa::spec {

std::vector<std::string> ExpandPatternItem(const std::string& item) {
  if (item.find_first_of("*?[") == std::string::npos) return {item};
  std::vector<std::string> files;
  glob_t matches;
  if (glob(item.c_str(), 0, nullptr, &matches) == 0) {
    for (size_t i = 0; i < matches.gl_pathc; ++i) files.push_back(matches.gl_pathv[i]);
  }
  globfree(&matches);
  return files;
}

std::vector<std::string> PathListItems(absl::string_view list) {
  std::vector<std::string> items;
  for (absl::string_view piece : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    absl::string_view item = absl::StripAsciiWhitespace(piece);
    if (!item.empty()) items.emplace_back(item);
  }
  return items;
}

}  // namespace mesa::spec
