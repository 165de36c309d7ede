#include "coordinator/request_parse_errors.h"

#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "base/utf8.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/support/interceptor.h"
#include "grpcpp/support/status.h"

namespace mesa::coordinator {
namespace {

thread_local std::string utf8_error_field;
google::protobuf::LogHandler* previous_handler = nullptr;

void CapturingLogHandler(google::protobuf::LogLevel level, const char* filename, int line,
                         const std::string& message) {
  // protobuf 3.x: "String field 'mesa.v1.CancelJobRequest.reason' contains invalid UTF-8 data
  // when parsing a protocol buffer. ..."
  constexpr absl::string_view kPrefix = "String field '";
  constexpr absl::string_view kParsing = "' contains invalid UTF-8 data when parsing";
  const absl::string_view text(message);
  if (absl::StartsWith(text, kPrefix)) {
    const size_t end = text.find(kParsing);
    if (end != absl::string_view::npos) {
      utf8_error_field = std::string(text.substr(kPrefix.size(), end - kPrefix.size()));
    }
  }
  if (previous_handler != nullptr) previous_handler(level, filename, line, message);
}

// The request type of a gRPC method path, from the generated descriptors; "" if unknown.
std::string RequestType(const std::string& method) {
  // "/mesa.v1.JobService/CancelJob" -> "mesa.v1.JobService.CancelJob"
  std::string name = absl::StrReplaceAll(method, {{"/", "."}});
  if (!name.empty() && name[0] == '.') name.erase(0, 1);
  const google::protobuf::MethodDescriptor* m =
      google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(name);
  return m == nullptr ? "" : m->input_type()->full_name();
}

class UnparseableRequestInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit UnparseableRequestInterceptor(std::string method) : method_(std::move(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      // Runs right after the parse, on its thread; no message means the parse failed.
      std::string field = TakeUtf8ErrorField();
      if (methods->GetRecvMessage() == nullptr) {
        unparseable_ = true;
        field_ = std::move(field);
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      TakeUtf8ErrorField();  // nothing of this call's handler carries over to the next call
      const grpc::Status status = methods->GetSendStatus();
      if (unparseable_ && status.error_code() == grpc::StatusCode::INTERNAL) {
        methods->ModifySendStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                               UnparseableRequestMessage(method_, field_)));
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  bool unparseable_ = false;
  std::string field_;
};

class UnparseableRequestFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new UnparseableRequestInterceptor(info->method() == nullptr ? "" : info->method());
  }
};

}  // namespace

void CaptureProtobufUtf8Errors() {
  static std::once_flag once;
  std::call_once(once,
                 [] { previous_handler = google::protobuf::SetLogHandler(&CapturingLogHandler); });
}

std::string TakeUtf8ErrorField() {
  std::string field;
  field.swap(utf8_error_field);
  return field;
}

std::string UnparseableRequestMessage(const std::string& method, const std::string& field) {
  std::string type = RequestType(method);
  if (type.empty()) type = absl::StrCat("request of ", base::SanitizeUtf8(method.substr(0, 200)));
  if (!field.empty()) {
    return absl::StrCat("request is not a valid ", type, ": field ", field,
                        " is not valid UTF-8 (proto3 string fields must be UTF-8)");
  }
  return absl::StrCat("request is not a valid ", type,
                      ": it could not be parsed (a string field that is not valid UTF-8, or "
                      "bytes that are not this message)");
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
UnparseableRequestInterceptorFactory() {
  CaptureProtobufUtf8Errors();
  return std::make_unique<UnparseableRequestFactory>();
}

}  // namespace mesa::coordinator
