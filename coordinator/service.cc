#include "coordinator/service.h"

#include <chrono>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "coordinator/request_parse_errors.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"

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

namespace {
absl::Status TooManyStreams(int max) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "at most ", max, " watch and log streams are open at once; close one or try again later"));
}
}  // namespace

grpc::Status JobServiceImpl::Done(const char* method, const absl::Status& s) {
  return CountedRpc(m_, method, s);
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext*, const mesa::v1::SubmitJobRequest* req,
                                       mesa::v1::Job* resp) {
  absl::Status s = Unwrap(c_->SubmitJob(*req), resp);
  if (m_ != nullptr) m_->CountSubmission(absl::StatusCodeToString(s.code()));
  return Done("SubmitJob", s);
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext*, const mesa::v1::GetJobRequest* req,
                                    mesa::v1::Job* resp) {
  return Done("GetJob", Unwrap(c_->GetJob(req->id()), resp));
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext*, const mesa::v1::ListJobsRequest* req,
                                      mesa::v1::ListJobsResponse* resp) {
  return Done("ListJobs", Unwrap(c_->ListJobs(*req), resp));
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext*, const mesa::v1::CancelJobRequest* req,
                                       mesa::v1::Job* resp) {
  return Done("CancelJob", Unwrap(c_->CancelJob(*req), resp));
}

bool JobServiceImpl::OpenStream() {
  if (open_streams_.fetch_add(1) < max_open_streams_) return true;
  open_streams_.fetch_sub(1);
  return false;
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx,
                                      const mesa::v1::WatchJobRequest* req,
                                      grpc::ServerWriter<mesa::v1::JobEvent>* writer) {
  if (!OpenStream()) return Done("WatchJob", TooManyStreams(max_open_streams_));
  absl::Cleanup close = [this] { open_streams_.fetch_sub(1); };
  absl::Status s = c_->WatchJob(
      *req, [&](const mesa::v1::JobEvent& e) { return writer->Write(e); },
      [&] { return ctx->IsCancelled(); });
  return Done("WatchJob", s);
}

grpc::Status JobServiceImpl::GetJobLogs(grpc::ServerContext* ctx,
                                        const mesa::v1::GetJobLogsRequest* req,
                                        grpc::ServerWriter<mesa::v1::LogLine>* writer) {
  if (!OpenStream()) return Done("GetJobLogs", TooManyStreams(max_open_streams_));
  absl::Cleanup close = [this] { open_streams_.fetch_sub(1); };
  absl::Status s = c_->GetJobLogs(
      *req, [&](const mesa::v1::LogLine& l) { return writer->Write(l); },
      [&] { return ctx->IsCancelled(); });
  return Done("GetJobLogs", s);
}

grpc::Status JobServiceImpl::ExplainJob(grpc::ServerContext*,
                                        const mesa::v1::ExplainJobRequest* req,
                                        mesa::v1::ExplainJobResponse* resp) {
  return Done("ExplainJob", Unwrap(c_->ExplainJob(*req), resp));
}

grpc::Status WorkerServiceImpl::Done(const char* method, const absl::Status& s) {
  return CountedRpc(m_, method, s);
}

grpc::Status WorkerServiceImpl::RegisterWorker(grpc::ServerContext*,
                                               const mesa::v1::RegisterWorkerRequest* req,
                                               mesa::v1::RegisterWorkerResponse* resp) {
  return Done("RegisterWorker", Unwrap(c_->RegisterWorker(*req), resp));
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext* ctx,
                                          const mesa::v1::HeartbeatRequest* req,
                                          mesa::v1::HeartbeatResponse* resp) {
  return Done("Heartbeat", Unwrap(c_->Heartbeat(*req, [ctx] { return ctx->IsCancelled(); }), resp));
}

grpc::Status WorkerServiceImpl::UpdateAttempt(grpc::ServerContext*,
                                              const mesa::v1::UpdateAttemptRequest* req,
                                              mesa::v1::UpdateAttemptResponse* resp) {
  return Done("UpdateAttempt", Unwrap(c_->UpdateAttempt(*req), resp));
}

grpc::Status WorkerServiceImpl::PutRendezvous(grpc::ServerContext*,
                                              const mesa::v1::PutRendezvousRequest* req,
                                              mesa::v1::PutRendezvousResponse*) {
  return Done("PutRendezvous", c_->PutRendezvous(*req));
}

grpc::Status WorkerServiceImpl::GetRendezvous(grpc::ServerContext* ctx,
                                              const mesa::v1::GetRendezvousRequest* req,
                                              mesa::v1::GetRendezvousResponse* resp) {
  return Done("GetRendezvous",
              Unwrap(c_->GetRendezvous(*req, [ctx] { return ctx->IsCancelled(); }), resp));
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const std::string& address,
                                                      Coordinator* coordinator, Metrics* metrics,
                                                      int max_open_streams) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<Server> s(new Server(coordinator, metrics, max_open_streams));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &s->port_);
  builder.RegisterService(&s->job_service_);
  builder.RegisterService(&s->worker_service_);
  builder.SetMaxReceiveMessageSize(16 << 20);
  // A request protobuf cannot parse (a string field that is not UTF-8) ends INVALID_ARGUMENT
  // naming the field, instead of gRPC's INTERNAL with an empty message.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(UnparseableRequestInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  return s;
}

void Server::Shutdown(absl::Duration deadline) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(absl::ToInt64Milliseconds(deadline)));
  server_->Wait();
}

Server::~Server() { Shutdown(); }

}  // namespace mesa::coordinator
