#ifndef MESA_BASE_CLI_FLAGS_H_
#define MESA_BASE_CLI_FLAGS_H_

#include <vector>

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

}  // namespace mesa::base

#endif  // MESA_BASE_CLI_FLAGS_H_
