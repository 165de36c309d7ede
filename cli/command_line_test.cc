#include "cli/command_line.h"

#include <cstdlib>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/cluster_commands.h"
#include "gtest/gtest.h"

namespace mesa::cli {
namespace {

struct Parsed {
  Invocation invocation;
  std::string out;
  std::string err;
  std::optional<int> exit_code() const { return invocation.exit_code; }
};

// Parses `mesactl args...` with a fresh model (flags bind to its members).
Parsed Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "mesactl");
  CommandLine command_line;
  std::ostringstream out, err;
  Invocation invocation = command_line.Parse(args, out, err);
  return {std::move(invocation), out.str(), err.str()};
}

// A usage error: exit 2, nothing on stdout, one line naming the mistake and one with the hint.
void ExpectUsageError(const std::vector<std::string>& args, const std::string& message) {
  Parsed p = Parse(args);
  const std::string line = absl::StrJoin(args, " ");
  EXPECT_EQ(p.exit_code(), kExitUsage) << line;
  EXPECT_EQ(p.out, "") << line;
  std::vector<std::string> lines = absl::StrSplit(p.err, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << line << ":\n" << p.err;
  EXPECT_TRUE(absl::StrContains(lines[0], message)) << line << ":\n" << p.err;
  EXPECT_TRUE(absl::StartsWith(lines[1], "Run 'mesactl ")) << p.err;
}

TEST(CommandLineTest, EachCommandsHelpListsItsOwnFlagsOnly) {
  Parsed list = Parse({"list", "-h"});
  EXPECT_EQ(list.exit_code(), kExitOk);
  EXPECT_EQ(list.err, "");
  for (const char* flag : {"--state", "--queue", "--label", "--limit"}) {
    EXPECT_TRUE(absl::StrContains(list.out, flag)) << flag << "\n" << list.out;
  }
  for (const char* flag : {"--evict", "--client_job_id", "--follow", "--caller", "--reason"}) {
    EXPECT_FALSE(absl::StrContains(list.out, flag)) << flag << "\n" << list.out;
  }
  EXPECT_TRUE(absl::StartsWith(list.out, "list jobs, newest first\nUsage: mesactl list [FLAGS]\n"))
      << list.out;

  Parsed drain = Parse({"drain", "--help"});
  EXPECT_EQ(drain.exit_code(), kExitOk);
  EXPECT_TRUE(absl::StrContains(drain.out, "Usage: mesactl drain [FLAGS] WORKER")) << drain.out;
  EXPECT_TRUE(absl::StrContains(drain.out, "--evict")) << drain.out;
  EXPECT_FALSE(absl::StrContains(drain.out, "--limit")) << drain.out;

  // The app's help lists every command and the global flags, not the commands' flags.
  Parsed app = Parse({"--help"});
  EXPECT_EQ(app.exit_code(), kExitOk);
  for (const char* text : {"submit", "workers", "completion", "--server", "--timeout", "-o"}) {
    EXPECT_TRUE(absl::StrContains(app.out, text)) << text << "\n" << app.out;
  }
  EXPECT_FALSE(absl::StrContains(app.out, "--evict")) << app.out;
  // `help COMMAND` is the same text; `help` alone the app's.
  EXPECT_EQ(Parse({"help", "drain"}).out, drain.out);
  EXPECT_EQ(Parse({"help"}).out, app.out);
}

TEST(CommandLineTest, HelpAnywhereWinsOverOtherMistakes) {
  const std::string list_help = Parse({"list", "--help"}).out;
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"-h", "list"},
                                             {"list", "--limit=many", "-h"},
                                             {"list", "--bogus", "--help"},
                                             {"--server=x", "list", "extra", "-h"}}) {
    Parsed p = Parse(args);
    EXPECT_EQ(p.exit_code(), kExitOk) << absl::StrJoin(args, " ") << ": " << p.err;
    EXPECT_EQ(p.out, list_help) << absl::StrJoin(args, " ");
  }
  Parsed get = Parse({"get", "-h"});  // its required ID missing: still help
  EXPECT_EQ(get.exit_code(), kExitOk) << get.err;
  EXPECT_TRUE(absl::StrContains(get.out, "Usage: mesactl get [FLAGS] ID")) << get.out;
}

