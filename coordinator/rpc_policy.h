// One row per RPC of the coordinator's three services: what each `Call` checks before the
// handler runs and what it records, read from this table instead of compared method names
// (docs/coordinator.md, "Adding an RPC"). Handlers keep what depends on the request's content
// (which job, whose job); the table holds what depends on the RPC alone.
#ifndef MESANET_COORDINATOR_RPC_POLICY_H_
#define MESANET_COORDINATOR_RPC_POLICY_H_

#include <span>

namespace mesa::coordinator {

enum class Rpc {
  // mesa.v1.JobService
  kSubmitJob,
  kGetJob,
  kListJobs,
  kCancelJob,
  kWatchJob,
  kGetJobLogs,
  kExplainJob,
  kListAuditRecords,
  // mesa.v1.WorkerService
  kRegisterWorker,
  kHeartbeat,
  kUpdateAttempt,
  kPutRendezvous,
  kGetRendezvous,
  kDeregisterWorker,
  kDrainSelf,
  kUncordonSelf,
  // mesa.v1.ClusterService
  kListWorkers,
  kDrainWorker,
  kUncordonWorker,
  kForgetWorker,
  kGetVersion,
};

struct RpcPolicy {
  Rpc rpc;
  // The name counted in mesa_coordinator_rpcs_total{method} and written in audit records.
  const char* method;
  // Only admins may call it (PERMISSION_DENIED "... (admins only)" for other roles); every call,
  // refused or not, is audited with its target.
  bool admins_only = false;
  // A call refused for want of credentials (no valid token, no client certificate) is audited, at
  // most one line a second (RefusalAudit).
  bool audit_unauthenticated = false;
  // A worker call whose certificate names another worker is audited (registrations).
  bool audit_wrong_worker = false;
  // The request's `id` is a job id: at most kMaxJobIdBytes, checked before anything else and
  // never echoed.
  bool names_job = false;
};

// The row of `rpc`.
const RpcPolicy& PolicyOf(Rpc rpc);
// Every row, in the order of Rpc.
std::span<const RpcPolicy> RpcPolicies();

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_RPC_POLICY_H_
