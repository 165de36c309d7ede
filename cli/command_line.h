// mesactl's command line as a CLI11 model (kubectl's conventions): one subcommand per command with
// its own flags, positional arguments and help; the global flags on the app. Parsing, help, usage
// errors (exit 2), dispatch and the bash completion script all come from this one model, so they
// cannot disagree. See docs/mesactl.md.

#ifndef MESANET_CLI_COMMAND_LINE_H_
#define MESANET_CLI_COMMAND_LINE_H_

#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli/client.h"
#include "cli/commands.h"

namespace mesa::cli {

// Where mesactl connects: each from its flag, else its variable (CLI11's envname), else the
// configuration file's context (main.cc), else the default.
struct GlobalFlags {
  std::string config;   // --config, $MESA_CONFIG
  std::string context;  // --context, $MESA_CONTEXT
  std::string server;   // --server, $MESA_SERVER
  std::string ca;       // --ca, $MESA_CA
  std::string token;    // --token, $MESA_TOKEN
};

// What a parsed command line asks for.
struct Invocation {
  // Set when parsing settled the run: help printed (0), a usage error reported (2), or a command
  // that needs no coordinator (`help`, `completion`) done.
  std::optional<int> exit_code;
  GlobalFlags globals;
  Options options;
  // {command, its positional arguments...}; the model guarantees their number.
  std::vector<std::string> args;
  CommandFn run = nullptr;
};

class CommandLine {
 public:
  CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // Parses argv (argv[0] is the program). Help goes to `out`, usage errors (one line and a hint)
  // to `err`. Call once per CommandLine: the flags are bound to its members.
  Invocation Parse(int argc, const char* const* argv, std::ostream& out, std::ostream& err);
  Invocation Parse(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);

  // `mesactl --help`, or `mesactl COMMAND --help` for a command (empty: the app's).
  std::string Help(const std::string& command = "") const;
  // The command names, in the order of the help text.
  std::vector<std::string> CommandNames() const;
  // `mesactl completion bash`: completes commands, the global flags and each command's own flags,
  // and job IDs, worker names or files where a command's positional argument takes one.
  std::string BashCompletion() const;

 private:
  // How a command's positional arguments are completed.
  enum class Operand { kNone, kJob, kWorker, kFile, kShell, kCommand };
  struct CommandSpec {
    CommandFn run = nullptr;  // null for help and completion, which need no coordinator:
    std::function<int(const std::vector<std::string>& args, std::ostream& out)> local;
    bool names_output = false;  // its output has names for -o name
    Operand operand = Operand::kNone;
    std::vector<const CLI::Option*> operands;  // its positional arguments, in order
  };

  CLI::App* Add(const std::string& name, const std::string& description, CommandSpec command);
  // A positional argument (required unless `optional`).
  void AddOperand(CLI::App* command, const std::string& name, const std::string& description,
                  bool optional = false);
  // Usage checks across flags that CLI11 cannot express; "" when there is no mistake.
  std::string CheckCombination(const CLI::App& command, const CommandSpec& spec) const;
  // The one-line message for a CLI11 parse error, with the command's name where there is one.
  std::string DescribeError(const CLI::ParseError& error, const CLI::App* command) const;
  // Long flag names ("--limit") of `app` alone (not its parent's), help excluded.
  static std::vector<std::string> FlagNames(const CLI::App& app, bool with_values_only = false);

  CLI::App app_;
  std::map<const CLI::App*, CommandSpec> commands_;
  GlobalFlags globals_;
  Options options_;
  std::string output_;
  bool json_ = false;
  std::string timeout_ = "30s";
};

}  // namespace mesa::cli

#endif  // MESANET_CLI_COMMAND_LINE_H_
