#include "cli/format.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/eval_format.h"
#include "google/protobuf/util/json_util.h"
#include "mesa/v1/cluster_service.pb.h"
#include "spec/job_refs.h"
#include "yaml-cpp/yaml.h"

namespace mesa::cli {
namespace {

using mesa::v1::Job;
using mesa::v1::JobEvent;
using mesa::v1::JobState;
using mesa::v1::Progress;

constexpr absl::string_view kStatePrefix = "JOB_STATE_";

absl::Time ToAbslTime(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

bool IsSet(const google::protobuf::Timestamp& ts) { return ts.seconds() != 0 || ts.nanos() != 0; }

std::string JobTypeName(mesa::v1::JobType type) {
  switch (type) {
    case mesa::v1::JOB_TYPE_TRAIN:
      return "train";
    case mesa::v1::JOB_TYPE_EVAL:
      return "eval";
    case mesa::v1::JOB_TYPE_GENERATE:
      return "generate";
    default:
      return "-";
  }
}

std::string EventTypeName(mesa::v1::JobEventType type) {
  switch (type) {
    case mesa::v1::JOB_EVENT_TYPE_STATE_CHANGED:
      return "STATE";
    case mesa::v1::JOB_EVENT_TYPE_PROGRESS:
      return "PROGRESS";
    case mesa::v1::JOB_EVENT_TYPE_CHECKPOINT:
      return "CHECKPOINT";
    case mesa::v1::JOB_EVENT_TYPE_RESULT:
      return "RESULT";
    case mesa::v1::JOB_EVENT_TYPE_RESUMED:
      return "RESUMED";
    default:
      return "EVENT";
  }
}

// "step 120/200  loss 3.2104  12.3k tok/s  ETA 1m20s" (only the parts that are known).
std::string ProgressSummary(const Progress& p) {
  std::vector<std::string> parts;
  if (p.total_steps() > 0) {
    parts.push_back(absl::StrCat("step ", p.step(), "/", p.total_steps()));
  } else if (p.step() > 0) {
    parts.push_back(absl::StrCat("step ", p.step()));
  }
  if (p.loss() != 0) parts.push_back(absl::StrFormat("loss %.4f", p.loss()));
  if (p.tokens_per_second() > 0) {
    parts.push_back(absl::StrCat(FormatCount(p.tokens_per_second()), " tok/s"));
  }
  if (p.eta_seconds() > 0) {
    parts.push_back(absl::StrCat("ETA ", HumanDuration(absl::Seconds(p.eta_seconds()))));
  }
  return absl::StrJoin(parts, "  ");
}

// "Key:  value" lines, the values aligned two columns after the longest key.
std::string FormatKeyValues(const std::vector<std::pair<std::string, std::string>>& kv) {
  size_t width = 0;
  for (const auto& [k, v] : kv) width = std::max(width, k.size());
  std::string out;
  for (const auto& [k, v] : kv) {
    absl::StrAppend(&out, k, ":", std::string(width - k.size() + 2, ' '), v, "\n");
  }
  return out;
}

}  // namespace

std::string StateName(JobState state) {
  std::string name = mesa::v1::JobState_Name(state);
  if (name.empty()) return absl::StrCat("STATE_", static_cast<int>(state));
  return std::string(absl::StripPrefix(name, kStatePrefix));
}

bool IsTerminal(JobState state) {
  return state == mesa::v1::JOB_STATE_SUCCEEDED || state == mesa::v1::JOB_STATE_FAILED ||
         state == mesa::v1::JOB_STATE_CANCELLED;
}

int ExitCodeForState(JobState state) {
  switch (state) {
    case mesa::v1::JOB_STATE_SUCCEEDED:
      return kExitOk;
    case mesa::v1::JOB_STATE_FAILED:
      return kExitJobFailed;
    case mesa::v1::JOB_STATE_CANCELLED:
      return kExitJobCancelled;
    default:
      return kExitError;
  }
}

absl::StatusOr<std::vector<JobState>> ParseStates(absl::string_view text) {
  std::vector<JobState> states;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::string name = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(item));
    if (!absl::StartsWith(name, kStatePrefix)) name = absl::StrCat(kStatePrefix, name);
    JobState state;
    if (!mesa::v1::JobState_Parse(name, &state) || state == mesa::v1::JOB_STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown job state \"", item,
          "\" (want queued, scheduled, running, retrying, succeeded, failed or cancelled)"));
    }
    states.push_back(state);
  }
  return states;
}

