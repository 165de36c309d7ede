// Starting real binaries from tests: spawn with captured stdout/stderr, wait for a line with a
// bounded timeout, signal, reap. Every wait takes a deadline so a hung child fails the test
// instead of hanging it, and children get SIGKILL when the test process dies. A thin layer over
// base::Subprocess: the child runs in its own process group, which signals reach as a whole.
//
//   auto server = Process::Start(RunfilePath("coordinator/mesa-coordinator"),
//                                {"--listen=127.0.0.1:0", "--db=" + db});
//   absl::StatusOr<std::string> address = WaitForListenAddress(**server, absl::Seconds(10));
//   ...
//   (*server)->Kill();

#ifndef MESANET_TESTS_PROCESS_HARNESS_H_
#define MESANET_TESTS_PROCESS_HARNESS_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/subprocess.h"

namespace mesa::testing {

// Absolute path of a data dependency: $TEST_SRCDIR/$TEST_WORKSPACE/`path`
// (e.g. "coordinator/mesa-coordinator"). Falls back to `path` outside `bazel test`.
std::string RunfilePath(absl::string_view path);

// A fresh directory under $TEST_TMPDIR (or /tmp).
std::string NewTempDir(absl::string_view prefix);

class Process {
 public:
  struct Options {
    // Extra "NAME=value" entries added to (or overriding) the inherited environment.
    std::vector<std::string> env;
    // Written to the child's stdin, which is then closed. Without it stdin is /dev/null.
    std::string stdin_data;
    // Copies the child's stderr lines to this process's stderr, prefixed "[name] ", so they show
    // up in the test log.
    bool echo_stderr = true;
    // Working directory of the child; empty = inherited.
    std::string cwd;
  };

  // Exit code if the child exited, or -signal number if a signal ended it.
  using ExitStatus = int;

  static absl::StatusOr<std::unique_ptr<Process>> Start(const std::string& path,
                                                        const std::vector<std::string>& args,
                                                        const Options& options);
  static absl::StatusOr<std::unique_ptr<Process>> Start(const std::string& path,
                                                        const std::vector<std::string>& args) {
    return Start(path, args, Options());
  }

  // Kills (SIGKILL) and reaps the child if it is still running.
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return process_->pid(); }
  const std::string& name() const { return name_; }

  // Waits until a complete stdout line satisfies `match` and returns it. Lines already read are
  // searched too. DeadlineExceeded after `timeout`; Unavailable if stdout closes first.
  absl::StatusOr<std::string> WaitForLine(const std::function<bool(absl::string_view)>& match,
                                          absl::Duration timeout);
  // The first stdout line that starts with `prefix`.
  absl::StatusOr<std::string> WaitForLinePrefix(absl::string_view prefix, absl::Duration timeout);

  // Everything read so far.
  std::string Stdout() const;
  std::string Stderr() const;

  // Signals the child's process group; FailedPrecondition once it has exited.
  absl::Status Signal(int signal);

  // Waits for the child to exit and for its output to be fully read.
  absl::StatusOr<ExitStatus> Wait(absl::Duration timeout);
  // SIGKILL, then wait (bounded).
  absl::StatusOr<ExitStatus> Kill();
  // SIGTERM, wait up to `grace`, then SIGKILL.
  absl::StatusOr<ExitStatus> Terminate(absl::Duration grace);

 private:
  explicit Process(std::string name) : name_(std::move(name)) {}
  void OnOutput(base::Stream stream, absl::string_view data);

  const std::string name_;
  mutable absl::Mutex mu_;
  std::string stdout_ ABSL_GUARDED_BY(mu_);
  std::string stderr_ ABSL_GUARDED_BY(mu_);
  bool stdout_closed_ ABSL_GUARDED_BY(mu_) = false;
  // Last: destroyed (child killed, reader joined) before what its callbacks use.
  std::unique_ptr<base::Subprocess> process_;
};

// Runs a binary to completion (bounded): exit status, stdout and stderr.
struct RunResult {
  Process::ExitStatus exit_status = 0;
  std::string out;
  std::string err;
};
absl::StatusOr<RunResult> RunProcess(const std::string& path, const std::vector<std::string>& args,
                                     absl::Duration timeout,
                                     const Process::Options& options = Process::Options());

// Waits for a server's "listening on HOST:PORT" stdout line and returns "HOST:PORT".
absl::StatusOr<std::string> WaitForListenAddress(Process& process, absl::Duration timeout);

// A TCP port on 127.0.0.1 that was free a moment ago (bound and released): for a server that must
// be given its port before it listens (a replicated coordinator's follower, which clients list).
int FreeLoopbackPort();

// GET http://ADDRESS/metrics (curl, installed by scripts/setup.sh): the Prometheus text.
absl::StatusOr<std::string> ScrapeMetrics(absl::string_view address);

}  // namespace mesa::testing

#endif  // MESANET_TESTS_PROCESS_HARNESS_H_