TEST(CommandLineTest, UsageErrorsExitTwoWithOneLineAndAHint) {
  ExpectUsageError({"list", "--bogus"}, "list: unknown flag --bogus");
  ExpectUsageError({"get", "--limit=3"}, "get: unknown flag --limit (a flag of list, audit)");
  ExpectUsageError({"--limit=3", "list"}, "unknown flag --limit (list's flags go after");
  ExpectUsageError({"frobnicate"}, "unknown command \"frobnicate\"");
  ExpectUsageError({"get"}, "get: ID is required");
  ExpectUsageError({"compare", "job-1"}, "compare: ID_B is required");
  ExpectUsageError({"get", "job-1", "job-2"}, "get: unexpected argument \"job-2\"");
  ExpectUsageError({"workers", "extra"}, "workers: unexpected argument \"extra\"");
  ExpectUsageError({"list", "--timeout=soon"}, "--timeout: want a positive duration");
  ExpectUsageError({"--timeout", "-5s", "list"}, "--timeout");
  ExpectUsageError({"list", "--limit=many"}, "--limit");
  ExpectUsageError({"list", "--limit=-1"}, "--limit: must be >= 0");
  ExpectUsageError({"list", "--limit"}, "--limit");
  ExpectUsageError({"list", "-o", "xml"},
                   "expected one of json, yaml, name, wide, text; got \"xml\"");
  ExpectUsageError({"list", "-o", "yaml", "--json"}, "--json and -o yaml disagree");
  ExpectUsageError({"explain", "job-1", "-o", "name"}, "-o name: not for explain (only submit,");
  ExpectUsageError({"submit", "job.yaml", "--watch", "-o", "name"}, "not for submit --watch");
  ExpectUsageError({"completion", "fish"}, "fish");
  ExpectUsageError({"help", "nope"}, "unknown command \"nope\"");
  ExpectUsageError({"cancel", "job-1", std::string("--reason=d\xe9j\xe0")},
                   "cancel --reason is not valid UTF-8 (byte 0xe9 at offset 1)");
  // No command at all: the help, on stderr.
  Parsed none = Parse({});
  EXPECT_EQ(none.exit_code(), kExitUsage);
  EXPECT_TRUE(absl::StrContains(none.err, "Commands:")) << none.err;
}

TEST(CommandLineTest, DispatchesToTheCommandWithItsArguments) {
  Parsed drain = Parse({"drain", "node-1", "--evict"});
  ASSERT_FALSE(drain.exit_code().has_value()) << drain.err;
  EXPECT_EQ(drain.invocation.run, &Drain);
  EXPECT_EQ(drain.invocation.args, (std::vector<std::string>{"drain", "node-1"}));
  EXPECT_TRUE(drain.invocation.options.evict);

  Parsed compare = Parse({"compare", "job-1", "job-2"});
  EXPECT_EQ(compare.invocation.run, &Compare);
  EXPECT_EQ(compare.invocation.args, (std::vector<std::string>{"compare", "job-1", "job-2"}));
  EXPECT_EQ(Parse({"cancel", "--label=a=b"}).invocation.args, std::vector<std::string>{"cancel"});
  EXPECT_EQ(Parse({"submit", "-"}).invocation.args, (std::vector<std::string>{"submit", "-"}));
  // After "--" a dash is an argument.
  EXPECT_EQ(Parse({"get", "--", "-odd-id"}).invocation.args,
            (std::vector<std::string>{"get", "-odd-id"}));
  EXPECT_EQ(Parse({"version"}).invocation.run, &Version);
  EXPECT_EQ(Parse({"watch", "j", "--from_sequence=7"}).invocation.options.from_sequence, 7);
}

TEST(CommandLineTest, GlobalFlagsGoBeforeOrAfterTheCommand) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--server=h:1", "--timeout=5s", "--json", "get", "j"},
           {"get", "j", "--server=h:1", "--timeout", "5s", "--json"},
           {"--server", "h:1", "get", "--json", "j", "--timeout=5s"}}) {
    Parsed p = Parse(args);
    ASSERT_FALSE(p.exit_code().has_value()) << absl::StrJoin(args, " ") << ": " << p.err;
    EXPECT_EQ(p.invocation.globals.server, "h:1");
    EXPECT_EQ(p.invocation.options.timeout, absl::Seconds(5));
    EXPECT_TRUE(p.invocation.options.json);
    EXPECT_EQ(p.invocation.args, (std::vector<std::string>{"get", "j"}));
  }
  EXPECT_EQ(Parse({"list"}).invocation.options.timeout, absl::Seconds(30));
  EXPECT_EQ(Parse({"list"}).invocation.options.limit, 100);
  EXPECT_FALSE(Parse({"list", "--json=false"}).invocation.options.json);
}

