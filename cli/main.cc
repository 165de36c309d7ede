// mesactl: the command-line client of the MesaNet coordinator. See docs/mesactl.md.

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/config.h"
#include "cli/format.h"

ABSL_FLAG(std::string, config, "",
          "Configuration file with named contexts (default: $MESA_CONFIG, else "
          "$XDG_CONFIG_HOME/mesa/config.yaml or ~/.config/mesa/config.yaml if it exists).");
ABSL_FLAG(std::string, context, "",
          "Context of the configuration file to use (default: $MESA_CONTEXT, else the file's "
          "current_context): its server, ca and token apply where no flag or variable sets them.");
ABSL_FLAG(std::string, server, "",
          "Coordinator address HOST:PORT (default: $MESA_SERVER, else the context's, else "
          "127.0.0.1:50051).");
ABSL_FLAG(std::string, ca, "",
          "CA certificate (PEM) that signed the coordinator's TLS certificate: connect over TLS "
          "(default: $MESA_CA, else the context's; none: plaintext).");
ABSL_FLAG(std::string, token, "",
          "Bearer token for a coordinator with --tokens_file (default: $MESA_TOKEN, else the "
          "context's). Prefer the variable or a context: a flag is visible to other local users "
          "in the process list.");
ABSL_FLAG(bool, json, false, "Machine-readable output: protobuf JSON with snake_case fields.");
ABSL_FLAG(std::string, output, "",
          "Output format, as kubectl's -o: json (as --json), yaml, name (job/ID, worker/ID lines), "
          "wide or text (the default; the tables already show every column).");
ABSL_FLAG(std::string, o, "", "Short for --output.");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(30),
          "Deadline of each call (e.g. 10s); streams (watch, logs --follow) are unbounded.");
ABSL_FLAG(std::string, client_job_id, "",
          "submit: idempotency key; resubmitting the same spec with it returns the same job. "
          "Default: a random key, so mesactl's own retries never duplicate a job.");
ABSL_FLAG(bool, watch, false, "submit: follow the job after submitting it.");
ABSL_FLAG(std::vector<std::string>, data_roots, {},
          "submit: check the spec's paths against the coordinator's --data_roots before sending");
ABSL_FLAG(
    std::string, checkpoint_root, "",
    "submit: check checkpoint.dir against the coordinator's --checkpoint_root before sending");
ABSL_FLAG(std::string, state, "", "list: comma-separated states, e.g. queued,running.");
ABSL_FLAG(std::string, queue, "", "list: only jobs of this queue.");
ABSL_FLAG(std::vector<std::string>, label, {},
          "list: only jobs with label k=v (repeat the flag or separate with commas).");
ABSL_FLAG(int, limit, 100, "list, audit: at most this many jobs / records (0 = all).");
ABSL_FLAG(std::string, reason, "", "cancel: reason recorded with the cancellation.");
ABSL_FLAG(bool, evict, false,
          "drain: also stop the jobs running on the worker; they checkpoint and continue "
          "elsewhere (an eviction uses none of a job's retries).");
ABSL_FLAG(std::string, caller, "", "audit: only records of this caller (user or worker name).");
ABSL_FLAG(std::string, target, "", "audit: only records about this job or worker id.");
ABSL_FLAG(bool, follow, false, "logs: keep streaming until the job ends.");
ABSL_FLAG(int64_t, from_sequence, 0, "watch/logs: start after this sequence number.");

namespace {

// The flag's value, else the environment variable's, else `fallback` (the context's).
std::string FlagOrEnv(const std::string& flag, const char* variable,
                      const std::string& fallback = "") {
  if (!flag.empty()) return flag;
  const char* env = std::getenv(variable);
  return env != nullptr && *env != '\0' ? env : fallback;
}

// kubectl's conventions: -h or --help anywhere (before "--") asks for help, of the command if
// one is named. Returns the command's name ("" for none), or nullopt when no help is asked.
std::optional<std::string> HelpRequested(const std::vector<std::string>& args) {
  bool asked = false;
  std::string command;
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] == "-h" || args[i] == "--help" || args[i] == "-help") asked = true;
    const std::string usage = mesa::cli::UsageText();
    if (command.empty() && !absl::StartsWith(args[i], "-") &&
        mesa::cli::CommandHelp(usage, args[i]) != usage) {
      command = args[i];
    }
  }
  if (!asked) return std::nullopt;
  return command;
}

