// Validation of user-supplied job specs. Every problem names its field path, e.g.
// "spec.resources.gpus: must be between 0 and 4096, got -3"; several are joined with "; ".
#ifndef MESA_COORDINATOR_VALIDATION_H_
#define MESA_COORDINATOR_VALIDATION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "mesa/v1/job.pb.h"

namespace mesa::coordinator {

// Checks every field of `spec`; returns INVALID_ARGUMENT listing all problems, or OK.
absl::Status ValidateJobSpec(const mesa::v1::JobSpec& spec);

// The individual problems, each "path: message". Empty when the spec is valid.
std::vector<std::string> JobSpecProblems(const mesa::v1::JobSpec& spec);

// ^[a-z][a-z0-9-]{0,62}$ (job names and queue names).
bool IsValidName(absl::string_view name);

// 1 to 128 of [A-Za-z0-9._-] (worker ids, client job ids).
bool IsValidIdentifier(absl::string_view id);

}  // namespace mesa::coordinator

#endif  // MESA_COORDINATOR_VALIDATION_H_