TEST(CommandLineTest, TheFlagBeatsItsVariable) {
  setenv("MESA_SERVER", "from-env:1", 1);
  setenv("MESA_TOKEN", "", 1);  // empty: not set
  EXPECT_EQ(Parse({"list"}).invocation.globals.server, "from-env:1");
  EXPECT_EQ(Parse({"list", "--server=flag:2"}).invocation.globals.server, "flag:2");
  EXPECT_EQ(Parse({"list"}).invocation.globals.token, "");
  unsetenv("MESA_SERVER");
  unsetenv("MESA_TOKEN");
}

TEST(CommandLineTest, RepeatedLabelsAccumulate) {
  Parsed p = Parse({"--label=team=nlp", "list"});  // a command flag before it: refused
  EXPECT_EQ(p.exit_code(), kExitUsage);
  Parsed list = Parse({"list", "--label", "a=b", "--state=running", "--label=c=d,e=f"});
  ASSERT_FALSE(list.exit_code().has_value()) << list.err;
  EXPECT_EQ(list.invocation.options.labels, (std::vector<std::string>{"a=b", "c=d,e=f"}));
  // One pair per --label: the next word is not a second value.
  ExpectUsageError({"list", "--label", "a=b", "c=d"}, "list: unexpected argument \"c=d\"");
  Parsed roots = Parse({"submit", "f.yaml", "--data_roots=/a,/b", "--data_roots", "/c"});
  EXPECT_EQ(roots.invocation.options.data_roots, (std::vector<std::string>{"/a", "/b", "/c"}));
}

TEST(CommandLineTest, OutputFormats) {
  auto output = [](std::vector<std::string> args) {
    Parsed p = Parse(args);
    EXPECT_FALSE(p.exit_code().has_value()) << p.err;
    return std::make_pair(p.invocation.options.output, p.invocation.options.json);
  };
  EXPECT_EQ(output({"list"}), std::make_pair(OutputFormat::kText, false));
  EXPECT_EQ(output({"list", "-o", "wide"}), std::make_pair(OutputFormat::kText, false));
  EXPECT_EQ(output({"list", "-o", "json"}), std::make_pair(OutputFormat::kJson, true));
  EXPECT_EQ(output({"list", "--json"}), std::make_pair(OutputFormat::kJson, true));
  EXPECT_EQ(output({"list", "-o", "json", "--json"}), std::make_pair(OutputFormat::kJson, true));
  EXPECT_EQ(output({"-o=name", "list"}), std::make_pair(OutputFormat::kName, true));
  EXPECT_EQ(output({"list", "-oyaml"}), std::make_pair(OutputFormat::kYaml, true));
  EXPECT_EQ(output({"get", "j", "--output=yaml"}), std::make_pair(OutputFormat::kYaml, true));
}

TEST(CommandLineTest, CompletionScriptComesFromTheModel) {
  CommandLine command_line;
  const std::string script = command_line.BashCompletion();
  EXPECT_TRUE(
      absl::StrContains(script, "    list) flags+=\" --state --queue --label --limit\"; ;;\n"))
      << script;
  EXPECT_TRUE(absl::StrContains(
      script, "    drain) flags+=\" --evict\"; names=$(mesactl workers -o name 2>/dev/null) ;;"))
      << script;
  EXPECT_TRUE(absl::StrContains(script, "    get) flags+=\" --csv\"; names=$(mesactl list -o name"))
      << script;
  // Flags with a value: the word after them is not the command.
  EXPECT_TRUE(absl::StrContains(script, "--server|--ca|--token|-o|--output|--timeout)")) << script;
  EXPECT_TRUE(absl::StrContains(script, "complete -F _mesactl mesactl")) << script;
  for (const std::string& name : command_line.CommandNames()) {
    EXPECT_TRUE(absl::StrContains(script, "    " + name + ")")) << name;
  }
  Parsed p = Parse({"completion", "bash"});
  EXPECT_EQ(p.exit_code(), kExitOk);
  EXPECT_EQ(p.out, script);
}

}  // namespace
}  // namespace mesa::cli
