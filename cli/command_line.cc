#include "cli/command_line.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/utf8.h"
#include "cli/cluster_commands.h"
#include "cli/format.h"

namespace mesa::cli {
namespace {

// Help lines stay within kHelpWidth columns; descriptions start at kHelpColumn.
constexpr size_t kHelpWidth = 100;
constexpr size_t kHelpColumn = 32;

// `text` broken into lines of at most `width` columns at spaces.
std::string Wrap(const std::string& text, size_t width) {
  std::string out;
  size_t line = 0;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line > 0 && line + 1 + word.size() > width) {
      out += "\n";
      line = 0;
    } else if (line > 0) {
      out += " ";
      ++line;
    }
    absl::StrAppend(&out, word);
    line += word.size();
  }
  return out;
}

// CLI11's formatter with descriptions wrapped (CLI11 indents the lines after a newline).
class WrappingFormatter : public CLI::Formatter {
 public:
  WrappingFormatter() {
    column_width(kHelpColumn);
    label("OPTIONS", "FLAGS");
    label("SUBCOMMAND", "COMMAND");
    label("Positionals", "Arguments");
  }
  std::string make_option_desc(const CLI::Option* option) const override {
    return Wrap(option->get_description(), kHelpWidth - kHelpColumn);
  }
  std::string make_subcommand(const CLI::App* command) const override {
    std::stringstream out;
    CLI::detail::format_help(out, command->get_name(),
                             Wrap(command->get_description(), kHelpWidth - kHelpColumn),
                             column_width_);
    return out.str();
  }
};

// The shells `mesactl completion` writes a script for.
const std::vector<std::string> kShells = {"bash"};

// A CLI11 check from a parser of ours: its message when `text` does not parse.
CLI::Validator Check(std::function<absl::Status(const std::string&)> parse) {
  return CLI::Validator(
      [parse = std::move(parse)](std::string& text) {
        const absl::Status status = parse(text);
        return status.ok() ? std::string() : std::string(status.message());
      },
      /*validator_desc=*/"");
}

absl::Status ParseTimeout(const std::string& text) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("want a positive duration such as 10s or 1m, got \"", text, "\""));
  }
  return absl::OkStatus();
}

// Every text mesactl sends must be UTF-8: protobuf refuses a request with a string field that is
// not, before the coordinator sees it. Says which argument and where, instead of a server error.
absl::Status ArgumentsAreUtf8(const Options& options, const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, const std::string*>> texts;
  for (size_t i = 1; i < args.size(); ++i) {
    texts.push_back({absl::StrCat("argument ", i), &args[i]});
  }
  texts.push_back({"--reason", &options.reason});
  texts.push_back({"--queue", &options.queue});
  texts.push_back({"--client_job_id", &options.client_job_id});
  for (const std::string& label : options.labels) texts.push_back({"--label", &label});
  for (const auto& [name, text] : texts) {
    const size_t bad = base::FirstInvalidUtf8(*text);
    if (bad >= text->size()) continue;
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s %s is not valid UTF-8 (byte 0x%02x at offset %d); the API's text fields must be UTF-8",
        args[0], name, static_cast<unsigned char>((*text)[bad]), bad));
  }
  return absl::OkStatus();
}

}  // namespace

