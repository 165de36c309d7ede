#include "tests/dev_ca.h"

#include "absl/strings/str_cat.h"
#include "tests/process_harness.h"

namespace mesa::testing {

absl::Status MakeDevCa(const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {RunfilePath("scripts/make_dev_ca.sh"), dir};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<RunResult> made = RunProcess("/bin/bash", argv, absl::Seconds(60));
  if (!made.ok()) return made.status();
  if (made->exit_status != 0) {
    return absl::InternalError(
        absl::StrCat("make_dev_ca.sh exited ", made->exit_status, ": ", made->err));
  }
  return absl::OkStatus();
}

}  // namespace mesa::testing
