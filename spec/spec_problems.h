// The validator's list of problems (spec/validate_job_spec.h): each "spec.<path>: <message>",
// with the checks every section uses. Internal to //spec:validate_job_spec.
#ifndef MESANET_SPEC_SPEC_PROBLEMS_H_
#define MESANET_SPEC_SPEC_PROBLEMS_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "kernels/common/limits.h"

namespace mesa::spec {

class Problems;

// AT.name of a dataset, task or synthetic task: a valid name (IsDatasetName) not among `names`,
// which it joins (validate_eval.cc).
void CheckResultName(const std::string& at, const std::string& name,
                     std::vector<std::string>& names, Problems& p);

class Problems {
 public:
  void Add(absl::string_view path, absl::string_view message) {
    list_.push_back(absl::StrCat("spec.", path, ": ", message));
  }
  void MaxLen(absl::string_view path, absl::string_view s, size_t n) {
    if (s.size() > n) Add(path, absl::StrCat("must be at most ", n, " characters, got ", s.size()));
  }
  // A whole number from lo to hi (inclusive).
  void Range(absl::string_view path, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) Add(path, absl::StrCat("must be between ", lo, " and ", hi, ", got ", v));
  }
  void OneOf(absl::string_view path, absl::string_view v,
             std::initializer_list<absl::string_view> allowed) {
    for (absl::string_view a : allowed) {
      if (v == a) return;
    }
    std::vector<std::string> quoted;
    for (absl::string_view a : allowed) {
      if (!a.empty()) quoted.push_back(absl::StrCat("\"", a, "\""));
    }
    Add(path, absl::StrCat("must be one of ", absl::StrJoin(quoted, ", "), " (or empty), got \"", v,
                           "\""));
  }
  bool Has(absl::string_view path) const {
    const std::string prefix = absl::StrCat("spec.", path, ": ");
    for (const std::string& p : list_) {
      if (absl::StartsWith(p, prefix)) return true;
    }
    return false;
  }
  std::vector<std::string> Take() { return std::move(list_); }

 private:
  std::vector<std::string> list_;
};

// `field` (a sequence length) split into `context` context-parallel slices, each a whole number
// of the kernels' chunks.
inline void CheckContextSlices(const std::string& field, int64_t seq_len, int context,
                               Problems& p) {
  const int64_t multiple = int64_t{context} * kernels::kContextSliceMultiple;
  if (seq_len % multiple == 0) return;
  p.Add(field,
        absl::StrCat("must split into ", context, " context-parallel slices of a whole number of ",
                     kernels::kContextSliceMultiple, "-token chunks (a multiple of ", multiple,
                     "), got ", seq_len));
}

}  // namespace mesa::spec

#endif  // MESANET_SPEC_SPEC_PROBLEMS_H_
