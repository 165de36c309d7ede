#include "coordinator/service.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "coordinator/request_parse_errors.h"
#include "coordinator/validation.h"
#include "google/protobuf/util/time_util.h"
#include "grpc/compression.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/api_limits.h"

namespace mesa::coordinator {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

namespace {

template <typename T>
absl::Status Unwrap(absl::StatusOr<T> r, T* out) {
  if (!r.ok()) return r.status();
  *out = std::move(*r);
  return absl::OkStatus();
}

// Counts the call's outcome (if there are metrics) and converts it for gRPC.
grpc::Status CountedRpc(Metrics* m, const char* method, const absl::Status& s) {
  if (m != nullptr) m->CountRpc(method, absl::StatusCodeToString(s.code()));
  return ToGrpc(s);
}

}  // namespace

// One structured line per mutating call: who, what, on which job or worker, and the outcome;
// the same record goes into the store (`c` not null). Never holds a token.
void Audit(Coordinator* c, absl::string_view method, absl::string_view who,
           absl::string_view target, const absl::Status& result) {
  std::string line = absl::StrCat(
      "audit: time=", absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()),
      " method=", method, " caller=\"", absl::CEscape(who), "\" target=\"", absl::CEscape(target),
      "\" result=", absl::StatusCodeToString(result.code()));
  if (!result.ok()) absl::StrAppend(&line, " message=\"", absl::CEscape(result.message()), "\"");
  std::fprintf(stderr, "%s\n", line.c_str());
  if (c == nullptr) return;
  absl::Status stored = c->RecordAudit({.method = std::string(method),
                                        .caller = std::string(who),
                                        .target = std::string(target),
                                        .result = absl::StatusCodeToString(result.code()),
                                        .message = std::string(result.message())});
  if (!stored.ok()) {
    std::fprintf(stderr, "audit: not stored: %s\n", stored.ToString().c_str());
  }
}

namespace {

// At most this many audit records per ListAuditRecords call.
constexpr int kMaxAuditRecordsPerCall = 1000;
}  // namespace

void RefusalAudit::Log(const char* method, const absl::Status& refused) {
  int64_t not_logged = 0;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (now - last_line_ < absl::Seconds(1)) {
      ++not_logged_;
      return;
    }
    last_line_ = now;
    not_logged = std::exchange(not_logged_, 0);
  }
  Audit(c_, method,
        not_logged == 0
            ? caller_
            : absl::StrCat(caller_, "; ", not_logged, " more refused calls since the last line"),
        "", refused);
}

grpc::Status JobServiceImpl::Done(const char* method, const absl::Status& s) {
  return CountedRpc(m_, method, s);
}

template <typename Body>
grpc::Status JobServiceImpl::Call(Rpc rpc, const grpc::ServerContext& ctx, Body body,
                                  const std::string& job_id) {
  const RpcPolicy& policy = PolicyOf(rpc);
  absl::StatusOr<Principal> who =
      auth_ == nullptr ? Principal{"anonymous", Role::kAdmin} : auth_->AuthenticateUser(ctx);
  if (!who.ok()) {
    if (policy.audit_unauthenticated) refusals_.Log(policy.method, who.status());
    return Done(policy.method, who.status());
  }
  if (policy.names_job) {
    if (absl::Status s = CheckJobIdField("id", job_id); !s.ok()) return Done(policy.method, s);
  }
  return Done(policy.method, body(*who));
}

