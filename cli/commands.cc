#include "cli/commands.h"

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/array_format.h"
#include "cli/eval_format.h"
#include "cli/format.h"
#include "proto/spec_yaml.h"
#include "spec/array_jobs.h"
#include "spec/job_refs.h"
#include "spec/validate_job_spec.h"

namespace mesa::cli {
namespace {

using mesa::v1::Job;
using mesa::v1::JobEvent;
using mesa::v1::JobState;

// "mesactl: get: NOT_FOUND: job j-123 not found"
// Several validation problems (joined with "; " by the coordinator) go one per line.
int ReportError(std::ostream& err, absl::string_view command, const absl::Status& status) {
  err << "mesactl: " << command << ": " << StatusCodeName(status.code()) << ":";
  std::vector<absl::string_view> problems = absl::StrSplit(status.message(), "; ");
  if (status.code() == absl::StatusCode::kInvalidArgument && problems.size() > 1) {
    for (absl::string_view p : problems) err << "\n  " << p;
  } else {
    err << " " << status.message();
  }
  if (status.code() == absl::StatusCode::kUnavailable) {
    // What gRPC says when the two ends disagree on TLS (docs/security.md).
    if (absl::StrContains(status.message(), "Socket closed")) {
      err << "\n  (a coordinator serving TLS closes plaintext connections: pass --ca or set "
             "MESA_CA)";
    } else if (absl::StrContains(status.message(), "andshake")) {
      err << "\n  (TLS handshake failed: --ca/MESA_CA must be the CA of the coordinator's "
             "certificate, and the --server host one of its names)";
    }
  }
  err << "\n";
  return kExitError;
}

int UsageError(std::ostream& err, absl::string_view message) {
  err << "mesactl: " << message << "\nRun 'mesactl help' for usage.\n";
  return kExitUsage;
}

// Prints `message` in options.output's machine-readable form (`multiline`: pretty, else one
// line of a stream); nothing for an empty name list.
int PrintMachine(const Options& options, std::ostream& out, std::ostream& err,
                 absl::string_view command, const google::protobuf::Message& message,
                 bool multiline = true) {
  absl::StatusOr<std::string> text = RenderMachine(message, multiline, options.output);
  if (!text.ok()) return ReportError(err, command, text.status());
  if (!text->empty()) out << *text << "\n";
  return kExitOk;
}

// Prints `message` machine-readably (multi-line) or runs `human`.
template <typename Message, typename Human>
int Print(const Options& options, std::ostream& out, std::ostream& err, absl::string_view command,
          const Message& message, Human human) {
  if (options.json) {
    return PrintMachine(options, out, err, command, message);
  } else {
    human();
  }
  return kExitOk;
}

// Follows a job's events until it ends; reconnects (resuming after the last event seen) while
// the coordinator is briefly unreachable, e.g. during a restart.
int FollowJob(JobClient& client, const Options& options, const std::string& id,
              int64_t from_sequence, std::ostream& out, std::ostream& err) {
  absl::StatusOr<Job> job = client.Get(id);
  if (!job.ok()) return ReportError(err, "watch", job.status());
  if (options.tty && !options.json) {
    out << "Watching job " << job->id() << " (" << job->spec().name() << "), state "
        << StateName(job->state()) << "\n";
  }

  int64_t last_sequence = from_sequence;
  JobState final_state = mesa::v1::JOB_STATE_UNSPECIFIED;
  bool bar_shown = false;
  mesa::v1::Progress progress = job->progress();
  auto clear_bar = [&] {
    if (bar_shown) out << "\r\033[K";
    bar_shown = false;
  };
  auto draw_bar = [&] {
    out << "\r\033[K" << FormatProgressBar(progress, options.terminal_width) << std::flush;
    bar_shown = true;
  };
  auto on_event = [&](const JobEvent& event) {
    last_sequence = std::max(last_sequence, event.sequence());
    if (event.type() == mesa::v1::JOB_EVENT_TYPE_STATE_CHANGED && IsTerminal(event.state())) {
      final_state = event.state();
    }
    if (options.json) {
      PrintMachine(options, out, err, "watch", event, /*multiline=*/false);
      out << std::flush;
    } else if (options.tty && event.type() == mesa::v1::JOB_EVENT_TYPE_PROGRESS) {
      progress = event.progress();
      draw_bar();
    } else {
      // Event lines scroll above the bar, which is redrawn below them.
      const bool redraw = bar_shown;
      clear_bar();
      out << FormatEventLine(event) << "\n";
      if (redraw && !IsTerminal(final_state)) draw_bar();
      out << std::flush;
    }
    return true;
  };

  absl::Time unreachable_since = absl::InfiniteFuture();
  absl::Duration backoff = absl::Milliseconds(200);
  while (!IsTerminal(final_state)) {
    absl::Status status = client.Watch(id, last_sequence, on_event);
    if (IsTerminal(final_state)) break;
    if (status.ok()) {
      // The stream ended without a final event: ask for the state (the server may be stopping).
      absl::StatusOr<Job> now = client.Get(id);
      if (now.ok() && IsTerminal(now->state())) {
        final_state = now->state();
        job = std::move(now);
        break;
      }
      if (now.ok()) unreachable_since = absl::InfiniteFuture();
      status = now.ok() ? absl::OkStatus() : now.status();
    }
    if (!status.ok()) {
      // A coordinator that restarts drops streams as UNAVAILABLE or, when it cancels them
      // while shutting down, CANCELLED: both are worth retrying. Anything else is final.
      if (status.code() != absl::StatusCode::kUnavailable &&
          status.code() != absl::StatusCode::kCancelled) {
        clear_bar();
        return ReportError(err, "watch", status);
      }
      if (unreachable_since == absl::InfiniteFuture()) unreachable_since = absl::Now();
      if (absl::Now() - unreachable_since > options.reconnect_window) {
        clear_bar();
        return ReportError(err, "watch", status);
      }
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
  clear_bar();

  absl::StatusOr<Job> final_job = client.Get(id);
  if (final_job.ok()) job = std::move(final_job);
  if (!options.json) {
    out << "Job " << id << " " << StateName(final_state);
    if (final_state == mesa::v1::JOB_STATE_FAILED && !job->failure_reason().empty()) {
      out << ": " << job->failure_reason();
    }
    if (job->result().final_loss() != 0) {
      out << absl::StrFormat(" (final loss %.4f)", job->result().final_loss());
    }
    out << "\n" << std::flush;
  }
  return ExitCodeForState(final_state);
}

}  // namespace

namespace {

// FILE (or stdin for "-") as the spec submit sends: --set applied (`sets`), paths made absolute,
// a run's saved steps listed. Errors name the file.
absl::StatusOr<mesa::v1::JobSpec> LoadForSubmit(const std::string& file,
                                                const std::vector<std::string>& sets) {
  absl::StatusOr<mesa::v1::JobSpec> spec;
  if (file == "-") {
    // Bounded: one byte past the limit is enough for the parser to refuse it.
    std::string yaml;
    char buffer[65536];
    while (yaml.size() <= kMaxJobFileBytes && std::cin.read(buffer, sizeof(buffer)).gcount() > 0) {
      yaml.append(buffer, static_cast<size_t>(std::cin.gcount()));
    }
    spec = ParseJobSpecYaml(yaml, sets);
    // LoadJobSpecFile's errors name the file; stdin has no name.
    if (!spec.ok())
      return absl::Status(spec.status().code(), absl::StrCat("-: ", spec.status().message()));
  } else {
    spec = LoadJobSpecFile(file, sets);
  }
  if (!spec.ok()) return spec.status();
  // The trainer runs in its own directory on some worker: paths mean what they mean here.
  if (char* cwd = getcwd(nullptr, 0); cwd != nullptr) {
    MakeSpecPathsAbsolute(cwd, *spec);
    free(cwd);
  }
  // An array over a run's saved steps: the root is listed here, the coordinator gets the list.
  if (absl::Status s = spec::ExpandCheckpointSteps(*spec); !s.ok()) return s;
  return spec;
}

// A --then job after `previous`: depends on its success, and job:previous names it.
mesa::v1::JobSpec After(const mesa::v1::JobSpec& spec, const std::string& previous) {
  mesa::v1::JobSpec out =
      *spec::ResolveJobRefs(spec, [&](const std::string& id) -> absl::StatusOr<std::string> {
        return absl::StrCat(spec::kJobRefPrefix, id == "previous" ? previous : id);
      });
  mesa::v1::Dependency* d = out.add_depends_on();
  d->set_job_id(previous);
  d->set_after(mesa::v1::DEPENDENCY_CONDITION_SUCCESS);
  return out;
}

}  // namespace

int Submit(JobClient& client, const Options& options, const std::vector<std::string>& args,
           std::ostream& out, std::ostream& err) {
  // FILE, then the --then files: all loaded and checked before anything is submitted.
  std::vector<mesa::v1::JobSpec> specs;
  for (size_t i = 0; i <= options.then_files.size(); ++i) {
    const std::string& file = i == 0 ? args[1] : options.then_files[i - 1];
    absl::StatusOr<mesa::v1::JobSpec> spec =
        LoadForSubmit(file, i == 0 ? options.sets : std::vector<std::string>{});
    if (!spec.ok()) {
      err << "mesactl: submit: " << spec.status().message() << "\n";
      return kExitError;
    }
    // The coordinator's own check, here first: a bad spec is refused without a round trip. A
    // --then job is checked as it will be sent, after a stand-in for the job before it.
    const mesa::v1::JobSpec checked = i == 0 ? *spec : After(*spec, "job-0");
    if (absl::Status valid =
            spec::ValidateJobSpec(checked, {.require_absolute_paths = true,
                                            .data_roots = options.data_roots,
                                            .checkpoint_root = options.checkpoint_root});
        !valid.ok()) {
      if (i > 0) {
        valid = absl::Status(valid.code(), absl::StrCat(file, ": ", valid.message()));
      }
      return ReportError(err, "submit", valid);
    }
    specs.push_back(*std::move(spec));
  }
  const std::string client_job_id =
      options.client_job_id.empty() ? NewClientJobId() : options.client_job_id;
  std::string previous;
  absl::StatusOr<Job> job;
  for (size_t i = 0; i < specs.size(); ++i) {
    const mesa::v1::JobSpec spec = i == 0 ? specs[0] : After(specs[i], previous);
    // Each job of a pipeline has its own key, derived from the first's.
    const std::string key = i == 0 ? client_job_id : absl::StrCat(client_job_id, ".then", i);
    // With a client_job_id a resubmission cannot duplicate the job, so a lost answer is retried.
    absl::Duration backoff = absl::Milliseconds(200);
    for (int attempt = 0;; ++attempt) {
      job = client.Submit(spec, key);
      if (job.ok() || job.status().code() != absl::StatusCode::kUnavailable || attempt == 3) break;
      absl::SleepFor(backoff);
      backoff *= 2;
    }
    if (!job.ok()) {
      if (i > 0) {
        err << "mesactl: submit: the jobs before it were submitted (the last: " << previous
            << "); cancel them or submit the rest after " << previous << "\n";
      }
      return ReportError(err, "submit", job.status());
    }
    previous = job->id();
    if (options.json) {
      // With --watch, scripts get the job lines followed by event lines: keep each on one line.
      if (int code =
              PrintMachine(options, out, err, "submit", *job, !options.watch && specs.size() == 1);
          code != 0) {
        return code;
      }
    } else {
      out << "Submitted job " << job->id() << " (" << job->spec().name() << "), state "
          << StateName(job->state());
      if (job->waiting_for_size() > 0) {
        out << ", waiting for " << absl::StrJoin(job->waiting_for(), ", ");
      }
      out << "\n";
    }
  }
  out << std::flush;
  if (!options.watch) return kExitOk;
  return FollowJob(client, options, job->id(), 0, out, err);
}

int List(JobClient& client, const Options& options, const std::vector<std::string>& args,
         std::ostream& out, std::ostream& err) {
  mesa::v1::ListJobsRequest request;
  absl::StatusOr<std::vector<JobState>> states = ParseStates(options.states);
  if (!states.ok()) return UsageError(err, states.status().message());
  for (JobState s : *states) request.add_states(s);
  request.set_queue(options.queue);
  absl::StatusOr<std::map<std::string, std::string>> labels = ParseLabels(options.labels);
  if (!labels.ok()) return UsageError(err, labels.status().message());
  request.mutable_labels()->insert(labels->begin(), labels->end());
  request.set_newest_first(true);  // as kubectl's tables read: what you just did on top
  bool truncated = false;
  absl::StatusOr<std::vector<Job>> jobs = client.List(request, options.limit, &truncated);
  if (!jobs.ok()) return ReportError(err, "list", jobs.status());
  if (truncated) {
    // On stderr: stdout stays one table or one document.
    err << "mesactl: the newest " << jobs->size() << " shown; more may match (--limit=N for more, "
        << "--limit=0 for all)\n";
  }
  mesa::v1::ListJobsResponse response;
  for (Job& job : *jobs) *response.add_jobs() = std::move(job);
  return Print(options, out, err, "list", response, [&] {
    if (response.jobs().empty()) {
      out << "No jobs.\n";
      return;
    }
    out << FormatJobTable({response.jobs().begin(), response.jobs().end()}, absl::Now());
  });
}

int Get(JobClient& client, const Options& options, const std::vector<std::string>& args,
        std::ostream& out, std::ostream& err) {
  absl::StatusOr<Job> job = client.Get(args[1]);
  if (!job.ok()) return ReportError(err, "get", job.status());
  if (options.csv) {
    if (!job->spec().has_array()) {
      return UsageError(err, absl::StrCat("get --csv: job ", job->id(),
                                          " is not an array job (JobSpec.array); --json has "
                                          "every job's result"));
    }
    out << ArrayCsv(job->result().array());
    return 0;
  }
  return Print(options, out, err, "get", *job, [&] {
    out << FormatJobDetails(*job, absl::Now());
    if (job->spec().has_array()) out << "\n" << FormatArrayTable(job->result().array());
  });
}

// ΔNLL per position of job A against the reference job B (docs/math.md §7).
int Compare(JobClient& client, const Options& options, const std::vector<std::string>& args,
            std::ostream& out, std::ostream& err) {
  absl::StatusOr<Job> a = client.Get(args[1]);
  if (!a.ok()) return ReportError(err, "compare", a.status());
  absl::StatusOr<Job> b = client.Get(args[2]);
  if (!b.ok()) return ReportError(err, "compare", b.status());
  absl::StatusOr<mesa::v1::NllComparison> comparison = CompareNll(*a, *b);
  if (!comparison.ok()) return ReportError(err, "compare", comparison.status());
  return Print(options, out, err, "compare", *comparison,
               [&] { out << FormatNllComparison(*comparison); });
}

namespace {

// What a cancel did: a job that was not running is cancelled at once; a running one was asked to
// stop (its trainer checkpoints first), which the user can follow.
std::string CancelOutcome(const Job& job) {
  if (IsTerminal(job.state())) {
    return absl::StrCat("Job ", job.id(), " ", StateName(job.state()));
  }
  return absl::StrCat("Job ", job.id(), ": cancellation requested (now ", StateName(job.state()),
                      "; the trainer checkpoints, then stops). Follow it with: mesactl watch ",
                      job.id());
}

// `cancel --label k=v...` (kubectl's `delete -l`): every unfinished job whose labels match, also
// restricted by --queue. Each is cancelled on its own; one that cannot be is reported and the
// rest go on (exit 1 if any failed).
int CancelSelected(JobClient& client, const Options& options, std::ostream& out,
                   std::ostream& err) {
  mesa::v1::ListJobsRequest request;
  absl::StatusOr<std::map<std::string, std::string>> labels = ParseLabels(options.labels);
  if (!labels.ok()) return UsageError(err, labels.status().message());
  if (labels->empty()) return UsageError(err, "cancel: give a job ID or a --label selector");
  request.mutable_labels()->insert(labels->begin(), labels->end());
  request.set_queue(options.queue);
  for (int s = mesa::v1::JobState_MIN; s <= mesa::v1::JobState_MAX; ++s) {
    const auto state = static_cast<JobState>(s);
    if (mesa::v1::JobState_IsValid(s) && state != mesa::v1::JOB_STATE_UNSPECIFIED &&
        !IsTerminal(state)) {
      request.add_states(state);
    }
  }
  absl::StatusOr<std::vector<Job>> jobs = client.List(request, /*limit=*/0);
  if (!jobs.ok()) return ReportError(err, "cancel", jobs.status());
  mesa::v1::ListJobsResponse cancelled;
  int failed = 0;
  for (const Job& job : *jobs) {
    absl::StatusOr<Job> done = client.Cancel(job.id(), options.reason);
    if (!done.ok()) {
      ReportError(err, absl::StrCat("cancel ", job.id()), done.status());
      ++failed;
      continue;
    }
    *cancelled.add_jobs() = *done;
  }
  int printed = Print(options, out, err, "cancel", cancelled, [&] {
    for (const Job& job : cancelled.jobs()) out << CancelOutcome(job) << "\n";
    if (jobs->empty()) out << "No unfinished job matches.\n";
  });
  return failed > 0 ? kExitError : printed;
}

}  // namespace

int Cancel(JobClient& client, const Options& options, const std::vector<std::string>& args,
           std::ostream& out, std::ostream& err) {
  if (args.size() == 1) return CancelSelected(client, options, out, err);
  if (!options.labels.empty()) return UsageError(err, "cancel: a job ID or --label, not both");
  absl::StatusOr<Job> job = client.Cancel(args[1], options.reason);
  if (!job.ok()) return ReportError(err, "cancel", job.status());
  return Print(options, out, err, "cancel", *job, [&] { out << CancelOutcome(*job) << "\n"; });
}

int Logs(JobClient& client, const Options& options, const std::vector<std::string>& args,
         std::ostream& out, std::ostream& err) {
  absl::Status status =
      client.Logs(args[1], options.from_sequence, options.follow, [&](const mesa::v1::LogLine& l) {
        if (options.json) {
          PrintMachine(options, out, err, "logs", l, /*multiline=*/false);
        } else {
          out << FormatLogLine(l) << "\n";
        }
        if (options.follow) out << std::flush;
        return true;
      });
  out << std::flush;
  if (!status.ok()) return ReportError(err, "logs", status);
  return kExitOk;
}

int Explain(JobClient& client, const Options& options, const std::vector<std::string>& args,
            std::ostream& out, std::ostream& err) {
  absl::StatusOr<mesa::v1::ExplainJobResponse> explain = client.Explain(args[1]);
  if (!explain.ok()) return ReportError(err, "explain", explain.status());
  return Print(options, out, err, "explain", *explain,
               [&] { out << FormatExplain(args[1], *explain); });
}

int Audit(JobClient& client, const Options& options, const std::vector<std::string>& args,
          std::ostream& out, std::ostream& err) {
  absl::StatusOr<std::vector<mesa::v1::AuditRecord>> records =
      client.Audit(options.caller, options.target, options.limit);
  if (!records.ok()) return ReportError(err, "audit", records.status());
  mesa::v1::ListAuditRecordsResponse response;
  for (auto& r : *records) *response.add_records() = std::move(r);
  return Print(options, out, err, "audit", response, [&] {
    if (response.records().empty()) {
      out << "No audit records.\n";
      return;
    }
    for (const mesa::v1::AuditRecord& r : response.records()) out << FormatAuditRecord(r) << "\n";
  });
}

int Watch(JobClient& client, const Options& options, const std::vector<std::string>& args,
          std::ostream& out, std::ostream& err) {
  return FollowJob(client, options, args[1], options.from_sequence, out, err);
}

std::string NewClientJobId() {
  std::random_device rd;
  std::uniform_int_distribution<uint64_t> dist;
  uint64_t value = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ dist(rd);
  return absl::StrFormat("mesactl-%016x", value);
}

}  // namespace mesa::cli
