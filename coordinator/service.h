// gRPC adapters: mesa.v1.JobService and mesa.v1.WorkerService over a Coordinator, plus a Server
// that binds them and mesa.v1.ClusterService (cluster_service.h) with health checking and
// reflection. Each RPC is counted in
// mesa_coordinator_rpcs_total{method,code}.
#ifndef MESANET_COORDINATOR_SERVICE_H_
#define MESANET_COORDINATOR_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/auth.h"
#include "coordinator/cluster_service.h"
#include "coordinator/coordinator.h"
#include "coordinator/metrics.h"
#include "coordinator/rpc_policy.h"
#include "coordinator/stream_limits.h"
#include "grpcpp/grpcpp.h"
#include "mesa/v1/job_service.grpc.pb.h"
#include "mesa/v1/worker_service.grpc.pb.h"

namespace mesa::coordinator {

grpc::Status ToGrpc(const absl::Status& s);

// Audit lines of calls refused for want of credentials: at most one a second (a misconfigured or
// hostile client may retry fast), the next line counting those left out.
class RefusalAudit {
 public:
  // `caller`: how the lines name the unauthenticated caller. Each line is also recorded in the
  // store of `c` (if not null).
  RefusalAudit(Coordinator* c, std::string caller) : c_(c), caller_(std::move(caller)) {}
  void Log(const char* method, const absl::Status& refused);

 private:
  Coordinator* const c_;
  const std::string caller_;
  absl::Mutex mu_;
  absl::Time last_line_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t not_logged_ ABSL_GUARDED_BY(mu_) = 0;
};

class JobServiceImpl final : public mesa::v1::JobService::Service {
 public:
  // `auth` null: every call is allowed (as the anonymous admin).
  JobServiceImpl(Coordinator* c, Metrics* m, StreamLimitOptions stream_limits,
                 const Authenticator* auth = nullptr)
      : c_(c), m_(m), streams_(stream_limits), auth_(auth) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const mesa::v1::SubmitJobRequest*,
                         mesa::v1::Job*) override;
  grpc::Status GetJob(grpc::ServerContext*, const mesa::v1::GetJobRequest*,
                      mesa::v1::Job*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const mesa::v1::ListJobsRequest*,
                        mesa::v1::ListJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const mesa::v1::CancelJobRequest*,
                         mesa::v1::Job*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const mesa::v1::WatchJobRequest*,
                        grpc::ServerWriter<mesa::v1::JobEvent>*) override;
  grpc::Status GetJobLogs(grpc::ServerContext*, const mesa::v1::GetJobLogsRequest*,
                          grpc::ServerWriter<mesa::v1::LogLine>*) override;
  grpc::Status ExplainJob(grpc::ServerContext*, const mesa::v1::ExplainJobRequest*,
                          mesa::v1::ExplainJobResponse*) override;
  grpc::Status ListAuditRecords(grpc::ServerContext*, const mesa::v1::ListAuditRecordsRequest*,
                                mesa::v1::ListAuditRecordsResponse*) override;

 private:
  grpc::Status Done(const char* method, const absl::Status& s);
  // Authenticates the caller, then runs `body(principal)` and counts its result, as the RPC's row
  // of the policy table says (rpc_policy.h): for an RPC that names a job, `job_id` over
  // kMaxJobIdBytes is refused first (without echoing it), the same for every such RPC.
  template <typename Body>
  grpc::Status Call(Rpc rpc, const grpc::ServerContext& ctx, Body body,
                    const std::string& job_id = "");
  // PERMISSION_DENIED unless `who` may read (or cancel) job `id`; NOT_FOUND for an unknown job.
  absl::Status CheckAccess(const Principal& who, const std::string& id, bool cancel);
  // Each open WatchJob/GetJobLogs stream holds a server thread; past the server's cap, or its
  // connection's, new ones are refused (RESOURCE_EXHAUSTED naming the quota), so watchers cannot
  // take the threads the workers' calls need, nor one connection every stream slot. The one place
  // every stream takes its slot.
  absl::StatusOr<StreamLimits::Slot> OpenStream(const grpc::ServerContext& ctx);
  Coordinator* c_;
  Metrics* m_;
  StreamLimits streams_;
  const Authenticator* auth_;
  RefusalAudit refusals_{c_, "(no valid token)"};
};

