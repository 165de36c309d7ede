// A thin synchronous wrapper over mesa.v1.JobService for mesactl and tests: absl::Status errors
// (with google.rpc.BadRequest field violations folded into the message), per-call deadlines and
// streaming calls delivered to callbacks.

#ifndef MESANET_CLI_CLIENT_H_
#define MESANET_CLI_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "mesa/v1/cluster_service.grpc.pb.h"
#include "mesa/v1/job_service.grpc.pb.h"

namespace mesa::cli {

// Converts a gRPC status to an absl::Status with the same code. Field violations from a
// google.rpc.BadRequest in the rich error details are appended to the message as
// "; field <path>: <description>".
absl::Status FromGrpcStatus(const grpc::Status& status);

// Decodes google.rpc.Status bytes (grpc::Status::error_details()) and returns the
// BadRequest field violations it holds as "path: description" strings.
std::vector<std::string> DecodeFieldViolations(const std::string& status_details);

// "NOT_FOUND" for absl::StatusCode::kNotFound (gRPC's spelling).
std::string StatusCodeName(absl::StatusCode code);

// How mesactl reaches a coordinator (docs/security.md).
struct ConnectOptions {
  // CA file (PEM) that signed the coordinator's certificate: TLS when set, plaintext otherwise.
  std::string ca;
  // Bearer token sent with every call ("authorization: Bearer <token>"); empty: none.
  std::string token;
};

class JobClient {
 public:
  // `timeout` bounds each unary call (and connection setup); streams are unbounded.
  JobClient(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout, std::string token = "");
  // Plaintext, no token.
  static std::unique_ptr<JobClient> Connect(const std::string& server, absl::Duration timeout);
  // A channel to `server` that accepts responses up to kMaxResponseBytes (proto/api_limits.h).
  static std::shared_ptr<grpc::Channel> OpenChannel(
      const std::string& server, const std::shared_ptr<grpc::ChannelCredentials>& credentials);
  // Fails when the CA file cannot be read, and for a token without a CA to an address that is not
  // loopback (the token would travel in clear).
  static absl::StatusOr<std::unique_ptr<JobClient>> Connect(const std::string& server,
                                                            absl::Duration timeout,
                                                            const ConnectOptions& options);

  absl::StatusOr<mesa::v1::Job> Submit(const mesa::v1::JobSpec& spec,
                                       const std::string& client_job_id);
  absl::StatusOr<mesa::v1::Job> Get(const std::string& id);
  // Follows next_page_token until `limit` jobs (0 = all) are collected; `truncated` (if given)
  // says whether it stopped at the limit with more pages or jobs left on the server.
  absl::StatusOr<std::vector<mesa::v1::Job>> List(mesa::v1::ListJobsRequest request, int limit,
                                                  bool* truncated = nullptr);
  absl::StatusOr<mesa::v1::Job> Cancel(const std::string& id, const std::string& reason);
  absl::StatusOr<mesa::v1::ExplainJobResponse> Explain(const std::string& id);
  // Audit records (admins), oldest first, following after_id until `limit` (0 = all) are read.
  absl::StatusOr<std::vector<mesa::v1::AuditRecord>> Audit(const std::string& caller,
                                                           const std::string& target, int limit);

  // Streams the job's events after `from_sequence` to `on_event` until the server ends the
  // stream. Returning false from `on_event` cancels the stream (the result is then OK).
  absl::Status Watch(const std::string& id, int64_t from_sequence,
                     const std::function<bool(const mesa::v1::JobEvent&)>& on_event);
  absl::Status Logs(const std::string& id, int64_t from_sequence, bool follow,
                    const std::function<bool(const mesa::v1::LogLine&)>& on_line);

  // ClusterService (cluster operations).
  absl::StatusOr<mesa::v1::ListWorkersResponse> ListWorkers();
  absl::StatusOr<mesa::v1::WorkerInfo> DrainWorker(const std::string& id, bool evict = false);
  absl::StatusOr<mesa::v1::WorkerInfo> UncordonWorker(const std::string& id);
  absl::Status ForgetWorker(const std::string& id);
  absl::StatusOr<mesa::v1::VersionInfo> ServerVersion();

  mesa::v1::JobService::Stub& stub() { return *stub_; }

 private:
  void SetDeadline(grpc::ClientContext& context) const;
  // Adds the bearer token (if any) to the call's metadata.
  void Authorize(grpc::ClientContext& context) const;

  // One unary call with the client's deadline; gRPC errors become absl::Status.
  template <typename Request, typename Response>
  absl::StatusOr<Response> Unary(grpc::Status (mesa::v1::JobService::Stub::*method)(
                                     grpc::ClientContext*, const Request&, Response*),
                                 const Request& request) {
    return UnaryOn(*stub_, method, request);
  }
  template <typename Stub, typename Request, typename Response>
  absl::StatusOr<Response> UnaryOn(Stub& stub,
                                   grpc::Status (Stub::*method)(grpc::ClientContext*,
                                                                const Request&, Response*),
                                   const Request& request) {
    grpc::ClientContext context;
    SetDeadline(context);
    Authorize(context);
    Response response;
    grpc::Status status = (stub.*method)(&context, request, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    return response;
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<mesa::v1::JobService::Stub> stub_;
  std::unique_ptr<mesa::v1::ClusterService::Stub> cluster_stub_;
  absl::Duration timeout_;
  std::string token_;
};

}  // namespace mesa::cli

#endif  // MESANET_CLI_CLIENT_H_