// Every flag is known and its value parses: a mistake is a usage error (exit 2), where
// absl::ParseCommandLine would exit 1.
absl::Status CheckFlags(const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    absl::string_view arg = args[i];
    if (arg.size() < 2 || arg[0] != '-') continue;
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const size_t eq = arg.find('=');
    const std::string name(arg.substr(0, eq));
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>() && eq == absl::string_view::npos) {
        continue;
      }
    }
    if (flag == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", error));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(mesa::cli::UsageText());
  // --help lists mesactl's own flags, not those of the libraries it links.
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "cli/main.cc");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  // `--label` may repeat; absl keeps only the last occurrence, so join them first.
  std::vector<std::string> raw(argv, argv + argc);
  if (std::optional<std::string> command = HelpRequested(raw)) {
    std::cout << mesa::cli::CommandHelp(mesa::cli::UsageText(), *command);
    return 0;
  }
  std::vector<std::string> merged = mesa::cli::MergeRepeatedFlag(raw, "label");
  if (absl::Status s = CheckFlags(merged); !s.ok()) {
    std::cerr << "mesactl: " << s.message() << "\nRun 'mesactl help' for usage.\n";
    return 2;
  }
  std::vector<char*> merged_argv;
  for (std::string& arg : merged) merged_argv.push_back(arg.data());
  merged_argv.push_back(nullptr);
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(merged.size()), merged_argv.data());

  // Flags, then environment variables, then the configuration file's context.
  const std::string config_flag = FlagOrEnv(absl::GetFlag(FLAGS_config), "MESA_CONFIG");
  absl::StatusOr<mesa::cli::ContextSettings> context =
      mesa::cli::LoadContext(config_flag.empty() ? mesa::cli::DefaultConfigPath() : config_flag,
                             FlagOrEnv(absl::GetFlag(FLAGS_context), "MESA_CONTEXT"),
                             /*must_exist=*/!config_flag.empty());
  if (!context.ok()) {
    std::cerr << "mesactl: " << context.status().message() << "\n";
    return 2;
  }
  for (const std::string& warning : context->warnings) std::cerr << "mesactl: " << warning << "\n";

  mesa::cli::Options options;
  options.server = FlagOrEnv(absl::GetFlag(FLAGS_server), "MESA_SERVER",
                             context->server.empty() ? "127.0.0.1:50051" : context->server);
  const std::string output_flag =
      absl::GetFlag(FLAGS_o).empty() ? absl::GetFlag(FLAGS_output) : absl::GetFlag(FLAGS_o);
  absl::StatusOr<mesa::cli::OutputFormat> output = mesa::cli::ParseOutputFormat(output_flag);
  if (!output.ok()) {
    std::cerr << "mesactl: " << output.status().message() << "\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_json)) {
    if (*output != mesa::cli::OutputFormat::kText && *output != mesa::cli::OutputFormat::kJson) {
      std::cerr << "mesactl: --json and -o " << output_flag << " disagree\n";
      return 2;
    }
    output = mesa::cli::OutputFormat::kJson;
  }
  options.output = *output;
  options.json = options.output != mesa::cli::OutputFormat::kText;
  options.timeout = absl::GetFlag(FLAGS_timeout);
  options.client_job_id = absl::GetFlag(FLAGS_client_job_id);
  options.data_roots = absl::GetFlag(FLAGS_data_roots);
  options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root);
  options.watch = absl::GetFlag(FLAGS_watch);
  options.states = absl::GetFlag(FLAGS_state);
  options.queue = absl::GetFlag(FLAGS_queue);
  options.labels = absl::GetFlag(FLAGS_label);
  options.limit = absl::GetFlag(FLAGS_limit);
  options.reason = absl::GetFlag(FLAGS_reason);
  options.evict = absl::GetFlag(FLAGS_evict);
  options.caller = absl::GetFlag(FLAGS_caller);
  options.target = absl::GetFlag(FLAGS_target);
  options.follow = absl::GetFlag(FLAGS_follow);
  options.from_sequence = absl::GetFlag(FLAGS_from_sequence);
  options.tty = isatty(STDOUT_FILENO) == 1;
  winsize ws{};
  if (options.tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    options.terminal_width = ws.ws_col;
  }

  std::vector<std::string> args(positional.begin() + 1, positional.end());
  if (!args.empty() && args[0] == "completion") {
    if (args.size() != 2 || args[1] != "bash") {
      std::cerr << "mesactl: completion takes one argument: bash\nRun 'mesactl help' for usage.\n";
      return 2;
    }
    std::vector<std::string> flags;
    for (const auto& [name, flag] : absl::GetAllFlags()) {
      // -o is completed as --output.
      if (absl::EndsWith(flag->Filename(), "cli/main.cc") && name.size() > 1) {
        flags.emplace_back(name);
      }
    }
    std::sort(flags.begin(), flags.end());
    std::cout << mesa::cli::BashCompletion(mesa::cli::CommandNames(mesa::cli::UsageText()), flags);
    return 0;
  }
  mesa::cli::ConnectOptions connect{
      .ca = FlagOrEnv(absl::GetFlag(FLAGS_ca), "MESA_CA", context->ca),
      .token = FlagOrEnv(absl::GetFlag(FLAGS_token), "MESA_TOKEN", context->token)};
  auto client = mesa::cli::JobClient::Connect(options.server, options.timeout, connect);
  if (!client.ok()) {
    std::cerr << "mesactl: " << client.status().message() << "\n";
    return 2;
  }
  return mesa::cli::RunCommand(**client, options, args, std::cout, std::cerr);
}
