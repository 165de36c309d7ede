// Supervision of one child process: spawn with a given environment and working directory, feed its
// stdin, read its stdout, stderr and an optional events pipe (line by line and/or as raw bytes),
// signal its process group, and reap it. The worker agent runs its trainers with it; the test
// harnesses (tests/process_harness.h, model/comm/subprocess_for_test.h) are thin layers over it.
//
// The child runs in its own process group, so signals reach whatever it starts in turn (mpirun,
// helpers), and that group is SIGKILLed when the child exits so nothing is left behind. The child
// also gets PR_SET_PDEATHSIG(SIGKILL): if the parent dies (SIGKILL, crash), its children die with
// it instead of running on unsupervised. Linux delivers that signal when the *thread* that forked
// exits, so call Spawn() from a thread that outlives the child. The child starts with an empty
// signal mask and default dispositions, and with no descriptor of the parent but its pipes.
#ifndef MESANET_BASE_SUBPROCESS_H_
#define MESANET_BASE_SUBPROCESS_H_

#include <sys/types.h>

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mesa::base {

enum class Stream { kStdout, kStderr, kEvents };

const char* StreamName(Stream stream);

// Called on the process's reader thread, once per complete line (without the newline). Lines
// longer than SpawnOptions::max_line_bytes are split. A last line without a newline is delivered
// when the stream ends.
using LineCallback = std::function<void(Stream stream, std::string line)>;

// Called on the reader thread with the bytes as read, before they are split into lines; then once
// with empty `data` when the stream has ended (end of file, or given up on after the exit).
using OutputCallback = std::function<void(Stream stream, absl::string_view data)>;

struct SpawnOptions {
  // argv[0] is a path, or a name looked up in PATH of this process.
  std::vector<std::string> argv;
  // The complete environment of the child ("NAME=value"); see InheritedEnvironment().
  std::vector<std::string> env;
  // Working directory; empty = this process's.
  std::string cwd;
  // >= 3: the child gets the write end of an events pipe as this descriptor.
  int events_fd = -1;
  size_t max_line_bytes = 64 * 1024;
  // The events stream's own bound (its lines are records that must not be split); 0 = the same
  // as max_line_bytes.
  size_t max_event_line_bytes = 0;
  // Written to the child's stdin, which is then closed; without it stdin is /dev/null. A child
  // that exits (or closes stdin) before reading it all is no error.
  std::string stdin_data;
  // The child's stderr goes to the stdout pipe (one interleaved stream, reported as kStdout).
  bool stderr_to_stdout = false;
  // Optional, in addition to the line callback.
  OutputCallback on_output;
};

class Subprocess {
 public:
  // Fails (without leaving a child behind) if the program cannot be executed or `cwd` entered.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Spawn(const SpawnOptions& options,
                                                           LineCallback on_line);

  // Kills the process group if the child still runs, and joins the reader thread.
  ~Subprocess();

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }

  // Sends `sig` to the child's process group; a no-op once the child has been reaped.
  void Signal(int sig);

  // The wait() status once the child has exited and its output has been read (every callback has
  // returned); nullopt before.
  std::optional<int> exit_status() const;

  // Waits up to `timeout` for the exit; returns the wait() status or nullopt on timeout.
  std::optional<int> WaitFor(absl::Duration timeout);
  int Wait();

  // SIGTERM, then SIGKILL if the child has not exited within `grace`. Blocks until reaped.
  int Terminate(absl::Duration grace);

 private:
  Subprocess() = default;
  void ReaderLoop(std::vector<int> fds, int stdin_fd, std::string stdin_data,
                  std::array<size_t, 3> max_line_bytes);

  pid_t pid_ = -1;
  LineCallback on_line_;
  OutputCallback on_output_;
  std::thread reader_;
  mutable absl::Mutex mu_;
  bool reaped_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<int> status_ ABSL_GUARDED_BY(mu_);
};

// Resolves a program name against PATH ("" if not found); paths with '/' are returned as is.
std::string FindProgram(const std::string& name, const std::string& path_env);

// This process's environment ("NAME=value"), without the variables whose name starts with one of
// `drop_prefixes`, and with `overrides` ("NAME=value") replacing or adding variables.
std::vector<std::string> InheritedEnvironment(const std::vector<std::string>& overrides = {},
                                              const std::vector<std::string>& drop_prefixes = {});

}  // namespace mesa::base

#endif  // MESANET_BASE_SUBPROCESS_H_
