#include "cli/client.h"

#include "base/grpc_target.h"

#include <chrono>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "proto/api_limits.h"
#include "security/tls.h"

namespace mesa::cli {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

constexpr absl::string_view kBadRequestType = "type.googleapis.com/google.rpc.BadRequest";

// Calls `on_field(number, bytes)` for each length-delimited field of a serialized message, skipping
// the rest. The generated google.rpc types are not installed on Debian, and a few nested fields
// are all mesactl needs.
bool ForEachBytesField(const std::string& data,
                       const std::function<void(int, const std::string&)>& on_field) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(data.data()), static_cast<int>(data.size()));
  while (true) {
    uint32_t tag = in.ReadTag();
    if (tag == 0) return true;
    if (WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      std::string value;
      if (!WireFormatLite::ReadBytes(&in, &value)) return false;
      on_field(WireFormatLite::GetTagFieldNumber(tag), value);
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return false;
    }
  }
}

}  // namespace

std::vector<std::string> DecodeFieldViolations(const std::string& status_details) {
  std::vector<std::string> violations;
  // google.rpc.Status { repeated google.protobuf.Any details = 3; }
  ForEachBytesField(status_details, [&](int number, const std::string& any) {
    if (number != 3) return;
    std::string type_url, value;
    ForEachBytesField(any, [&](int n, const std::string& v) {
      if (n == 1) type_url = v;
      if (n == 2) value = v;
    });
    if (type_url != kBadRequestType) return;
    // BadRequest { repeated FieldViolation field_violations = 1; }
    // FieldViolation { string field = 1; string description = 2; }
    ForEachBytesField(value, [&](int n, const std::string& violation) {
      if (n != 1) return;
      std::string field, description;
      ForEachBytesField(violation, [&](int m, const std::string& v) {
        if (m == 1) field = v;
        if (m == 2) description = v;
      });
      violations.push_back(description.empty() ? field : absl::StrCat(field, ": ", description));
    });
  });
  return violations;
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  std::string message = status.error_message();
  if (status.error_code() == grpc::StatusCode::INTERNAL && message.empty()) {
    // What gRPC's C++ server answers when protobuf cannot parse the request, before any server
    // code runs (newer coordinators answer INVALID_ARGUMENT naming the field instead).
    message =
        "the server could not parse the request (INTERNAL without a message); the usual cause is "
        "a text field holding bytes that are not UTF-8";
  }
  for (const std::string& v : DecodeFieldViolations(status.error_details())) {
    // Servers often repeat the violation in the message; say it once.
    if (message.find(v) == std::string::npos) absl::StrAppend(&message, "; field ", v);
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), message);
}

std::string StatusCodeName(absl::StatusCode code) {
  std::string name = absl::StatusCodeToString(code);
  for (char& c : name) c = c == ' ' ? '_' : static_cast<char>(std::toupper(c));
  return name;
}

JobClient::JobClient(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout,
                     std::string token)
    : channel_(std::move(channel)),
      stub_(mesa::v1::JobService::NewStub(channel_)),
      cluster_stub_(mesa::v1::ClusterService::NewStub(channel_)),
      timeout_(timeout),
      token_(std::move(token)) {}

std::shared_ptr<grpc::Channel> JobClient::OpenChannel(
    const std::string& server, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  // Whatever the coordinator may send (a job with a large result), not gRPC's 4 MiB default.
  args.SetMaxReceiveMessageSize(kMaxResponseBytes);
  base::SetCoordinatorClientArgs(args, server);
  // Replicated coordinators' addresses (IP:port,...): one channel over all; Connect checks.
  const absl::StatusOr<std::string> target = base::CoordinatorTarget(server);
  return grpc::CreateCustomChannel(target.ok() ? *target : server, credentials, args);
}

std::unique_ptr<JobClient> JobClient::Connect(const std::string& server, absl::Duration timeout) {
  return std::make_unique<JobClient>(OpenChannel(server, grpc::InsecureChannelCredentials()),
                                     timeout);
}