absl::StatusOr<std::map<std::string, std::string>> ParseLabels(
    const std::vector<std::string>& selectors) {
  std::map<std::string, std::string> labels;
  for (const std::string& selector : selectors) {
    for (absl::string_view item : absl::StrSplit(selector, ',', absl::SkipWhitespace())) {
      item = absl::StripAsciiWhitespace(item);
      std::pair<absl::string_view, absl::string_view> kv =
          absl::StrSplit(item, absl::MaxSplits('=', 1));
      if (kv.first.empty() || item.find('=') == absl::string_view::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad label selector \"", item, "\" (want key=value)"));
      }
      labels[std::string(kv.first)] = std::string(kv.second);
    }
  }
  return labels;
}

std::string HumanDuration(absl::Duration d) {
  if (d < absl::Seconds(1)) return "0s";
  int64_t s = absl::ToInt64Seconds(d);
  int64_t days = s / 86400, hours = (s / 3600) % 24, minutes = (s / 60) % 60, seconds = s % 60;
  if (days > 0) return absl::StrFormat("%dd%02dh", days, hours);
  if (hours > 0) return absl::StrFormat("%dh%02dm", hours, minutes);
  if (minutes > 0) return absl::StrFormat("%dm%02ds", minutes, seconds);
  return absl::StrFormat("%ds", seconds);
}

std::string FormatAge(absl::Duration d) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  int64_t s = absl::ToInt64Seconds(d);
  if (s < 120) return absl::StrCat(s, "s");
  if (s < 120 * 60) return absl::StrCat(s / 60, "m");
  if (s < 48 * 3600) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

std::string FormatCount(double value) {
  double a = std::fabs(value);
  if (a >= 1e9) return absl::StrFormat("%.1fG", value / 1e9);
  if (a >= 1e6) return absl::StrFormat("%.1fM", value / 1e6);
  if (a >= 1e3) return absl::StrFormat("%.1fk", value / 1e3);
  return absl::StrFormat("%.0f", value);
}

std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths(header.size(), 0);
  for (size_t c = 0; c < header.size(); ++c) widths[c] = header[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size() && c < widths.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  std::string out;
  auto append_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < widths.size(); ++c) {
      const std::string cell = c < row.size() ? row[c] : "";
      line += cell;
      if (c + 1 < widths.size()) line.append(widths[c] - cell.size() + 3, ' ');
    }
    absl::StrAppend(&out, absl::StripTrailingAsciiWhitespace(line), "\n");
  };
  append_row(header);
  for (const auto& row : rows) append_row(row);
  return out;
}

std::string FormatResources(const mesa::v1::Resources& r) {
  std::string out;
  const int ranks = std::max(1, r.cpu_ranks());
  const int threads = std::max(1, r.cpu_threads());
  if (r.gpus() > 0) {
    out = absl::StrCat(r.gpus(), " GPU");
  } else if (ranks == 1 && threads == 1) {
    out = "CPU";
  } else {
    out = absl::StrCat("CPU ", ranks, "x", threads);
  }
  if (r.memory_bytes() > 0) {
    // Per rank, as the scheduler places it: "CPU 2x1 4GiB/rank".
    constexpr int64_t kMiB = int64_t{1} << 20, kGiB = int64_t{1} << 30;
    const int64_t m = r.memory_bytes();
    absl::StrAppend(&out, " ",
                    m >= kGiB ? absl::StrCat(absl::SixDigits(static_cast<double>(m) / kGiB), "GiB")
                    : m >= kMiB
                        ? absl::StrCat(absl::SixDigits(static_cast<double>(m) / kMiB), "MiB")
                        : absl::StrCat(m, "B"),
                    "/rank");
  }
  return out;
}

std::string FormatStepProgress(const Progress& p) {
  if (p.step() == 0 && p.total_steps() == 0) return "-";
  if (p.total_steps() == 0) return absl::StrCat(p.step());
  return absl::StrCat(p.step(), "/", p.total_steps());
}

std::string FormatJobTable(const std::vector<Job>& jobs, absl::Time now) {
  std::vector<std::vector<std::string>> rows;
  rows.reserve(jobs.size());
  for (const Job& job : jobs) {
    const auto& spec = job.spec();
    rows.push_back({
        job.id(),
        spec.name().empty() ? "-" : spec.name(),
        JobTypeName(spec.type()),
        StateName(job.state()),
        spec.queue().empty() ? "default" : spec.queue(),
        absl::StrCat(spec.priority()),
        FormatResources(spec.resources()),
        FormatStepProgress(job.progress()),
        IsSet(job.create_time()) ? FormatAge(now - ToAbslTime(job.create_time())) : "-",
    });
  }
  return FormatTable({"ID", "NAME", "TYPE", "STATE", "QUEUE", "PRIO", "RESOURCES", "STEP", "AGE"},
                     rows);
}

