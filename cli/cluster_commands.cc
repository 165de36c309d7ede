#include "cli/cluster_commands.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/version.h"
#include "cli/format.h"
#include "google/protobuf/util/time_util.h"

namespace mesa::cli {
namespace {

int Fail(std::ostream& err, absl::string_view command, const absl::Status& status) {
  err << "mesactl: " << command << ": " << StatusCodeName(status.code()) << ": " << status.message()
      << "\n";
  return kExitError;
}

std::string StateWord(const mesa::v1::WorkerInfo& w) {
  std::string state;
  switch (w.state()) {
    case mesa::v1::WORKER_STATE_LIVE:
      state = "live";
      break;
    case mesa::v1::WORKER_STATE_AWAITING:
      state = "awaiting";
      break;
    case mesa::v1::WORKER_STATE_LOST:
      state = "lost";
      break;
    default:
      state = "unknown";
  }
  if (!w.draining()) return state;
  // Who cordoned it: an operator's drain stays when a Kubernetes node is uncordoned.
  switch (w.drain_reason()) {
    case mesa::v1::DRAIN_REASON_NODE_CORDONED:
      return state + ",draining (cordoned node)";
    case mesa::v1::DRAIN_REASON_AGENT_STOPPING:
      return state + ",draining (agent stopping)";
    case mesa::v1::DRAIN_REASON_OPERATOR:
      return state + ",draining (operator)";
    default:
      return state + ",draining";
  }
}

// A worker after drain / uncordon, as one line or JSON.
int PrintWorker(const Options& options, std::ostream& out, std::ostream& err,
                absl::string_view command, const mesa::v1::WorkerInfo& w, absl::string_view done) {
  if (options.json) {
    absl::StatusOr<std::string> text = RenderMachine(w, /*multiline=*/true, options.output);
    if (!text.ok()) return Fail(err, command, text.status());
    out << *text << "\n";
    return kExitOk;
  }
  out << "worker " << w.id() << " " << done;
  if (w.running_jobs_size() > 0) {
    out << "; " << w.running_jobs_size()
        << " running job(s) continue: " << absl::StrJoin(w.running_jobs(), ", ");
  }
  out << "\n";
  return kExitOk;
}

}  // namespace

std::string FormatWorkers(const mesa::v1::ListWorkersResponse& workers, absl::Time now) {
  if (workers.workers().empty()) return "No workers.\n";
  std::vector<std::vector<std::string>> rows;
  for (const mesa::v1::WorkerInfo& w : workers.workers()) {
    std::string jobs = w.running_jobs().empty() ? "-" : absl::StrJoin(w.running_jobs(), ",");
    if (w.running_jobs_size() > 3) {
      jobs =
          absl::StrCat(absl::StrJoin(w.running_jobs().begin(), w.running_jobs().begin() + 3, ","),
                       ",... (", w.running_jobs_size(), ")");
    }
    std::string age = "-";
    if (w.has_last_renewed()) {
      const absl::Time renewed = absl::FromUnixMillis(
          google::protobuf::util::TimeUtil::TimestampToMilliseconds(w.last_renewed()));
      age = FormatAge(now - renewed);
    }
    rows.push_back({w.id(), StateWord(w), absl::StrCat(w.free_gpus(), "/", w.gpus()),
                    absl::StrCat(w.free_cpu_slots(), "/", w.cpu_slots()), jobs, age,
                    w.hostname().empty() ? "-" : w.hostname()});
  }
  return FormatTable({"WORKER", "STATE", "GPUS", "CPU SLOTS", "JOBS", "LEASE AGE", "HOST"}, rows);
}

int Workers(JobClient& client, const Options& options, const std::vector<std::string>& args,
            std::ostream& out, std::ostream& err) {
  absl::StatusOr<mesa::v1::ListWorkersResponse> list = client.ListWorkers();
  if (!list.ok()) return Fail(err, args[0], list.status());
  if (options.json) {
    absl::StatusOr<std::string> text = RenderMachine(*list, /*multiline=*/true, options.output);
    if (!text.ok()) return Fail(err, args[0], text.status());
    if (!text->empty()) out << *text << "\n";
  } else {
    out << FormatWorkers(*list, absl::Now());
  }
  return kExitOk;
}

int Drain(JobClient& client, const Options& options, const std::vector<std::string>& args,
          std::ostream& out, std::ostream& err) {
  absl::StatusOr<mesa::v1::WorkerInfo> w = client.DrainWorker(args[1], options.evict);
  if (!w.ok()) return Fail(err, args[0], w.status());
  if (options.evict && !options.json) {
    out << "worker " << w->id() << " cordoned: it takes no new jobs; "
        << (w->running_jobs().empty()
                ? std::string("no jobs were running there")
                : absl::StrCat("evicting ", absl::StrJoin(w->running_jobs(), ", "),
                               " (they checkpoint and continue elsewhere)"))
        << "\n";
    return kExitOk;
  }
  return PrintWorker(options, out, err, args[0], *w, "cordoned: it takes no new jobs");
}

int Uncordon(JobClient& client, const Options& options, const std::vector<std::string>& args,
             std::ostream& out, std::ostream& err) {
  absl::StatusOr<mesa::v1::WorkerInfo> w = client.UncordonWorker(args[1]);
  if (!w.ok()) return Fail(err, args[0], w.status());
  return PrintWorker(options, out, err, args[0], *w, "uncordoned: it takes jobs again");
}

int Forget(JobClient& client, const Options& options, const std::vector<std::string>& args,
           std::ostream& out, std::ostream& err) {
  if (absl::Status s = client.ForgetWorker(args[1]); !s.ok()) return Fail(err, args[0], s);
  out << (options.json ? "{}" : absl::StrCat("worker ", args[1], " forgotten")) << "\n";
  return kExitOk;
}

int Version(JobClient& client, const Options& options, const std::vector<std::string>& /*args*/,
            std::ostream& out, std::ostream& err) {
  absl::StatusOr<mesa::v1::VersionInfo> server = client.ServerVersion();
  if (options.json) {
    std::string line =
        absl::StrCat("{\"client\": {\"version\": \"", kVersion, "\", \"component\": \"mesactl\"}");
    if (server.ok()) {
      absl::StatusOr<std::string> json = ToJson(*server, /*multiline=*/false);
      if (json.ok()) absl::StrAppend(&line, ", \"server\": ", *json);
    }
    line += "}";
    if (options.output == OutputFormat::kYaml) {
      absl::StatusOr<std::string> yaml = JsonToYaml(line);
      if (!yaml.ok()) return Fail(err, "version", yaml.status());
      line = *yaml;
    }
    out << line << "\n";
  } else {
    out << "mesactl " << kVersion << "\n";
    if (server.ok()) out << "coordinator " << server->version() << " (" << options.server << ")\n";
  }
  if (!server.ok()) return Fail(err, "version", server.status());
  return kExitOk;
}

}  // namespace mesa::cli
