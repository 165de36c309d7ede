// mesactl's commands, independent of flag parsing so they can run against any JobClient.

#ifndef MESANET_CLI_COMMANDS_H_
#define MESANET_CLI_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cli/client.h"
#include "cli/format.h"

namespace mesa::cli {

struct Options {
  std::string server = "127.0.0.1:50051";
  // Machine-readable output (-o json|yaml|name, or --json): `output` says which.
  bool json = false;
  OutputFormat output = OutputFormat::kText;
  absl::Duration timeout = absl::Seconds(30);
  // submit
  std::string client_job_id;
  // submit --set: "KEY=VALUE" overrides of the job file, in order (proto/spec_yaml.h).
  std::vector<std::string> sets;
  // submit --then: job files submitted after FILE, each depending on the one before it.
  std::vector<std::string> then_files;
  // submit: the coordinator's confined-path roots, checked here first when given.
  std::vector<std::string> data_roots;
  std::string checkpoint_root;
  bool watch = false;
  // list
  std::string states;
  std::string queue;
  std::vector<std::string> labels;
  int limit = 100;
  // get: an array job's table as CSV
  bool csv = false;
  // cancel
  std::string reason;
  // drain: also stop the jobs running there; they checkpoint and continue elsewhere.
  bool evict = false;
  // audit (with --limit)
  std::string caller;
  std::string target;
  // logs / watch
  bool follow = false;
  int64_t from_sequence = 0;
  // watch: draw a progress bar (stdout is a terminal) instead of event lines.
  bool tty = false;
  int terminal_width = 80;
  // watch: how long to keep reconnecting while the coordinator is unreachable.
  absl::Duration reconnect_window = absl::Minutes(1);
};

// A command against the coordinator. `args` = {command, its positional arguments...}, as many as
// the command line model (cli/command_line.cc) declares. Results go to `out`, errors to `err`.
// Returns the process exit code (see kExit* in cli/format.h).
using Command = int(JobClient& client, const Options& options, const std::vector<std::string>& args,
                    std::ostream& out, std::ostream& err);
using CommandFn = Command*;

// The job commands (docs/mesactl.md), each a Command; the cluster commands are in
// cli/cluster_commands.h.
Command Submit, List, Get, Compare, Cancel, Watch, Logs, Explain, Audit;

// A random client_job_id ("mesactl-" + 16 hex digits) so that mesactl can retry a submission
// whose answer was lost without creating a second job.
std::string NewClientJobId();

}  // namespace mesa::cli

#endif  // MESANET_CLI_COMMANDS_H_
