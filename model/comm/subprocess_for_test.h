// Tests only: runs processes with a deadline and collects their output (stdout + stderr), on
// base::Subprocess.
#ifndef MESANET_MODEL_COMM_SUBPROCESS_FOR_TEST_H_
#define MESANET_MODEL_COMM_SUBPROCESS_FOR_TEST_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace mesa::model::testing {

struct ProcessSpec {
  std::vector<std::string> argv;
  // Added to this process's environment, minus OMPI_*, PMIX_* and MESA_* (so a test run under
  // mpirun or by an agent does not leak its own rank into the children).
  std::vector<std::string> env;
};

struct ProcessResult {
  int exit_code = -1;      // the exit status, 128 + signal when killed
  bool timed_out = false;  // stopped at the deadline
  std::string output;
  double seconds = 0;  // until it exited
};

// Starts every process at once, each in its own process group; at the deadline sends SIGTERM to
// the groups still running and SIGKILL two seconds later. With stop_others_on_failure, the first
// process to exit non-zero gets the others stopped the same way (as a worker agent does with
// the ranks of an attempt); they are not counted as timed out.
std::vector<ProcessResult> RunProcesses(const std::vector<ProcessSpec>& specs,
                                        absl::Duration timeout,
                                        bool stop_others_on_failure = false);

// The path of the mpirun to use: $MPIRUN, else /usr/bin/mpirun, else "mpirun" on PATH.
std::string MpirunPath();

// Arguments for `mpirun -np N` that work as root, oversubscribed, and inside the Bazel sandbox
// (shared-memory and loopback TCP transports only, no ssh launcher).
std::vector<std::string> MpirunArgs(int np);
std::vector<std::string> MpirunEnv();

}  // namespace mesa::model::testing

#endif  // MESANET_MODEL_COMM_SUBPROCESS_FOR_TEST_H_
