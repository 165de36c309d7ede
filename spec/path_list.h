// Path lists and shard patterns as specs write them ("a.bin, dir/train_*.bin"): proto-free, so
// tools without protobuf (mesa-data, which may load libsentencepiece) can expand them the same way.
#ifndef MESANET_SPEC_PATH_LIST_H_
#define MESANET_SPEC_PATH_LIST_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace mesa::spec {

// The files a shard pattern item names: glob(3) matches for an item with wildcards (none when it
// matches nothing), else the item itself.
std::vector<std::string> ExpandPatternItem(const std::string& item);

// Comma-separated items of a path list (data.train_path), whitespace-stripped, empty ones skipped.
std::vector<std::string> PathListItems(absl::string_view list);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_PATH_LIST_H_