std::string FormatJobDetails(const Job& job, absl::Time now) {
  const auto& spec = job.spec();
  std::vector<std::pair<std::string, std::string>> kv;
  auto add = [&](std::string key, std::string value) {
    if (!value.empty()) kv.emplace_back(std::move(key), std::move(value));
  };
  add("ID", job.id());
  add("Name", spec.name());
  add("Type", JobTypeName(spec.type()));
  add("State", StateName(job.state()));
  add("Client job ID", job.client_job_id());
  add("Queue", spec.queue().empty() ? "default" : spec.queue());
  add("Priority", absl::StrCat(spec.priority()));
  add("Resources", FormatResources(spec.resources()));
  if (!spec.labels().empty()) {
    std::map<std::string, std::string> sorted(spec.labels().begin(), spec.labels().end());
    add("Labels", absl::StrJoin(sorted, ",", absl::PairFormatter("=")));
  }
  if (IsSet(job.create_time())) {
    add("Created", absl::StrCat(FormatTimestamp(job.create_time()), " (",
                                FormatAge(now - ToAbslTime(job.create_time())), " ago)"));
  }
  if (IsSet(job.start_time())) add("Started", FormatTimestamp(job.start_time()));
  if (IsSet(job.end_time())) add("Ended", FormatTimestamp(job.end_time()));
  if (IsSet(job.start_time())) {
    absl::Time end = IsSet(job.end_time()) ? ToAbslTime(job.end_time()) : now;
    add("Run time", HumanDuration(end - ToAbslTime(job.start_time())));
  }
  if (spec.max_run_seconds() > 0) {
    add("Time limit", absl::StrCat(HumanDuration(absl::Seconds(spec.max_run_seconds())),
                                   " per attempt (max_run_seconds)"));
  }
  if (spec.retention_seconds() != 0) {
    add("Retention", spec.retention_seconds() < 0
                         ? std::string("kept for ever after it ends (retention_seconds -1)")
                         : absl::StrCat(HumanDuration(absl::Seconds(spec.retention_seconds())),
                                        " after it ends (retention_seconds)"));
  }
  if (spec.depends_on_size() > 0) {
    std::vector<std::string> deps;
    for (const mesa::v1::Dependency& d : spec.depends_on()) {
      deps.push_back(
          absl::StrCat(d.job_id(), " (after ", spec::ConditionName(spec::ConditionOf(d)), ")"));
    }
    add("Depends on", absl::StrJoin(deps, ", "));
  }
  if (job.waiting_for_size() > 0) add("Waiting for", absl::StrJoin(job.waiting_for(), ", "));
  add("Attempts", absl::StrCat(job.attempts(), " (max retries ", spec.max_retries(), ")"));
  if (job.workers_size() > 0) add("Workers", absl::StrJoin(job.workers(), ","));
  add("Failure", job.failure_reason());
  add("Progress", ProgressSummary(job.progress()));
  add("Checkpoint", job.latest_checkpoint());
  if (job.has_result()) {
    const auto& r = job.result();
    std::vector<std::string> parts;
    if (r.final_loss() != 0) parts.push_back(absl::StrFormat("final loss %.4f", r.final_loss()));
    if (r.val_loss() != 0) parts.push_back(absl::StrFormat("val loss %.4f", r.val_loss()));
    if (r.val_perplexity() != 0)
      parts.push_back(absl::StrFormat("val ppl %.3f", r.val_perplexity()));
    std::map<std::string, double> metrics(r.metrics().begin(), r.metrics().end());
    for (const auto& [k, v] : metrics) parts.push_back(absl::StrFormat("%s %g", k, v));
    add("Result", absl::StrJoin(parts, ", "));
    add("Result checkpoint", r.checkpoint_path());
    for (auto& [key, value] : EvalResultFields(r)) add(std::move(key), std::move(value));
    for (int i = 0; i < r.completions_size(); ++i) {
      const mesa::v1::Completion& c = r.completions(i);
      // Escaped (newlines, quotes, control bytes) so that each completion stays on its line.
      add(absl::StrCat("Completion ", i),
          absl::StrFormat("\"%s\" -> \"%s\"  (%d tokens, %s, mean CG steps %.2f)",
                          absl::CHexEscape(c.prompt()), absl::CHexEscape(c.completion()),
                          c.tokens_size(), c.finish_reason(), c.cg_steps_mean()));
    }
  }
  if (spec.has_model()) {
    const auto& m = spec.model();
    const std::string mixers = m.layer_mixers_size() > 0
                                   ? absl::StrCat("[", absl::StrJoin(m.layer_mixers(), ", "), "]")
                               : m.mixer().empty() ? "mesa"
                                                   : m.mixer();
    add("Model",
        absl::StrFormat("%s  layers %d  d_model %d  heads %dx%d  vocab %d", mixers, m.n_layers(),
                        m.d_model(), m.n_heads(), m.head_dim(), m.vocab_size()));
  }
  if (spec.has_data()) {
    const auto& d = spec.data();
    std::vector<std::string> parts;
    if (!d.train_path().empty()) parts.push_back(absl::StrCat("train ", d.train_path()));
    if (!d.val_path().empty()) parts.push_back(absl::StrCat("val ", d.val_path()));
    if (d.seq_len() > 0) parts.push_back(absl::StrCat("seq_len ", d.seq_len()));
    if (d.batch_size() > 0) parts.push_back(absl::StrCat("batch ", d.batch_size()));
    parts.push_back(absl::StrCat("tokenizer ", d.tokenizer().empty() ? "byte" : d.tokenizer()));
    add("Data", absl::StrJoin(parts, "  "));
  }
  if (spec.training().steps() > 0) add("Steps", absl::StrCat(spec.training().steps()));
  if (!spec.eval().checkpoint().empty()) add("Eval checkpoint", spec.eval().checkpoint());
  add("Last event", job.last_sequence() > 0 ? absl::StrCat("#", job.last_sequence()) : "");

  return FormatKeyValues(kv);
}

