#include "coordinator/rpc_policy.h"

namespace mesa::coordinator {
namespace {

// In the order of Rpc (rpc_policy_test checks it).
constexpr RpcPolicy kPolicies[] = {
    {.rpc = Rpc::kSubmitJob, .method = "SubmitJob", .audit_unauthenticated = true},
    {.rpc = Rpc::kGetJob, .method = "GetJob", .names_job = true},
    {.rpc = Rpc::kListJobs, .method = "ListJobs"},
    {.rpc = Rpc::kCancelJob,
     .method = "CancelJob",
     .audit_unauthenticated = true,
     .names_job = true},
    {.rpc = Rpc::kWatchJob, .method = "WatchJob", .names_job = true},
    {.rpc = Rpc::kGetJobLogs, .method = "GetJobLogs", .names_job = true},
    {.rpc = Rpc::kExplainJob, .method = "ExplainJob", .names_job = true},
    {.rpc = Rpc::kListAuditRecords, .method = "ListAuditRecords"},
    {.rpc = Rpc::kRegisterWorker,
     .method = "RegisterWorker",
     .audit_unauthenticated = true,
     .audit_wrong_worker = true},
    {.rpc = Rpc::kHeartbeat, .method = "Heartbeat", .audit_unauthenticated = true},
    {.rpc = Rpc::kUpdateAttempt, .method = "UpdateAttempt", .audit_unauthenticated = true},
    {.rpc = Rpc::kPutRendezvous, .method = "PutRendezvous", .audit_unauthenticated = true},
    {.rpc = Rpc::kGetRendezvous, .method = "GetRendezvous", .audit_unauthenticated = true},
    {.rpc = Rpc::kDeregisterWorker, .method = "DeregisterWorker", .audit_unauthenticated = true},
    {.rpc = Rpc::kDrainSelf, .method = "DrainSelf", .audit_unauthenticated = true},
    {.rpc = Rpc::kUncordonSelf, .method = "UncordonSelf", .audit_unauthenticated = true},
    {.rpc = Rpc::kListWorkers, .method = "ListWorkers"},
    {.rpc = Rpc::kDrainWorker, .method = "DrainWorker", .admins_only = true},
    {.rpc = Rpc::kUncordonWorker, .method = "UncordonWorker", .admins_only = true},
    {.rpc = Rpc::kForgetWorker, .method = "ForgetWorker", .admins_only = true},
    {.rpc = Rpc::kGetVersion, .method = "GetVersion"},
};

}  // namespace

const RpcPolicy& PolicyOf(Rpc rpc) { return kPolicies[static_cast<int>(rpc)]; }

std::span<const RpcPolicy> RpcPolicies() { return kPolicies; }

}  // namespace mesa::coordinator
