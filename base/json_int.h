// Whole numbers read from JSON documents (config.json, state.json) as an int, refusing what an int
// cannot hold: nlohmann's get<int>() and value(key, int) wrap silently (2^31 becomes -2^31, 2^40
// becomes 0), which then surfaces as a nonsensical "got 0" far from its cause.
#ifndef MESANET_BASE_JSON_INT_H_
#define MESANET_BASE_JSON_INT_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace mesa::base {

// `value` as an int; InvalidArgument naming `name` when it is not a whole number or lies outside
// int's range (the number itself is given, as written in the document).
inline absl::StatusOr<int> JsonToInt(const nlohmann::json& value, absl::string_view name) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", v, " is out of range (at most ",
                                                     std::numeric_limits<int>::max(), ")"));
    }
    return static_cast<int>(v);
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", v, " is out of range (",
                                                     std::numeric_limits<int>::min(), " to ",
                                                     std::numeric_limits<int>::max(), ")"));
    }
    return static_cast<int>(v);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": expected a whole number, got ", value.dump()));
}

// The member `key` of `object` as an int, or `fallback` when it is absent or null.
inline absl::StatusOr<int> JsonIntOr(const nlohmann::json& object, const std::string& key,
                                     int fallback) {
  if (!object.contains(key) || object[key].is_null()) return fallback;
  return JsonToInt(object[key], key);
}

}  // namespace mesa::base

#endif  // MESANET_BASE_JSON_INT_H_
