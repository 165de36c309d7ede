// Whole numbers read from JSON documents (config.json, state.json), refusing what the type cannot
// hold: nlohmann's get<int>() and value(key, int) wrap silently (2^31 becomes -2^31, 2^40
// becomes 0), which then surfaces as a nonsensical "got 0" far from its cause.
#ifndef MESANET_BASE_JSON_INT_H_
#define MESANET_BASE_JSON_INT_H_

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace mesa::base {

// `value` as a whole number of T's range (int, int64_t, uint64_t, ...); InvalidArgument naming
// `name` when it is not a whole number (a fraction, a number too large for 64 bits, which the
// parser keeps as a double, or no number at all) or lies outside T's range. Casting such a double
// to an integer, as get<int64_t>() does, is undefined behaviour.
template <typename T>
absl::StatusOr<T> JsonToWhole(const nlohmann::json& value, absl::string_view name) {
  static_assert(std::is_integral_v<T>, "whole numbers only");
  using Limits = std::numeric_limits<T>;
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(Limits::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": ", v, " is out of range (at most ", +Limits::max(), ")"));
    }
    return static_cast<T>(v);
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    const bool below = std::is_signed_v<T> ? v < static_cast<int64_t>(Limits::min()) : v < 0;
    const bool above = v > 0 && static_cast<uint64_t>(v) > static_cast<uint64_t>(Limits::max());
    if (below || above) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", v, " is out of range (",
                                                     +Limits::min(), " to ", +Limits::max(), ")"));
    }
    return static_cast<T>(v);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": expected a whole number, got ", value.dump()));
}

// `value` as an int (JsonToWhole<int>).
inline absl::StatusOr<int> JsonToInt(const nlohmann::json& value, absl::string_view name) {
  return JsonToWhole<int>(value, name);
}

// The member `key` of `object` as an int, or `fallback` when it is absent or null.
inline absl::StatusOr<int> JsonIntOr(const nlohmann::json& object, const std::string& key,
                                     int fallback) {
  if (!object.contains(key) || object[key].is_null()) return fallback;
  return JsonToInt(object[key], key);
}

}  // namespace mesa::base

#endif  // MESANET_BASE_JSON_INT_H_
