// gRPC adapter of mesa.v1.ClusterService (cluster operations: mesactl workers, drain, uncordon,
// forget, version) over a Coordinator. Callers authenticate like JobService callers; listing and
// the version are open to every role, the mutating calls to admins only, and those are audited
// like SubmitJob and CancelJob (refused ones too).
#ifndef MESANET_COORDINATOR_CLUSTER_SERVICE_H_
#define MESANET_COORDINATOR_CLUSTER_SERVICE_H_

#include <string>

#include "absl/status/status.h"
#include "coordinator/auth.h"
#include "coordinator/coordinator.h"
#include "coordinator/metrics.h"
#include "coordinator/rpc_policy.h"
#include "grpcpp/grpcpp.h"
#include "mesa/v1/cluster_service.grpc.pb.h"

namespace mesa::coordinator {

// One audit line and store record of a mutating call (service.cc).
void Audit(Coordinator* c, absl::string_view method, absl::string_view who,
           absl::string_view target, const absl::Status& result);

class ClusterServiceImpl final : public mesa::v1::ClusterService::Service {
 public:
  // `auth` null: every call is allowed (as the anonymous admin).
  ClusterServiceImpl(Coordinator* c, Metrics* m, const Authenticator* auth = nullptr)
      : c_(c), m_(m), auth_(auth) {}
  grpc::Status ListWorkers(grpc::ServerContext*, const mesa::v1::ListWorkersRequest*,
                           mesa::v1::ListWorkersResponse*) override;
  grpc::Status DrainWorker(grpc::ServerContext*, const mesa::v1::DrainWorkerRequest*,
                           mesa::v1::WorkerInfo*) override;
  grpc::Status UncordonWorker(grpc::ServerContext*, const mesa::v1::UncordonWorkerRequest*,
                              mesa::v1::WorkerInfo*) override;
  grpc::Status ForgetWorker(grpc::ServerContext*, const mesa::v1::ForgetWorkerRequest*,
                            mesa::v1::ForgetWorkerResponse*) override;
  grpc::Status GetVersion(grpc::ServerContext*, const mesa::v1::GetVersionRequest*,
                          mesa::v1::VersionInfo*) override;

 private:
  // Authenticates the caller; for an RPC its policy row says is for admins only, checks it is one
  // and audits the outcome with `target`. Then runs `body()` and counts its result.
  template <typename Body>
  grpc::Status Call(Rpc rpc, const grpc::ServerContext& ctx, const std::string& target, Body body);
  Coordinator* c_;
  Metrics* m_;
  const Authenticator* auth_;
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_CLUSTER_SERVICE_H_