absl::Status JobServiceImpl::CheckAccess(const Principal& who, const std::string& id, bool cancel) {
  // Admins may do everything, viewers read everything: no lookup needed for those.
  if (who.role == Role::kAdmin || (who.role == Role::kViewer && !cancel)) return absl::OkStatus();
  std::string owner;
  if (who.role == Role::kUser) {
    absl::StatusOr<mesa::v1::Job> job = c_->GetJob(id);
    if (!job.ok()) return job.status();
    owner = job->owner();
  }
  return cancel ? CheckMayCancel(who, id, owner) : CheckMayRead(who, id, owner);
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* ctx,
                                       const mesa::v1::SubmitJobRequest* req, mesa::v1::Job* resp) {
  return Call(Rpc::kSubmitJob, *ctx, [&](const Principal& who) {
    absl::Status s = CheckMaySubmit(who);
    // Without a tokens file nobody is authenticated, and jobs have no owner.
    const bool users = auth_ != nullptr && auth_->tokens_required();
    if (s.ok()) {
      s = Unwrap(c_->SubmitJob(*req, users ? who.name : "", who.role == Role::kAdmin), resp);
    }
    if (m_ != nullptr) m_->CountSubmission(absl::StatusCodeToString(s.code()));
    Audit(c_, PolicyOf(Rpc::kSubmitJob).method, who.name, s.ok() ? resp->id() : "", s);
    return s;
  });
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* ctx, const mesa::v1::GetJobRequest* req,
                                    mesa::v1::Job* resp) {
  return Call(
      Rpc::kGetJob, *ctx,
      [&](const Principal& who) {
        absl::Status s = Unwrap(c_->GetJob(req->id()), resp);
        if (s.ok()) s = CheckMayRead(who, req->id(), resp->owner());
        if (!s.ok()) resp->Clear();
        return s;
      },
      req->id());
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* ctx,
                                      const mesa::v1::ListJobsRequest* req,
                                      mesa::v1::ListJobsResponse* resp) {
  return Call(Rpc::kListJobs, *ctx, [&](const Principal& who) {
    return Unwrap(c_->ListJobs(*req, ListFilter(who)), resp);
  });
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* ctx,
                                       const mesa::v1::CancelJobRequest* req, mesa::v1::Job* resp) {
  return Call(
      Rpc::kCancelJob, *ctx,
      [&](const Principal& who) {
        absl::Status s = CheckAccess(who, req->id(), /*cancel=*/true);
        if (s.ok()) s = Unwrap(c_->CancelJob(*req), resp);
        Audit(c_, PolicyOf(Rpc::kCancelJob).method, who.name, req->id(), s);
        return s;
      },
      req->id());
}

absl::StatusOr<StreamLimits::Slot> JobServiceImpl::OpenStream(const grpc::ServerContext& ctx) {
  // peer() names the client's end of the TCP connection ("ipv4:10.1.2.3:51234"): one value per
  // connection, shared by the streams multiplexed on it.
  return streams_.Open(ctx.peer());
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx,
                                      const mesa::v1::WatchJobRequest* req,
                                      grpc::ServerWriter<mesa::v1::JobEvent>* writer) {
  return Call(
      Rpc::kWatchJob, *ctx,
      [&](const Principal& who) {
        if (absl::Status s = CheckAccess(who, req->id(), /*cancel=*/false); !s.ok()) return s;
        absl::StatusOr<StreamLimits::Slot> slot = OpenStream(*ctx);
        if (!slot.ok()) return slot.status();
        return c_->WatchJob(
            *req, [&](const mesa::v1::JobEvent& e) { return writer->Write(e); },
            [&] { return ctx->IsCancelled(); });
      },
      req->id());
}

grpc::Status JobServiceImpl::GetJobLogs(grpc::ServerContext* ctx,
                                        const mesa::v1::GetJobLogsRequest* req,
                                        grpc::ServerWriter<mesa::v1::LogLine>* writer) {
  return Call(
      Rpc::kGetJobLogs, *ctx,
      [&](const Principal& who) {
        if (absl::Status s = CheckAccess(who, req->id(), /*cancel=*/false); !s.ok()) return s;
        absl::StatusOr<StreamLimits::Slot> slot = OpenStream(*ctx);
        if (!slot.ok()) return slot.status();
        return c_->GetJobLogs(
            *req, [&](const mesa::v1::LogLine& l) { return writer->Write(l); },
            [&] { return ctx->IsCancelled(); });
      },
      req->id());
}

grpc::Status JobServiceImpl::ExplainJob(grpc::ServerContext* ctx,
                                        const mesa::v1::ExplainJobRequest* req,
                                        mesa::v1::ExplainJobResponse* resp) {
  return Call(
      Rpc::kExplainJob, *ctx,
      [&](const Principal& who) {
        if (absl::Status s = CheckAccess(who, req->id(), /*cancel=*/false); !s.ok()) return s;
        return Unwrap(c_->ExplainJob(*req), resp);
      },
      req->id());
}

