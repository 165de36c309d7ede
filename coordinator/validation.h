// Identifiers the coordinator accepts from clients and workers. Job specs are checked by the one
// validator every binary shares: spec/validate_job_spec.h.
#ifndef MESANET_COORDINATOR_VALIDATION_H_
#define MESANET_COORDINATOR_VALIDATION_H_

#include "absl/strings/string_view.h"

namespace mesa::coordinator {

// 1 to 128 of [A-Za-z0-9._-] (worker ids, client job ids).
bool IsValidIdentifier(absl::string_view id);

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_VALIDATION_H_
