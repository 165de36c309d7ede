#ifndef MESA_BASE_CLI_FLAGS_H_
#define MESA_BASE_CLI_FLAGS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mesa::base {

// Exit status of a usage error (an unknown flag, a value that does not parse), as for
// mesactl and the shell builtins; 1 stays "the command ran and failed".
inline constexpr int kUsageErrorExit = 2;

// Parses the command line of every Abseil-flag binary the same way:
//  - `--help` and `-h` print `usage` and this program's own flags (every flag defined outside
//    Abseil, whichever file defines it) to stdout and exit 0;
//  - an unknown flag or a malformed value prints Abseil's message and exits kUsageErrorExit.
// Returns the positional arguments, argv[0] first, as absl::ParseCommandLine does.
std::vector<char*> ParseFlagsOrExit(int argc, char** argv, absl::string_view usage);

// A `--threads` value: 0 (all cores, or what `zero_means` says) or more; InvalidArgument otherwise.
absl::Status CheckThreadsFlag(int threads, absl::string_view zero_means = "all cores");

// Whether flag `name` appears on the command line (`--name`, `--name=V`, one dash too), so that an
// explicitly empty value (`--prompt ""`) can be told from an absent flag.
bool FlagOnCommandLine(int argc, char** argv, absl::string_view name);

}  // namespace mesa::base

#endif  // MESA_BASE_CLI_FLAGS_H_