grpc::Status JobServiceImpl::ListAuditRecords(grpc::ServerContext* ctx,
                                              const mesa::v1::ListAuditRecordsRequest* req,
                                              mesa::v1::ListAuditRecordsResponse* resp) {
  return Call(Rpc::kListAuditRecords, *ctx, [&](const Principal& who) -> absl::Status {
    if (absl::Status s = CheckMayReadAudit(who); !s.ok()) return s;
    if (req->limit() < 0 || req->after_id() < 0) {
      return absl::InvalidArgumentError("limit and after_id must be >= 0");
    }
    const int limit = req->limit() == 0 ? kMaxAuditRecordsPerCall
                                        : std::min(req->limit(), kMaxAuditRecordsPerCall);
    absl::StatusOr<std::vector<AuditRow>> rows =
        c_->ReadAudit(req->after_id(), limit, req->caller(), req->target());
    if (!rows.ok()) return rows.status();
    for (const AuditRow& row : *rows) {
      mesa::v1::AuditRecord* r = resp->add_records();
      r->set_id(row.id);
      *r->mutable_time() =
          google::protobuf::util::TimeUtil::MillisecondsToTimestamp(row.time_unix_ms);
      r->set_method(row.method);
      r->set_caller(row.caller);
      r->set_target(row.target);
      r->set_result(row.result);
      r->set_message(row.message);
    }
    return absl::OkStatus();
  });
}

grpc::Status WorkerServiceImpl::Done(const char* method, const absl::Status& s) {
  return CountedRpc(m_, method, s);
}

template <typename Body>
grpc::Status WorkerServiceImpl::Call(Rpc rpc, const grpc::ServerContext& ctx,
                                     const std::string& worker_id, Body body) {
  const RpcPolicy& policy = PolicyOf(rpc);
  if (auth_ == nullptr) return Done(policy.method, body(std::string("anonymous")));
  absl::StatusOr<WorkerPeer> who = auth_->AuthenticateWorker(ctx);
  if (!who.ok()) {
    if (policy.audit_unauthenticated) refusals_.Log(policy.method, who.status());
    return Done(policy.method, who.status());
  }
  if (absl::Status bound = auth_->CheckWorkerId(*who, worker_id); !bound.ok()) {
    // Registrations are audited whatever their result; the other calls of a worker holding
    // another's certificate fail the same way without filling the audit table.
    if (policy.audit_wrong_worker) Audit(c_, policy.method, who->subject, worker_id, bound);
    return Done(policy.method, bound);
  }
  return Done(policy.method, body(who->subject));
}

grpc::Status WorkerServiceImpl::RegisterWorker(grpc::ServerContext* ctx,
                                               const mesa::v1::RegisterWorkerRequest* req,
                                               mesa::v1::RegisterWorkerResponse* resp) {
  return Call(Rpc::kRegisterWorker, *ctx, req->worker_id(), [&](const std::string& who) {
    absl::Status s = Unwrap(c_->RegisterWorker(*req), resp);
    Audit(c_, PolicyOf(Rpc::kRegisterWorker).method, who, req->worker_id(), s);
    return s;
  });
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext* ctx,
                                          const mesa::v1::HeartbeatRequest* req,
                                          mesa::v1::HeartbeatResponse* resp) {
  return Call(Rpc::kHeartbeat, *ctx, req->worker_id(), [&](const std::string&) {
    return Unwrap(c_->Heartbeat(*req, [ctx] { return ctx->IsCancelled(); }), resp);
  });
}

grpc::Status WorkerServiceImpl::UpdateAttempt(grpc::ServerContext* ctx,
                                              const mesa::v1::UpdateAttemptRequest* req,
                                              mesa::v1::UpdateAttemptResponse* resp) {
  return Call(Rpc::kUpdateAttempt, *ctx, req->worker_id(),
              [&](const std::string&) { return Unwrap(c_->UpdateAttempt(*req), resp); });
}

grpc::Status WorkerServiceImpl::PutRendezvous(grpc::ServerContext* ctx,
                                              const mesa::v1::PutRendezvousRequest* req,
                                              mesa::v1::PutRendezvousResponse*) {
  return Call(Rpc::kPutRendezvous, *ctx, req->worker_id(),
              [&](const std::string&) { return c_->PutRendezvous(*req); });
}

grpc::Status WorkerServiceImpl::GetRendezvous(grpc::ServerContext* ctx,
                                              const mesa::v1::GetRendezvousRequest* req,
                                              mesa::v1::GetRendezvousResponse* resp) {
  return Call(Rpc::kGetRendezvous, *ctx, req->worker_id(), [&](const std::string&) {
    return Unwrap(c_->GetRendezvous(*req, [ctx] { return ctx->IsCancelled(); }), resp);
  });
}

