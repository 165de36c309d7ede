#include "cli/client.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mesa::cli {
namespace {

// Encodes one length-delimited field (wire type 2) with a field number below 16.
std::string Field(int number, const std::string& value) {
  std::string out;
  out.push_back(static_cast<char>((number << 3) | 2));
  size_t n = value.size();
  while (n >= 0x80) {
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  return out + value;
}

std::string Violation(const std::string& field, const std::string& description) {
  return Field(1, Field(1, field) + Field(2, description));
}

std::string StatusWithBadRequest(const std::string& bad_request) {
  std::string any = Field(1, "type.googleapis.com/google.rpc.BadRequest") + Field(2, bad_request);
  // code = 3 (varint field 1), message (field 2), details (field 3).
  std::string status = std::string("\x08\x03", 2) + Field(2, "invalid spec");
  // Another Any that must be ignored.
  status += Field(3, Field(1, "type.googleapis.com/google.rpc.DebugInfo") + Field(2, "xx"));
  status += Field(3, any);
  return status;
}

TEST(DecodeFieldViolations, ReadsBadRequestDetails) {
  std::string long_description(300, 'd');  // Needs a two-byte length.
  std::string details = StatusWithBadRequest(Violation("spec.resources.gpus", "must be >= 0") +
                                             Violation("spec.name", long_description));
  std::vector<std::string> v = DecodeFieldViolations(details);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], "spec.resources.gpus: must be >= 0");
  EXPECT_EQ(v[1], "spec.name: " + long_description);
}

TEST(DecodeFieldViolations, GarbageAndEmptyGiveNothing) {
  EXPECT_TRUE(DecodeFieldViolations("").empty());
  EXPECT_TRUE(DecodeFieldViolations("\x1a\xff\xff").empty());
}

TEST(FromGrpcStatus, KeepsCodeAndAppendsNewViolations) {
  grpc::Status status(grpc::StatusCode::INVALID_ARGUMENT, "spec.name: must be lowercase",
                      StatusWithBadRequest(Violation("spec.name", "must be lowercase") +
                                           Violation("spec.priority", "out of range")));
  absl::Status s = FromGrpcStatus(status);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "spec.name: must be lowercase; field spec.priority: out of range");
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::NOT_FOUND, "x")).code(),
            absl::StatusCode::kNotFound);
}

// gRPC's C++ server answers INTERNAL without a message when protobuf cannot parse the request
// (older coordinators; current ones say INVALID_ARGUMENT and name the field).
TEST(FromGrpcStatus, ExplainsAnEmptyInternalError) {
  absl::Status s = FromGrpcStatus(grpc::Status(grpc::StatusCode::INTERNAL, ""));
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(s.message(), "could not parse the request")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "UTF-8")) << s;
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::INTERNAL, "disk")).message(), "disk");
}

TEST(StatusCodeName, GrpcSpelling) {
  EXPECT_EQ(StatusCodeName(absl::StatusCode::kNotFound), "NOT_FOUND");
  EXPECT_EQ(StatusCodeName(absl::StatusCode::kFailedPrecondition), "FAILED_PRECONDITION");
  EXPECT_EQ(StatusCodeName(absl::StatusCode::kInvalidArgument), "INVALID_ARGUMENT");
}

}  // namespace
}  // namespace mesa::cli