absl::StatusOr<std::unique_ptr<JobClient>> JobClient::Connect(const std::string& server,
                                                              absl::Duration timeout,
                                                              const ConnectOptions& options) {
  // A token read from a file or `$(cat file)` often ends in a newline (CRLF on some editors):
  // those ends are not the token. Inside it, a control or non-ASCII byte cannot be sent as an
  // HTTP/2 header at all (gRPC aborts the process on one), so it is refused here, never echoed.
  if (absl::StatusOr<std::string> target = base::CoordinatorTarget(server); !target.ok()) {
    return target.status();
  }
  const std::string token(absl::StripAsciiWhitespace(options.token));
  for (size_t i = 0; i < token.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat("the bearer token (--token, MESA_TOKEN or the context's) has a ",
                       c >= 0x80 ? "non-ASCII" : (c == ' ' ? "space" : "control"),
                       " character at byte ", i + 1, " of ", token.size(),
                       "; a token is printable ASCII without spaces: check the file it came from"));
    }
  }
  if (!token.empty() && options.ca.empty() && !security::IsLoopbackAddress(server)) {
    // Whoever listens at that address would read the token.
    return absl::InvalidArgumentError(
        absl::StrCat("refusing to send a token in plaintext to ", server,
                     ", which is not a loopback address: pass --ca (or set MESA_CA) with the CA "
                     "of the coordinator's TLS certificate"));
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      security::ChannelCredentialsFromFiles({.ca = options.ca});
  if (!credentials.ok()) return credentials.status();
  return std::make_unique<JobClient>(OpenChannel(server, *credentials), timeout, token);
}

void JobClient::Authorize(grpc::ClientContext& context) const {
  if (!token_.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", token_));
}

void JobClient::SetDeadline(grpc::ClientContext& context) const {
  if (timeout_ > absl::ZeroDuration() && timeout_ != absl::InfiniteDuration()) {
    context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout_));
  }
}

absl::StatusOr<mesa::v1::Job> JobClient::Submit(const mesa::v1::JobSpec& spec,
                                                const std::string& client_job_id) {
  mesa::v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  request.set_client_job_id(client_job_id);
  return Unary(&mesa::v1::JobService::Stub::SubmitJob, request);
}

absl::StatusOr<mesa::v1::Job> JobClient::Get(const std::string& id) {
  mesa::v1::GetJobRequest request;
  request.set_id(id);
  return Unary(&mesa::v1::JobService::Stub::GetJob, request);
}