CommandLine::CommandLine()
    : app_("mesactl: the command-line client of the MesaNet coordinator (docs/mesactl.md)",
           "mesactl") {
  app_.fallthrough();  // global flags may also follow the command, as kubectl's
  app_.require_subcommand(0, 1);
  app_.formatter(std::make_shared<WrappingFormatter>());  // the commands inherit it
  app_.option_defaults()->group("Global flags");
  app_.set_help_flag("-h,--help", "print this help and exit");
  app_.footer(
      "Global flags may go before or after the command (mesactl --json get ID = mesactl get ID "
      "--json), a command's own flags after it.\n"
      "Exit codes: 0 ok (watch: the job SUCCEEDED), 1 error, 2 usage, 3 job FAILED, 4 job "
      "CANCELLED.");

  // Where to connect: the flag, else the variable, else (main.cc) the context.
  struct Connection {
    const char* name;
    std::string* value;
    const char* variable;
    const char* type;
    const char* description;
  };
  for (const Connection& flag : {
           Connection{"--config", &globals_.config, "MESA_CONFIG", "FILE",
                      "configuration file with named contexts (default: "
                      "~/.config/mesa/config.yaml if it exists)"},
           Connection{"--context", &globals_.context, "MESA_CONTEXT", "NAME",
                      "context of the configuration file (default: its current_context)"},
           Connection{"--server", &globals_.server, "MESA_SERVER", "HOST:PORT",
                      "coordinator address (default: the context's, else 127.0.0.1:50051); "
                      "replicated coordinators: IP:PORT,IP:PORT,..."},
           Connection{"--ca", &globals_.ca, "MESA_CA", "FILE",
                      "CA (PEM) of the coordinator's TLS certificate (default: the context's; "
                      "none: plaintext)"},
           Connection{"--token", &globals_.token, "MESA_TOKEN", "TOKEN",
                      "bearer token (default: the context's; prefer the variable or a context: "
                      "a flag is visible to other local users)"},
       }) {
    app_.add_option(flag.name, *flag.value, flag.description)
        ->envname(flag.variable)
        ->type_name(flag.type);
  }
  app_.add_flag("--json", json_, "machine-readable output: protobuf JSON, snake_case fields");
  app_.add_option("-o,--output", output_,
                  "json (as --json), yaml, name (job/ID, worker/ID lines), wide or text (the "
                  "default tables)")
      ->type_name("FORMAT")
      ->check(Check([](const std::string& text) {
        // `-o=name` reaches CLI11 as "=name" (kubectl and absl accept it).
        return ParseOutputFormat(absl::StripPrefix(text, "=")).status();
      }));
  app_.add_option("--timeout", timeout_,
                  "deadline of each call; streams (watch, logs --follow) have none")
      ->type_name("DURATION")
      ->capture_default_str()
      ->check(Check(ParseTimeout));

  // Each command's own flags and help.
  app_.option_defaults()->group("Flags");
  auto labels = [this](CLI::App* command, const std::string& description) {
    command->add_option("--label", options_.labels, description)
        ->type_name("k=v")
        ->allow_extra_args(false);  // one pair (or comma-separated pairs) per --label
  };
  auto queue = [this](CLI::App* command, const std::string& description) {
    command->add_option("--queue", options_.queue, description)->type_name("Q");
  };
  auto limit = [this](CLI::App* command, const std::string& description) {
    command->add_option("--limit", options_.limit, description)
        ->type_name("N")
        ->capture_default_str()
        ->check(Check([](const std::string& text) {
          int n;
          return absl::SimpleAtoi(text, &n) && n < 0
                     ? absl::InvalidArgumentError("must be >= 0 (0: all)")
                     : absl::OkStatus();  // a number that does not parse: CLI11 says so
        }));
  };
  auto from_sequence = [this](CLI::App* command) {
    command
        ->add_option("--from_sequence", options_.from_sequence,
                     "start after this event sequence number (default: from the start)")
        ->type_name("N");
  };

  CLI::App* submit = Add("submit", "submit a job file and print the job",
                         {.run = Submit, .names_output = true, .operand = Operand::kFile});
  AddOperand(submit, "FILE", "the job file (YAML, docs/formats.md); \"-\" reads stdin");
  submit
      ->add_option("--client_job_id", options_.client_job_id,
                   "idempotency key: the same spec again with it returns the same job "
                   "(default: a random key)")
      ->type_name("ID");
  submit
      ->add_option("--set", options_.sets,
                   "override a field of the job file before it is checked: KEY a dotted path, "
                   "VALUE YAML (--set training.steps=100 --set model.layer_mixers=[mesa,gla]); "
                   "repeatable, applied in order")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  submit
      ->add_option("--then", options_.then_files,
                   "a job file to run after the previous job succeeds (a pipeline: depends_on is "
                   "added; its job:previous references name that job); repeatable, in order; "
                   "--set applies to FILE only")
      ->type_name("FILE")
      ->allow_extra_args(false);
  submit->add_flag("--watch", options_.watch,
                   "follow the job after submitting it, as watch (and exit as it does; with "
                   "--then, the last job)");
  submit
      ->add_option("--data_roots", options_.data_roots,
                   "check the spec's paths against the coordinator's --data_roots first")
      ->type_name("DIR[,DIR...]")
      ->delimiter(',')
      ->allow_extra_args(false);
  submit
      ->add_option("--checkpoint_root", options_.checkpoint_root,
                   "check checkpoint.dir against the coordinator's --checkpoint_root first")
      ->type_name("DIR");

  CLI::App* list = Add("list", "list jobs, newest first", {.run = List, .names_output = true});
  list->add_option("--state", options_.states,
                   "only jobs in one of these states (queued, running, ...; comma-separated)")
      ->type_name("S[,S...]");
  queue(list, "only jobs of this queue");
  labels(list, "only jobs with every label k=v (repeat the flag or separate with commas)");
  limit(list, "at most this many jobs, the newest (0: all)");

  CLI::App* get =
      Add("get", "show one job", {.run = Get, .names_output = true, .operand = Operand::kJob});
  AddOperand(get, "ID", "the job");
  get->add_flag("--csv", options_.csv,
                "an array job's table as CSV (one row per checkpoint, CG setting, task and "
                "metric)");

  CLI::App* compare = Add("compare",
                          "ΔNLL per token position of EVAL job ID_A against reference ID_B "
                          "(eval.per_position)",
                          {.run = Compare, .operand = Operand::kJob});
  AddOperand(compare, "ID_A", "the job compared");
  AddOperand(compare, "ID_B", "the reference job");

  CLI::App* cancel = Add("cancel", "cancel a job, or every unfinished job a --label selects",
                         {.run = Cancel, .names_output = true, .operand = Operand::kJob});
  AddOperand(cancel, "ID", "the job (or give --label instead)", /*optional=*/true);
  cancel->add_option("--reason", options_.reason, "reason recorded with the cancellation")
      ->type_name("R");
  labels(cancel, "cancel every unfinished job with every label k=v (instead of an ID)");
  queue(cancel, "with --label: only jobs of this queue");

  CLI::App* watch = Add("watch", "follow a job's events until it ends (exit 3 FAILED, 4 CANCELLED)",
                        {.run = Watch, .operand = Operand::kJob});
  AddOperand(watch, "ID", "the job");
  from_sequence(watch);

  CLI::App* logs = Add("logs", "print a job's logs", {.run = Logs, .operand = Operand::kJob});
  AddOperand(logs, "ID", "the job");
  logs->add_flag("--follow", options_.follow, "keep streaming until the job ends");
  from_sequence(logs);

  AddOperand(Add("explain", "why a job is where it is (pending: why)",
                 {.run = Explain, .operand = Operand::kJob}),
             "ID", "the job");

  CLI::App* audit =
      Add("audit", "the coordinator's audit log, oldest first (admins)", {.run = Audit});
  audit->add_option("--caller", options_.caller, "only records of this user or worker")
      ->type_name("NAME");
  audit->add_option("--target", options_.target, "only records about this job or worker id")
      ->type_name("ID");
  limit(audit, "at most this many records (0: all)");

  Add("workers", "list workers: state, free/total GPUs and CPU slots, jobs, lease age",
      {.run = Workers, .names_output = true});
  CLI::App* drain = Add("drain",
                        "cordon a worker: no new jobs there; running ones continue to their end "
                        "(admins)",
                        {.run = Drain, .names_output = true, .operand = Operand::kWorker});
  AddOperand(drain, "WORKER", "the worker's id");
  drain->add_flag("--evict", options_.evict,
                  "also stop its jobs: they checkpoint and continue elsewhere (no retry used)");
  AddOperand(Add("uncordon", "let a drained worker take jobs again (admins)",
                 {.run = Uncordon, .names_output = true, .operand = Operand::kWorker}),
             "WORKER", "the worker's id");
  AddOperand(
      Add("forget", "forget a worker without a live lease: its row and metric series (admins)",
          {.run = Forget, .operand = Operand::kWorker}),
      "WORKER", "the worker's id");
  Add("version", "mesactl's and the coordinator's version", {.run = Version});

  CLI::App* completion =
      Add("completion", "a shell completion script: source <(mesactl completion bash)",
          {.local =
               [this](const std::vector<std::string>&, std::ostream& out) {
                 out << BashCompletion();
                 return kExitOk;
               },
           .operand = Operand::kShell});
  AddOperand(completion, "SHELL", "the shell: " + absl::StrJoin(kShells, ", "));
  completion->get_option("SHELL")->check(CLI::IsMember(kShells));

  CLI::App* help = Add("help", "this help, or a command's",
                       {.local =
                            [this](const std::vector<std::string>& args, std::ostream& out) {
                              out << Help(args.size() > 1 ? args[1] : "");
                              return kExitOk;
                            },
                        .operand = Operand::kCommand});
  AddOperand(help, "COMMAND", "the command", /*optional=*/true);
  help->get_option("COMMAND")->check(Check([this](const std::string& name) {
    for (const std::string& known : CommandNames()) {
      if (name == known) return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown command \"", name, "\""));
  }));

  // Every command's help names the global flags (kubectl's `kubectl options`, in one line).
  const std::string globals =
      Wrap(absl::StrCat("Global flags, before or after the command (mesactl --help): ",
                        absl::StrJoin(FlagNames(app_), " "), "."),
           kHelpWidth);
  for (CLI::App* command : app_.get_subcommands([](CLI::App*) { return true; })) {
    command->footer(globals);
  }
}