class WorkerServiceImpl final : public mesa::v1::WorkerService::Service {
 public:
  // `auth` null: every call is allowed.
  WorkerServiceImpl(Coordinator* c, Metrics* m, const Authenticator* auth = nullptr)
      : c_(c), m_(m), auth_(auth) {}
  grpc::Status RegisterWorker(grpc::ServerContext*, const mesa::v1::RegisterWorkerRequest*,
                              mesa::v1::RegisterWorkerResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const mesa::v1::HeartbeatRequest*,
                         mesa::v1::HeartbeatResponse*) override;
  grpc::Status UpdateAttempt(grpc::ServerContext*, const mesa::v1::UpdateAttemptRequest*,
                             mesa::v1::UpdateAttemptResponse*) override;
  grpc::Status PutRendezvous(grpc::ServerContext*, const mesa::v1::PutRendezvousRequest*,
                             mesa::v1::PutRendezvousResponse*) override;
  grpc::Status GetRendezvous(grpc::ServerContext*, const mesa::v1::GetRendezvousRequest*,
                             mesa::v1::GetRendezvousResponse*) override;
  grpc::Status DeregisterWorker(grpc::ServerContext*, const mesa::v1::DeregisterWorkerRequest*,
                                mesa::v1::DeregisterWorkerResponse*) override;
  grpc::Status DrainSelf(grpc::ServerContext*, const mesa::v1::DrainSelfRequest*,
                         mesa::v1::DrainSelfResponse*) override;
  grpc::Status UncordonSelf(grpc::ServerContext*, const mesa::v1::UncordonSelfRequest*,
                            mesa::v1::UncordonSelfResponse*) override;

 private:
  grpc::Status Done(const char* method, const absl::Status& s);
  // Checks the caller's client certificate (when required) and that it names `worker_id`, then
  // runs `body(subject)`; audits as the RPC's row of the policy table says (rpc_policy.h).
  template <typename Body>
  grpc::Status Call(Rpc rpc, const grpc::ServerContext& ctx, const std::string& worker_id,
                    Body body);
  Coordinator* c_;
  Metrics* m_;
  const Authenticator* auth_;
  RefusalAudit refusals_{c_, "(no client certificate)"};
};

// Transport credentials and authentication of a Server; the default is plaintext with neither
// tokens nor client certificates (tests, loopback development).
struct ServerSecurityOptions {
  std::shared_ptr<grpc::ServerCredentials> credentials;  // null: plaintext
  std::shared_ptr<const Authenticator> authenticator;    // null: every call allowed
};

// Both services on one port, with grpc.health.v1 and server reflection.
class Server {
 public:
  // `address` like "127.0.0.1:0"; the bound port is available from port(). A non-empty
  // `health_address` also serves grpc.health.v1 alone there in plaintext, for probes that speak
  // no TLS (the kubelet's gRPC probe); it reveals nothing but the serving status.
  static absl::StatusOr<std::unique_ptr<Server>> Start(const std::string& address,
                                                       Coordinator* coordinator, Metrics* metrics,
                                                       StreamLimitOptions stream_limits = {},
                                                       ServerSecurityOptions security = {},
                                                       const std::string& health_address = "");
  ~Server();
  int port() const { return port_; }
  int health_port() const { return health_port_; }  // 0 without a health address
  // Stops accepting RPCs and waits (bounded by `deadline`) for those in flight.
  void Shutdown(absl::Duration deadline = absl::Seconds(5));

 private:
  Server(Coordinator* c, Metrics* m, StreamLimitOptions stream_limits,
         ServerSecurityOptions security)
      : security_(std::move(security)),
        job_service_(c, m, stream_limits, security_.authenticator.get()),
        worker_service_(c, m, security_.authenticator.get()),
        cluster_service_(c, m, security_.authenticator.get()) {}
  ServerSecurityOptions security_;
  JobServiceImpl job_service_;
  WorkerServiceImpl worker_service_;
  ClusterServiceImpl cluster_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> health_server_;
  int port_ = 0;
  int health_port_ = 0;
  bool shut_down_ = false;
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_SERVICE_H_