std::string FormatEventLine(const JobEvent& e) {
  std::vector<std::string> parts = {FormatTimestamp(e.time()), absl::StrCat("#", e.sequence()),
                                    EventTypeName(e.type())};
  switch (e.type()) {
    case mesa::v1::JOB_EVENT_TYPE_STATE_CHANGED:
      parts.push_back(
          e.previous_state() == mesa::v1::JOB_STATE_UNSPECIFIED
              ? StateName(e.state())
              : absl::StrCat(StateName(e.previous_state()), " -> ", StateName(e.state())));
      break;
    case mesa::v1::JOB_EVENT_TYPE_PROGRESS:
      parts.push_back(ProgressSummary(e.progress()));
      break;
    case mesa::v1::JOB_EVENT_TYPE_RESULT:
      if (e.result().final_loss() != 0) {
        parts.push_back(absl::StrFormat("final loss %.4f", e.result().final_loss()));
      }
      if (e.result().val_loss() != 0) {
        parts.push_back(absl::StrFormat("val loss %.4f", e.result().val_loss()));
      }
      break;
    default:
      break;
  }
  if (e.attempt() > 0) parts.push_back(absl::StrCat("attempt ", e.attempt()));
  if (!e.message().empty()) parts.push_back(e.message());
  parts.erase(std::remove(parts.begin(), parts.end(), std::string()), parts.end());
  return absl::StrJoin(parts, "  ");
}

std::string FormatProgressBar(const Progress& p, int width) {
  std::string tail = ProgressSummary(p);
  if (p.total_steps() > 0) {
    double frac = std::clamp(static_cast<double>(p.step()) / p.total_steps(), 0.0, 1.0);
    tail = absl::StrCat(tail, "  ", static_cast<int>(std::floor(frac * 100)), "%");
    // The bar gets whatever the text leaves, between 10 and 40 cells.
    int cells = std::clamp(width - static_cast<int>(tail.size()) - 4, 10, 40);
    int filled = static_cast<int>(std::floor(frac * cells));
    std::string bar =
        absl::StrCat("[", std::string(filled, '#'), std::string(cells - filled, '.'), "]  ", tail);
    if (static_cast<int>(bar.size()) > width && width > 0) bar.resize(width);
    return bar;
  }
  if (tail.empty()) tail = "waiting for progress";
  if (static_cast<int>(tail.size()) > width && width > 0) tail.resize(width);
  return tail;
}

