// Parsing of mesactl arguments and formatting of jobs, events and logs for people and scripts.
//
// Everything here is pure (no I/O, no RPCs) so it can be unit-tested; the clock is passed in.

#ifndef MESANET_CLI_FORMAT_H_
#define MESANET_CLI_FORMAT_H_

#include <array>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "mesa/v1/job.pb.h"
#include "mesa/v1/job_service.pb.h"

namespace mesa::cli {

// Exit codes of mesactl (documented in docs/mesactl.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;         // RPC, I/O or spec error.
inline constexpr int kExitUsage = 2;         // Bad command line.
inline constexpr int kExitJobFailed = 3;     // watch: the job ended FAILED.
inline constexpr int kExitJobCancelled = 4;  // watch: the job ended CANCELLED.

// "QUEUED" for JOB_STATE_QUEUED: the enum name without its prefix.
std::string StateName(mesa::v1::JobState state);

// True for SUCCEEDED, FAILED and CANCELLED.
bool IsTerminal(mesa::v1::JobState state);

// Exit code of `mesactl watch` for a job that ended in `state`.
int ExitCodeForState(mesa::v1::JobState state);

// Parses a comma-separated list of states; each may be "running", "RUNNING" or
// "JOB_STATE_RUNNING". An empty string gives an empty list.
absl::StatusOr<std::vector<mesa::v1::JobState>> ParseStates(absl::string_view text);

// Parses "k=v" label selectors (each element may itself be a comma-separated list).
absl::StatusOr<std::map<std::string, std::string>> ParseLabels(
    const std::vector<std::string>& selectors);

// "1h02m", "3m05s", "12s", "0s". Negative durations print as "0s".
std::string HumanDuration(absl::Duration d);

// Age for tables: "45s", "12m", "3h", "5d".
std::string FormatAge(absl::Duration d);

// 1234 -> "1.2k", 2500000 -> "2.5M".
std::string FormatCount(double value);

// A table whose columns are left-aligned and padded to their widest cell, separated by 3 spaces.
// Trailing spaces are trimmed. Rows shorter than the header are padded with empty cells.
std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

// "2 GPU", "CPU 4x2" (ranks x threads) or "CPU".
std::string FormatResources(const mesa::v1::Resources& resources);

// "120/200" (or "-" before the first progress report).
std::string FormatStepProgress(const mesa::v1::Progress& progress);

// The `mesactl list` table: ID, NAME, TYPE, STATE, QUEUE, PRIO, RESOURCES, STEP, AGE.
std::string FormatJobTable(const std::vector<mesa::v1::Job>& jobs, absl::Time now);

// The `mesactl get` view: one "Key:  value" line per field that is set, then the spec summary.
std::string FormatJobDetails(const mesa::v1::Job& job, absl::Time now);

// One line per event, for logs and non-terminal `watch`:
// "2024-05-01T12:00:03Z  #12  STATE  QUEUED -> SCHEDULED  attempt 1  message".
std::string FormatEventLine(const mesa::v1::JobEvent& event);

// A one-line progress bar for terminals, at most `width` columns:
// "[#######.......]  step 120/200  60%  loss 3.2104  12.3k tok/s  ETA 1m20s".
std::string FormatProgressBar(const mesa::v1::Progress& progress, int width);

// The `mesactl explain` view.
std::string FormatExplain(const std::string& job_id, const mesa::v1::ExplainJobResponse& explain);

// One human log line: "[attempt 1 rank 0 stderr] text" is shortened to "text" for rank 0 stdout.
std::string FormatLogLine(const mesa::v1::LogLine& line);

// One `mesactl audit` line: "2026-11-25T20:40:30Z  #12  SubmitJob  alice  job-3  OK", with the
// message of a refused call after the result.
std::string FormatAuditRecord(const mesa::v1::AuditRecord& record);

// Protobuf's JSON mapping with proto field names (snake_case, as in job YAML files), every
// primitive field printed and enums by name. `multiline` pretty-prints; otherwise one line.
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message, bool multiline);

// `-o`/`--output` (kubectl's names): text (also "wide": mesactl's tables already have every
// column), json, yaml, or name ("job/ID", "worker/ID" lines).
enum class OutputFormat { kText, kJson, kYaml, kName };
inline constexpr std::array<std::pair<absl::string_view, OutputFormat>, 5> kOutputFormats = {{
    {"json", OutputFormat::kJson},
    {"yaml", OutputFormat::kYaml},
    {"name", OutputFormat::kName},
    {"wide", OutputFormat::kText},
    {"text", OutputFormat::kText},
}};
// One of kOutputFormats' names ("" is text).
absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view text);

// `message` in a machine-readable `format` (not kText): ToJson's JSON; the same as a YAML block
// document ("---" first when one of a stream, `multiline` false); or its name lines, for a Job,
// a WorkerInfo and lists of them (InvalidArgument for other messages).
absl::StatusOr<std::string> RenderMachine(const google::protobuf::Message& message, bool multiline,
                                          OutputFormat format);
// A JSON document as YAML, block style.
absl::StatusOr<std::string> JsonToYaml(const std::string& json);

// RFC 3339 in UTC, seconds precision; "-" for an unset timestamp.
std::string FormatTimestamp(const google::protobuf::Timestamp& ts);

}  // namespace mesa::cli

#endif  // MESANET_CLI_FORMAT_H_
