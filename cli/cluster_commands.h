// mesactl's cluster commands (kubectl as the anchor): workers, drain, uncordon, forget, version.
#ifndef MESANET_CLI_CLUSTER_COMMANDS_H_
#define MESANET_CLI_CLUSTER_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "mesa/v1/cluster_service.pb.h"

namespace mesa::cli {

// The cluster commands, each a Command (cli/commands.h): `workers`, `drain WORKER [--evict]`,
// `uncordon WORKER`, `forget WORKER`, `version`.
Command Workers, Drain, Uncordon, Forget, Version;

// The `mesactl workers` table: WORKER, STATE (live/awaiting/lost, ",draining" when cordoned),
// GPUS and CPU SLOTS as free/total, JOBS (running job ids), LEASE AGE (since the last renewal).
std::string FormatWorkers(const mesa::v1::ListWorkersResponse& workers, absl::Time now);

}  // namespace mesa::cli

#endif  // MESANET_CLI_CLUSTER_COMMANDS_H_
