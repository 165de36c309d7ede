#include "coordinator/cluster_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/version.h"
#include "coordinator/service.h"

namespace mesa::coordinator {
namespace {

template <typename T>
absl::Status Unwrap(absl::StatusOr<T> r, T* out) {
  if (!r.ok()) return r.status();
  *out = std::move(*r);
  return absl::OkStatus();
}

}  // namespace

template <typename Body>
grpc::Status ClusterServiceImpl::Call(Rpc rpc, const grpc::ServerContext& ctx,
                                      const std::string& target, Body body) {
  const RpcPolicy& policy = PolicyOf(rpc);
  absl::StatusOr<Principal> who =
      auth_ == nullptr ? Principal{"anonymous", Role::kAdmin} : auth_->AuthenticateUser(ctx);
  absl::Status s;
  if (!who.ok()) {
    s = who.status();
  } else if (policy.admins_only && who->role != Role::kAdmin) {
    s = absl::PermissionDeniedError(absl::StrCat(RoleName(who->role), " ", who->name, " may not ",
                                                 policy.method, " (admins only)"));
  } else {
    s = body();
  }
  if (policy.admins_only) {
    Audit(c_, policy.method, who.ok() ? who->name : "(no valid token)", target, s);
  }
  if (m_ != nullptr) m_->CountRpc(policy.method, absl::StatusCodeToString(s.code()));
  return ToGrpc(s);
}

grpc::Status ClusterServiceImpl::ListWorkers(grpc::ServerContext* ctx,
                                             const mesa::v1::ListWorkersRequest*,
                                             mesa::v1::ListWorkersResponse* resp) {
  return Call(Rpc::kListWorkers, *ctx, "", [&] { return Unwrap(c_->ListWorkers(), resp); });
}

grpc::Status ClusterServiceImpl::DrainWorker(grpc::ServerContext* ctx,
                                             const mesa::v1::DrainWorkerRequest* req,
                                             mesa::v1::WorkerInfo* resp) {
  return Call(Rpc::kDrainWorker, *ctx, req->id(),
              [&] { return Unwrap(c_->SetWorkerDraining(req->id(), true, req->evict()), resp); });
}

grpc::Status ClusterServiceImpl::UncordonWorker(grpc::ServerContext* ctx,
                                                const mesa::v1::UncordonWorkerRequest* req,
                                                mesa::v1::WorkerInfo* resp) {
  return Call(Rpc::kUncordonWorker, *ctx, req->id(),
              [&] { return Unwrap(c_->SetWorkerDraining(req->id(), false), resp); });
}

grpc::Status ClusterServiceImpl::ForgetWorker(grpc::ServerContext* ctx,
                                              const mesa::v1::ForgetWorkerRequest* req,
                                              mesa::v1::ForgetWorkerResponse*) {
  return Call(Rpc::kForgetWorker, *ctx, req->id(), [&] { return c_->ForgetWorker(req->id()); });
}

grpc::Status ClusterServiceImpl::GetVersion(grpc::ServerContext* ctx,
                                            const mesa::v1::GetVersionRequest*,
                                            mesa::v1::VersionInfo* resp) {
  return Call(Rpc::kGetVersion, *ctx, "", [&] {
    resp->set_version(kVersion);
    resp->set_component("coordinator");
    return absl::OkStatus();
  });
}

}  // namespace mesa::coordinator
