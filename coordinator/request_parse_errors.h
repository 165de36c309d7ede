// Clear errors for requests the gRPC server cannot parse.
//
// gRPC's C++ server parses a request before any of our code runs; when protobuf refuses it (in
// practice: a proto3 `string` field holding bytes that are not UTF-8), the call ends with
// INTERNAL and an empty message, which tells the client nothing. There is no hook before the
// parse, but a server interceptor sees the failed parse (no request message after it) and may
// rewrite the status the call ends with. This one answers INVALID_ARGUMENT naming the request
// type and, where protobuf reported it while parsing on this thread, the offending field:
//
//   INVALID_ARGUMENT: request is not a valid mesa.v1.CancelJobRequest: field
//   mesa.v1.CancelJobRequest.reason is not valid UTF-8 (proto3 string fields must be UTF-8)
//
// The field comes from protobuf's own log line ("String field 'X' contains invalid UTF-8 data
// when parsing a protocol buffer ..."), captured by a log handler per thread; the sync server
// parses a request on the thread that then runs the call's interceptors. Without that line the
// error says the request could not be parsed and names the likely causes.
#ifndef MESANET_COORDINATOR_REQUEST_PARSE_ERRORS_H_
#define MESANET_COORDINATOR_REQUEST_PARSE_ERRORS_H_

#include <memory>
#include <string>

#include "grpcpp/support/server_interceptor.h"

namespace mesa::coordinator {

// Installs (once; later calls do nothing) a protobuf log handler that remembers, per thread, the
// field of the last "invalid UTF-8 when parsing" error, and passes every line on to the handler
// it replaces (stderr by default).
void CaptureProtobufUtf8Errors();

// The field named by the last such error on this thread since the last call ("" if none); clears
// it.
std::string TakeUtf8ErrorField();

// The message of the INVALID_ARGUMENT for an unparseable request to `method` (a gRPC path such as
// "/mesa.v1.JobService/CancelJob"); `field` as from TakeUtf8ErrorField().
std::string UnparseableRequestMessage(const std::string& method, const std::string& field);

// For grpc::ServerBuilder::experimental().SetInterceptorCreators(). Also installs the capture.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
UnparseableRequestInterceptorFactory();

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_REQUEST_PARSE_ERRORS_H_
