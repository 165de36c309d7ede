// Supervision of one child process: spawn with a clean environment and working directory, read
// its stdout, stderr and an optional events pipe line by line, signal its process group, and reap
// it.
//
// The child runs in its own process group, so signals reach whatever it starts in turn (mpirun,
// helpers), and that group is SIGKILLed when the child exits so nothing is left behind. The child
// also gets PR_SET_PDEATHSIG(SIGKILL): if the agent dies (SIGKILL, crash), its trainers die with
// it instead of training on unsupervised while a retry starts elsewhere. Linux delivers that
// signal when the *thread* that forked exits, so call Spawn() from a thread that outlives the
// child (the attempt's supervising thread does).
#ifndef MESANET_WORKER_PROCESS_H_
#define MESANET_WORKER_PROCESS_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mesa::worker {

enum class Stream { kStdout, kStderr, kEvents };

const char* StreamName(Stream stream);

// Called on the process's reader thread, once per complete line (without the newline). Lines
// longer than SpawnOptions::max_line_bytes are split.
using LineCallback = std::function<void(Stream stream, std::string line)>;

struct SpawnOptions {
  // argv[0] is a path, or a name looked up in PATH of the agent.
  std::vector<std::string> argv;
  // The complete environment of the child ("NAME=value").
  std::vector<std::string> env;
  // Working directory; empty = the agent's.
  std::string cwd;
  // >= 3: the child gets the write end of an events pipe as this descriptor.
  int events_fd = -1;
  size_t max_line_bytes = 64 * 1024;
};

class Subprocess {
 public:
  // Fails (without leaving a child behind) if the program cannot be executed.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Spawn(const SpawnOptions& options,
                                                           LineCallback on_line);

  // Kills the process group if the child still runs, and joins the reader thread.
  ~Subprocess();

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }

  // Sends `sig` to the child's process group; a no-op once the child has been reaped.
  void Signal(int sig);

  // The wait() status once the child has exited and its output has been read; nullopt before.
  std::optional<int> exit_status() const;

  // Waits up to `timeout` for the exit; returns the wait() status or nullopt on timeout.
  std::optional<int> WaitFor(absl::Duration timeout);
  int Wait();

  // SIGTERM, then SIGKILL if the child has not exited within `grace`. Blocks until reaped.
  int Terminate(absl::Duration grace);

 private:
  Subprocess() = default;
  void ReaderLoop(std::vector<int> fds, size_t max_line_bytes);

  pid_t pid_ = -1;
  LineCallback on_line_;
  std::thread reader_;
  mutable absl::Mutex mu_;
  bool reaped_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<int> status_ ABSL_GUARDED_BY(mu_);
};

// Resolves a program name against PATH ("" if not found); paths with '/' are returned as is.
std::string FindProgram(const std::string& name, const std::string& path_env);

}  // namespace mesa::worker

#endif  // MESANET_WORKER_PROCESS_H_