absl::StatusOr<std::vector<mesa::v1::Job>> JobClient::List(mesa::v1::ListJobsRequest request,
                                                           int limit, bool* truncated) {
  std::vector<mesa::v1::Job> jobs;
  if (truncated != nullptr) *truncated = false;
  while (true) {
    if (limit > 0) {
      int want = limit - static_cast<int>(jobs.size());
      if (request.page_size() == 0 || request.page_size() > want) request.set_page_size(want);
    }
    grpc::ClientContext context;
    SetDeadline(context);
    Authorize(context);
    mesa::v1::ListJobsResponse response;
    grpc::Status status = stub_->ListJobs(&context, request, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    for (auto& job : *response.mutable_jobs()) {
      if (limit > 0 && static_cast<int>(jobs.size()) >= limit) {
        if (truncated != nullptr) *truncated = true;
        break;
      }
      jobs.push_back(std::move(job));
    }
    if (response.next_page_token().empty()) break;
    if (limit > 0 && static_cast<int>(jobs.size()) >= limit) {
      if (truncated != nullptr) *truncated = true;
      break;
    }
    if (response.next_page_token() == request.page_token()) {
      return absl::InternalError("server returned the same page token twice");
    }
    request.set_page_token(response.next_page_token());
  }
  return jobs;
}

absl::StatusOr<mesa::v1::Job> JobClient::Cancel(const std::string& id, const std::string& reason) {
  mesa::v1::CancelJobRequest request;
  request.set_id(id);
  request.set_reason(reason);
  return Unary(&mesa::v1::JobService::Stub::CancelJob, request);
}

absl::StatusOr<mesa::v1::ExplainJobResponse> JobClient::Explain(const std::string& id) {
  mesa::v1::ExplainJobRequest request;
  request.set_id(id);
  return Unary(&mesa::v1::JobService::Stub::ExplainJob, request);
}

absl::StatusOr<mesa::v1::ListWorkersResponse> JobClient::ListWorkers() {
  return UnaryOn(*cluster_stub_, &mesa::v1::ClusterService::Stub::ListWorkers,
                 mesa::v1::ListWorkersRequest());
}

absl::StatusOr<mesa::v1::WorkerInfo> JobClient::DrainWorker(const std::string& id, bool evict) {
  mesa::v1::DrainWorkerRequest request;
  request.set_id(id);
  request.set_evict(evict);
  return UnaryOn(*cluster_stub_, &mesa::v1::ClusterService::Stub::DrainWorker, request);
}

absl::StatusOr<mesa::v1::WorkerInfo> JobClient::UncordonWorker(const std::string& id) {
  mesa::v1::UncordonWorkerRequest request;
  request.set_id(id);
  return UnaryOn(*cluster_stub_, &mesa::v1::ClusterService::Stub::UncordonWorker, request);
}

absl::Status JobClient::ForgetWorker(const std::string& id) {
  mesa::v1::ForgetWorkerRequest request;
  request.set_id(id);
  return UnaryOn(*cluster_stub_, &mesa::v1::ClusterService::Stub::ForgetWorker, request).status();
}

absl::StatusOr<mesa::v1::VersionInfo> JobClient::ServerVersion() {
  return UnaryOn(*cluster_stub_, &mesa::v1::ClusterService::Stub::GetVersion,
                 mesa::v1::GetVersionRequest());
}

absl::StatusOr<std::vector<mesa::v1::AuditRecord>> JobClient::Audit(const std::string& caller,
                                                                    const std::string& target,
                                                                    int limit) {
  std::vector<mesa::v1::AuditRecord> out;
  mesa::v1::ListAuditRecordsRequest request;
  request.set_caller(caller);
  request.set_target(target);
  while (limit == 0 || static_cast<int>(out.size()) < limit) {
    request.set_limit(limit == 0 ? 0 : limit - static_cast<int>(out.size()));
    absl::StatusOr<mesa::v1::ListAuditRecordsResponse> page =
        Unary(&mesa::v1::JobService::Stub::ListAuditRecords, request);
    if (!page.ok()) return page.status();
    if (page->records().empty()) break;
    for (const auto& r : page->records()) out.push_back(r);
    request.set_after_id(page->records().rbegin()->id());
  }
  return out;
}

namespace {

// Reads a server stream until it ends or `on_item` returns false (then the call is cancelled and
// counts as a success: the caller chose to stop).
template <typename Item>
absl::Status ReadStream(grpc::ClientContext& context, grpc::ClientReader<Item>& reader,
                        const std::function<bool(const Item&)>& on_item) {
  Item item;
  while (reader.Read(&item)) {
    if (!on_item(item)) {
      context.TryCancel();
      reader.Finish();
      return absl::OkStatus();
    }
  }
  return FromGrpcStatus(reader.Finish());
}

}  // namespace

absl::Status JobClient::Watch(const std::string& id, int64_t from_sequence,
                              const std::function<bool(const mesa::v1::JobEvent&)>& on_event) {
  mesa::v1::WatchJobRequest request;
  request.set_id(id);
  request.set_from_sequence(from_sequence);
  grpc::ClientContext context;
  Authorize(context);
  auto reader = stub_->WatchJob(&context, request);
  return ReadStream(context, *reader, on_event);
}

absl::Status JobClient::Logs(const std::string& id, int64_t from_sequence, bool follow,
                             const std::function<bool(const mesa::v1::LogLine&)>& on_line) {
  mesa::v1::GetJobLogsRequest request;
  request.set_id(id);
  request.set_from_sequence(from_sequence);
  request.set_follow(follow);
  grpc::ClientContext context;
  if (!follow) SetDeadline(context);
  Authorize(context);
  auto reader = stub_->GetJobLogs(&context, request);
  return ReadStream(context, *reader, on_line);
}

}  // namespace mesa::cli