grpc::Status WorkerServiceImpl::DeregisterWorker(grpc::ServerContext* ctx,
                                                 const mesa::v1::DeregisterWorkerRequest* req,
                                                 mesa::v1::DeregisterWorkerResponse*) {
  return Call(Rpc::kDeregisterWorker, *ctx, req->worker_id(), [&](const std::string& who) {
    absl::Status s = c_->DeregisterWorker(*req);
    Audit(c_, PolicyOf(Rpc::kDeregisterWorker).method, who, req->worker_id(), s);
    return s;
  });
}

grpc::Status WorkerServiceImpl::DrainSelf(grpc::ServerContext* ctx,
                                          const mesa::v1::DrainSelfRequest* req,
                                          mesa::v1::DrainSelfResponse* resp) {
  return Call(Rpc::kDrainSelf, *ctx, req->worker_id(), [&](const std::string& who) {
    auto info = c_->DrainSelf(*req);
    Audit(c_, PolicyOf(Rpc::kDrainSelf).method, who, req->worker_id(), info.status());
    if (info.ok()) *resp->mutable_worker() = std::move(*info);
    return info.status();
  });
}

grpc::Status WorkerServiceImpl::UncordonSelf(grpc::ServerContext* ctx,
                                             const mesa::v1::UncordonSelfRequest* req,
                                             mesa::v1::UncordonSelfResponse* resp) {
  return Call(Rpc::kUncordonSelf, *ctx, req->worker_id(), [&](const std::string& who) {
    auto info = c_->UncordonSelf(*req);
    Audit(c_, PolicyOf(Rpc::kUncordonSelf).method, who, req->worker_id(), info.status());
    if (info.ok()) *resp->mutable_worker() = std::move(*info);
    return info.status();
  });
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const std::string& address,
                                                      Coordinator* coordinator, Metrics* metrics,
                                                      StreamLimitOptions stream_limits,
                                                      ServerSecurityOptions security,
                                                      const std::string& health_address) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<Server> s(new Server(coordinator, metrics, stream_limits, std::move(security)));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address,
                           s->security_.credentials != nullptr ? s->security_.credentials
                                                               : grpc::InsecureServerCredentials(),
                           &s->port_);
  builder.RegisterService(&s->job_service_);
  builder.RegisterService(&s->worker_service_);
  builder.RegisterService(&s->cluster_service_);
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.SetMaxSendMessageSize(kMaxResponseBytes);
  // No compressed requests: gRPC inflates a compressed message whole before it checks the size, so
  // a 1 MB gzip body could cost a GiB of memory before authentication. A request that names gzip
  // or deflate ends UNIMPLEMENTED on its headers, before its message is read.
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_DEFLATE, false);
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);
  // Idle connections are closed; a TLS handshake that does not finish is given up.
  const int idle_ms = static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(stream_limits.idle_connection_timeout), 1 << 30));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, idle_ms);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, std::min(idle_ms, 30000));
  // Clients' keepalive pings (proto/api_limits.h) are welcome, also between calls.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             kServerMinPingIntervalMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // A request protobuf cannot parse (a string field that is not UTF-8) ends INVALID_ARGUMENT
  // naming the field, instead of gRPC's INTERNAL with an empty message.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(UnparseableRequestInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  if (!health_address.empty()) {
    // A server with no service of its own gets only gRPC's default health service (enabled
    // above), so this port answers Check/Watch and nothing that needs a credential.
    grpc::ServerBuilder health;
    health.AddListeningPort(health_address, grpc::InsecureServerCredentials(), &s->health_port_);
    s->health_server_ = health.BuildAndStart();
    if (s->health_server_ == nullptr || s->health_port_ == 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", health_address));
    }
  }
  return s;
}

void Server::Shutdown(absl::Duration deadline) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  const auto until = std::chrono::system_clock::now() +
                     std::chrono::milliseconds(absl::ToInt64Milliseconds(deadline));
  // Probes see the coordinator go away first: it is about to stop answering.
  if (health_server_ != nullptr) {
    health_server_->GetHealthCheckService()->SetServingStatus(false);
    health_server_->Shutdown(until);
    health_server_->Wait();
  }
  server_->Shutdown(until);
  server_->Wait();
}

Server::~Server() { Shutdown(); }

}  // namespace mesa::coordinator
