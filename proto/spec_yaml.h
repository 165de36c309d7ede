#ifndef MESANET_PROTO_SPEC_YAML_H_
#define MESANET_PROTO_SPEC_YAML_H_

// Job files: YAML that maps onto mesa.v1.JobSpec through protobuf's JSON mapping.
//
// Keys are the proto field names (snake_case) or their JSON names (lowerCamelCase). Unknown keys
// are errors that name the full key path ("model.d_modle: unknown field; did you mean d_model?").
// Scalars are checked against the field's type, so `steps: ten` fails with the path rather than a
// protobuf parser message. Enum values may be written in full (JOB_TYPE_TRAIN) or short (TRAIN,
// train). Used by mesactl and by mesa-train, so a job file means the same to both.

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "google/protobuf/message.h"
#include "mesa/v1/job.pb.h"

namespace mesa {

// Fills `message` from a YAML mapping, after applying `overrides` in order. An override is
// "KEY=VALUE": KEY a dotted key path (training.steps, model.layer_mixers), created where the
// mapping lacks it; VALUE YAML (100, true, [mesa, gla], {steps: 10}, text). The result is checked
// as a whole file is. Errors are InvalidArgument naming the key path (or the override).
absl::Status ParseYamlIntoMessage(std::string_view yaml, google::protobuf::Message& message,
                                  absl::Span<const std::string> overrides = {});

// Job files are small: anything larger is refused (InvalidArgument) before it is parsed.
inline constexpr size_t kMaxJobFileBytes = 1 << 20;

// InvalidArgument for text that is not UTF-8 or larger than kMaxJobFileBytes.
absl::StatusOr<mesa::v1::JobSpec> ParseJobSpecYaml(std::string_view yaml,
                                                   absl::Span<const std::string> overrides = {});

// Reads and parses a job file (with overrides, as ParseYamlIntoMessage); NotFound if it cannot be
// read.
absl::StatusOr<mesa::v1::JobSpec> LoadJobSpecFile(const std::string& path,
                                                  absl::Span<const std::string> overrides = {});

// Makes the spec's relative file paths (data.train_path, data.val_path and
// eval.datasets[i].val_path, each comma-separated entry; checkpoint.dir; checkpoint.init_from;
// eval.checkpoint) absolute against `base_dir`.
// mesactl calls this with the submitter's working directory, because the trainer runs elsewhere,
// in a per-attempt directory, where a relative path would mean something else.
void MakeSpecPathsAbsolute(const std::string& base_dir, mesa::v1::JobSpec& spec);

}  // namespace mesa

#endif  // MESANET_PROTO_SPEC_YAML_H_