CLI::App* CommandLine::Add(const std::string& name, const std::string& description,
                           CommandSpec command) {
  CLI::App* sub = app_.add_subcommand(name, description);
  sub->group("Commands");
  sub->set_help_flag("-h,--help", "print this help and exit");  // among the command's flags
  commands_[sub] = std::move(command);
  return sub;
}

void CommandLine::AddOperand(CLI::App* command, const std::string& name,
                             const std::string& description, bool optional) {
  // Read back from the option's results in Parse, in declaration order.
  CLI::Option* option = command->add_option(
      name, [](const CLI::results_t&) { return true; }, description);
  option->type_name("");
  if (!optional) option->required();
  commands_.at(command).operands.push_back(option);
}

std::vector<std::string> CommandLine::FlagNames(const CLI::App& app, bool with_values_only) {
  std::vector<std::string> names;
  for (const CLI::Option* option :
       app.get_options([&app](const CLI::Option* o) { return o->nonpositional(); })) {
    if (option == app.get_help_ptr()) continue;
    if (with_values_only && option->get_expected_max() == 0) continue;  // a flag
    for (const std::string& s : option->get_snames()) names.push_back("-" + s);
    for (const std::string& l : option->get_lnames()) names.push_back("--" + l);
  }
  return names;
}

std::vector<std::string> CommandLine::CommandNames() const {
  std::vector<std::string> names;
  for (const CLI::App* sub : app_.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

std::string CommandLine::Help(const std::string& command) const {
  for (const CLI::App* sub : app_.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == command) {
      return sub->get_formatter()->make_help(sub, "mesactl " + command, CLI::AppFormatMode::Normal);
    }
  }
  return app_.get_formatter()->make_help(&app_, "mesactl", CLI::AppFormatMode::Normal);
}

std::string CommandLine::DescribeError(const CLI::ParseError& error,
                                       const CLI::App* command) const {
  const std::string where = command == nullptr ? "" : command->get_name() + ": ";
  // An unknown flag first: CLI11 checks required arguments before it reports extra ones.
  const std::vector<std::string> extras = app_.remaining(/*recurse=*/true);
  const std::string first = extras.empty() ? "" : extras.front();
  const bool extra = dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr;
  if (!absl::StartsWith(first, "-") && !extra) return where + error.what();
  if (!absl::StartsWith(first, "-")) {
    return command == nullptr ? absl::StrCat("unknown command \"", first, "\"")
                              : absl::StrCat(where, "unexpected argument \"", first, "\"");
  }
  const std::string flag = first.substr(0, first.find('='));
  std::vector<std::string> owners;
  for (const std::string& name : CommandNames()) {
    for (const std::string& known : FlagNames(*app_.get_subcommand(name))) {
      if (known == flag) owners.push_back(name);
    }
  }
  std::string message = absl::StrCat(where, "unknown flag ", flag);
  if (!owners.empty() && (command == nullptr || std::find(owners.begin(), owners.end(),
                                                          command->get_name()) == owners.end())) {
    absl::StrAppend(&message, " (a flag of ", absl::StrJoin(owners, ", "), ")");
  } else if (!owners.empty()) {
    absl::StrAppend(&message, " (", command->get_name(), "'s flags go after the command)");
  }
  return message;
}

std::string CommandLine::CheckCombination(const CLI::App& command, const CommandSpec& spec) const {
  absl::StatusOr<OutputFormat> output = ParseOutputFormat(absl::StripPrefix(output_, "="));
  if (json_ && *output != OutputFormat::kText && *output != OutputFormat::kJson) {
    return absl::StrCat("--json and -o ", output_, " disagree");
  }
  if (*output == OutputFormat::kName && (!spec.names_output || options_.watch)) {
    std::vector<std::string> named;
    for (const std::string& name : CommandNames()) {
      if (commands_.at(app_.get_subcommand(name)).names_output) named.push_back(name);
    }
    return absl::StrCat("-o name: not for ", command.get_name(), options_.watch ? " --watch" : "",
                        " (only ", absl::StrJoin(named, ", "), ")");
  }
  return "";
}

Invocation CommandLine::Parse(const std::vector<std::string>& argv, std::ostream& out,
                              std::ostream& err) {
  std::vector<const char*> pointers;
  for (const std::string& arg : argv) pointers.push_back(arg.c_str());
  return Parse(static_cast<int>(pointers.size()), pointers.data(), out, err);
}

Invocation CommandLine::Parse(int argc, const char* const* argv, std::ostream& out,
                              std::ostream& err) {
  Invocation result;
  auto selected = [this]() -> CLI::App* {
    std::vector<CLI::App*> subs = app_.get_subcommands();
    return subs.empty() ? nullptr : subs.front();
  };
  auto usage_error = [&](const CLI::App* command, const std::string& message) {
    err << "mesactl: " << message << "\nRun 'mesactl "
        << (command == nullptr ? "" : command->get_name() + " ") << "--help' for usage.\n";
    result.exit_code = kExitUsage;
    return result;
  };
  try {
    app_.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    CLI::App* command = selected();
    // -h/--help anywhere wins over any other mistake on the line, as kubectl's.
    if (e.get_exit_code() == 0 || app_.get_help_ptr()->count() > 0 ||
        (command != nullptr && command->get_help_ptr()->count() > 0)) {
      out << Help(command == nullptr ? "" : command->get_name());
      result.exit_code = kExitOk;
      return result;
    }
    return usage_error(command, DescribeError(e, command));
  }
  CLI::App* command = selected();
  if (command == nullptr) {
    err << Help();
    result.exit_code = kExitUsage;
    return result;
  }
  const CommandSpec& spec = commands_.at(command);
  result.args = {command->get_name()};
  for (const CLI::Option* operand : spec.operands) {
    for (const std::string& value : operand->results()) result.args.push_back(value);
  }
  if (const std::string mistake = CheckCombination(*command, spec); !mistake.empty()) {
    return usage_error(command, mistake);
  }
  if (absl::Status utf8 = ArgumentsAreUtf8(options_, result.args); !utf8.ok()) {
    return usage_error(command, std::string(utf8.message()));
  }
  if (spec.local) {
    result.exit_code = spec.local(result.args, out);
    return result;
  }
  result.globals = globals_;
  result.options = options_;
  result.options.output = *ParseOutputFormat(absl::StripPrefix(output_, "="));
  if (json_) result.options.output = OutputFormat::kJson;
  result.options.json = result.options.output != OutputFormat::kText;
  absl::ParseDuration(timeout_, &result.options.timeout);  // checked by ParseTimeout
  result.run = spec.run;
  return result;
}

std::string CommandLine::BashCompletion() const {
  std::string cases;
  for (const std::string& name : CommandNames()) {
    const CLI::App* sub = app_.get_subcommand(name);
    std::string operands;
    switch (commands_.at(sub).operand) {
      case Operand::kNone:
        break;
      case Operand::kJob:
        operands = "names=$(mesactl list -o name 2>/dev/null)";
        break;
      case Operand::kWorker:
        operands = "names=$(mesactl workers -o name 2>/dev/null)";
        break;
      case Operand::kFile:
        operands = "files=1";
        break;
      case Operand::kShell:
        operands = absl::StrCat("names=\"", absl::StrJoin(kShells, " "), "\"");
        break;
      case Operand::kCommand:
        operands = absl::StrCat("names=\"", absl::StrJoin(CommandNames(), " "), "\"");
        break;
    }
    const std::vector<std::string> flags = FlagNames(*sub);
    absl::StrAppend(
        &cases, "    ", name, ")",
        flags.empty() ? "" : absl::StrCat(" flags+=\" ", absl::StrJoin(flags, " "), "\";"),
        operands.empty() ? "" : " ", operands, " ;;\n");
  }
  std::vector<absl::string_view> formats;
  for (const auto& [name, format] : kOutputFormats) formats.push_back(name);
  return absl::StrCat(R"(# mesactl completion for bash: source <(mesactl completion bash)
_mesactl() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd="" i
  local flags="--help )",
                      absl::StrJoin(FlagNames(app_), " "), R"(" names="" files=""
  [[ $prev == = ]] && prev=${COMP_WORDS[COMP_CWORD-2]}  # --output=<TAB>
  if [[ $prev == -o || $prev == --output ]]; then
    COMPREPLY=($(compgen -W ")",
                      absl::StrJoin(formats, " "), R"(" -- "${cur#=}"))
    return
  fi
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${COMP_WORDS[i]} in
      )",
                      absl::StrJoin(FlagNames(app_, /*with_values_only=*/true), "|"),
                      R"() [[ ${COMP_WORDS[i+1]} == = ]] || ((i++)) ;;  # its value is the next word
      =|:) ((i++)) ;;  # bash splits --flag=value and HOST:PORT into words
      -*) ;;
      *) cmd=${COMP_WORDS[i]}; break ;;
    esac
  done
  case $cmd in
)",
                      cases, R"(  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
  elif [[ -z $cmd ]]; then
    COMPREPLY=($(compgen -W ")",
                      absl::StrJoin(CommandNames(), " "), R"(" -- "$cur"))
  elif [[ -n $files ]]; then
    COMPREPLY=($(compgen -f -- "$cur"))
  else
    names=${names//job\//}
    COMPREPLY=($(compgen -W "${names//worker\//}" -- "$cur"))
  fi
}
complete -F _mesactl mesactl
)");
}

}  // namespace mesa::cli