std::string FormatExplain(const std::string& job_id, const mesa::v1::ExplainJobResponse& x) {
  std::vector<std::pair<std::string, std::string>> kv = {
      {"Job", job_id},
      {"State", StateName(x.state())},
      {"Reason", x.reason().empty() ? "-" : x.reason()},
  };
  if (x.queue_position() > 0) {
    kv.emplace_back("Queue position", absl::StrCat(x.queue_position(), " of ", x.pending_jobs()));
  } else {
    kv.emplace_back("Pending jobs", absl::StrCat(x.pending_jobs()));
  }
  kv.emplace_back("Live workers", absl::StrCat(x.live_workers()));
  kv.emplace_back("Free GPUs", absl::StrCat(x.free_gpus()));
  kv.emplace_back("Free CPU slots", absl::StrCat(x.free_cpu_slots()));
  return FormatKeyValues(kv);
}

std::string FormatLogLine(const mesa::v1::LogLine& line) {
  absl::string_view text = absl::StripSuffix(line.text(), "\n");
  if (line.rank() == 0 && (line.stream().empty() || line.stream() == "stdout")) {
    return std::string(text);
  }
  return absl::StrCat("[rank ", line.rank(), " ", line.stream().empty() ? "stdout" : line.stream(),
                      "] ", text);
}

std::string FormatAuditRecord(const mesa::v1::AuditRecord& r) {
  std::string line =
      absl::StrCat(FormatTimestamp(r.time()), "  #", r.id(), "  ", r.method(), "  ", r.caller(),
                   "  ", r.target().empty() ? "-" : r.target(), "  ", r.result());
  if (!r.message().empty()) absl::StrAppend(&line, ": ", r.message());
  return line;
}

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message, bool multiline) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = multiline;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  auto status = google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("JSON encoding failed: ", status.ToString()));
  }
  // Pretty output from protobuf ends with a newline already; one-line output does not.
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view text) {
  if (text.empty()) return OutputFormat::kText;
  std::vector<absl::string_view> names;
  for (const auto& [name, format] : kOutputFormats) {
    if (text == name) return format;
    names.push_back(name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("expected one of ", absl::StrJoin(names, ", "), "; got \"", text, "\""));
}

namespace {

// Loaded JSON keeps flow style; YAML readers want block style, except for empty collections.
void ToBlockStyle(YAML::Node node) {
  if (node.IsMap() || node.IsSequence()) {
    node.SetStyle(node.size() == 0 ? YAML::EmitterStyle::Flow : YAML::EmitterStyle::Block);
    if (node.IsMap()) {
      for (auto it = node.begin(); it != node.end(); ++it) ToBlockStyle(it->second);
    } else {
      for (auto it = node.begin(); it != node.end(); ++it) ToBlockStyle(*it);
    }
  }
}

}  // namespace

absl::StatusOr<std::string> JsonToYaml(const std::string& json) {
  try {
    YAML::Node node = YAML::Load(json);
    ToBlockStyle(node);
    YAML::Emitter emitter;
    emitter << node;
    if (!emitter.good()) return absl::InternalError(emitter.GetLastError());
    return std::string(emitter.c_str());
  } catch (const YAML::Exception& e) {
    return absl::InternalError(absl::StrCat("YAML encoding failed: ", e.what()));
  }
}

absl::StatusOr<std::string> RenderMachine(const google::protobuf::Message& message, bool multiline,
                                          OutputFormat format) {
  if (format == OutputFormat::kName) {
    std::string out;
    auto add = [&out](absl::string_view kind, const std::string& id) {
      absl::StrAppend(&out, kind, "/", id, "\n");
    };
    if (const auto* job = dynamic_cast<const mesa::v1::Job*>(&message)) {
      add("job", job->id());
    } else if (const auto* jobs = dynamic_cast<const mesa::v1::ListJobsResponse*>(&message)) {
      for (const auto& j : jobs->jobs()) add("job", j.id());
    } else if (const auto* w = dynamic_cast<const mesa::v1::WorkerInfo*>(&message)) {
      add("worker", w->id());
    } else if (const auto* ws = dynamic_cast<const mesa::v1::ListWorkersResponse*>(&message)) {
      for (const auto& w : ws->workers()) add("worker", w.id());
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("-o name: no name for a ", message.GetDescriptor()->name()));
    }
    if (!out.empty()) out.pop_back();  // the caller ends the output with a newline
    return out;
  }
  absl::StatusOr<std::string> json = ToJson(message, multiline && format == OutputFormat::kJson);
  if (!json.ok() || format == OutputFormat::kJson) return json;
  absl::StatusOr<std::string> yaml = JsonToYaml(*json);
  if (!yaml.ok() || multiline) return yaml;
  return absl::StrCat("---\n", *yaml);
}

std::string FormatTimestamp(const google::protobuf::Timestamp& ts) {
  if (!IsSet(ts)) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", ToAbslTime(ts), absl::UTCTimeZone());
}

}  // namespace mesa::cli
