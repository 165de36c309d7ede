#include "base/cli_flags.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace mesa::base {
namespace {

// Abseil (20220623, Debian 12's) ends a failed parse and its own help output alike with
// std::exit(1). While it parses, this handler turns that exit into ours: 0 after help was asked
// for, the usage-error status otherwise (std::_Exit inside an atexit handler ends the process with
// it; the streams are flushed first, as exit would have).
enum class ParseState { kIdle, kParsing, kPrintingHelp };
std::atomic<ParseState> g_state{ParseState::kIdle};

void ExitWithOurStatus() {
  const ParseState state = g_state.load();
  if (state == ParseState::kIdle) return;
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(state == ParseState::kPrintingHelp ? 0 : kUsageErrorExit);
}

// Abseil's own flags (--flagfile, --help*, ...) are not ours to list.
bool IsOwnFlagFile(absl::string_view file) { return !absl::StrContains(file, "absl/"); }

// Arguments after which Abseil exits 0 on purpose (help and version output).
bool IsHelpArgument(absl::string_view arg) {
  for (absl::string_view prefix :
       {"--help", "-help", "--version", "-version", "--only_check_args"}) {
    if (absl::StartsWith(arg, prefix)) return true;
  }
  return false;
}

}  // namespace

std::vector<char*> ParseFlagsOrExit(int argc, char** argv, absl::string_view usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_helpshort_flags = IsOwnFlagFile;
  config.contains_help_flags = IsOwnFlagFile;
  absl::SetFlagsUsageConfig(config);

  // `-h` means `--help`, up to a `--` that ends the flags.
  static std::string help = "--help";
  bool asks_for_help = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    if (std::strcmp(argv[i], "-h") == 0) argv[i] = help.data();
    asks_for_help = asks_for_help || IsHelpArgument(argv[i]);
  }
  static const bool registered = std::atexit(ExitWithOurStatus) == 0;
  (void)registered;
  g_state.store(asks_for_help ? ParseState::kPrintingHelp : ParseState::kParsing);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  g_state.store(ParseState::kIdle);
  return positional;
}

absl::Status CheckThreadsFlag(int threads, absl::string_view zero_means) {
  if (threads >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--threads must be 0 (", zero_means, ") or more, got ", threads));
}

bool FlagOnCommandLine(int argc, char** argv, absl::string_view name) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--")) {
      if (!absl::ConsumePrefix(&arg, "-")) continue;
    }
    if (arg == name || absl::StartsWith(arg, absl::StrCat(name, "="))) return true;
  }
  return false;
}

}  // namespace mesa::base
