#include "coordinator/validation.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace mesa::coordinator {

bool IsValidIdentifier(absl::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

absl::Status CheckJobIdField(absl::string_view field, absl::string_view id) {
  if (id.size() > kMaxJobIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": at most ", kMaxJobIdBytes, " bytes, got ", id.size()));
  }
  return absl::OkStatus();
}

absl::Status CheckCancelJobRequest(const mesa::v1::CancelJobRequest& request) {
  if (absl::Status s = CheckJobIdField("id", request.id()); !s.ok()) return s;
  if (request.reason().size() > kMaxCancelReasonBytes) {
    return absl::InvalidArgumentError(absl::StrCat("reason: at most ", kMaxCancelReasonBytes,
                                                   " bytes, got ", request.reason().size()));
  }
  return absl::OkStatus();
}

absl::Status CheckListJobsRequest(const mesa::v1::ListJobsRequest& request) {
  if (request.queue().size() > 63) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue: at most 63 bytes, got ", request.queue().size()));
  }
  if (request.page_token().size() > kMaxPageTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("page_token: at most ", kMaxPageTokenBytes,
                                                   " bytes, got ", request.page_token().size()));
  }
  if (request.labels_size() > kMaxLabelFilters) {
    return absl::InvalidArgumentError(absl::StrCat("labels: at most ", kMaxLabelFilters,
                                                   " filters, got ", request.labels_size()));
  }
  for (const auto& [key, value] : request.labels()) {
    if (key.size() > 63 || value.size() > 256) {
      return absl::InvalidArgumentError(
          "labels: keys are at most 63 bytes and values at most 256 bytes");
    }
  }
  return absl::OkStatus();
}

}  // namespace mesa::coordinator
