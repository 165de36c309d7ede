#include "tests/process_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

extern char** environ;

namespace mesa::testing {
namespace {

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Converts a waitpid status to Process::ExitStatus.
int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1000;
}

}  // namespace

std::string RunfilePath(absl::string_view path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  if (srcdir == nullptr) return std::string(path);
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir, "/", workspace != nullptr ? workspace : "mesanet", "/", path);
}

std::string NewTempDir(absl::string_view prefix) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", prefix, "XXXXXX");
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    std::cerr << "mkdtemp " << pattern << ": " << std::strerror(errno) << "\n";
    std::abort();
  }
  return std::string(buf.data());
}

absl::StatusOr<std::unique_ptr<Process>> Process::Start(const std::string& path,
                                                        const std::vector<std::string>& args,
                                                        const Options& options) {
  if (access(path.c_str(), X_OK) != 0) return ErrnoError(absl::StrCat("cannot execute ", path));
  int out_pipe[2], err_pipe[2], in_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoError("pipe");
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoError("pipe");
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return ErrnoError("pipe");

  // Everything the child needs is prepared before fork: after it only async-signal-safe calls.
  std::vector<std::string> argv_storage = {path};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::map<std::string, std::string> env_map;
  for (char** e = environ; *e != nullptr; ++e) {
    std::pair<std::string, std::string> kv = absl::StrSplit(*e, absl::MaxSplits('=', 1));
    env_map[kv.first] = kv.second;
  }
  for (const std::string& e : options.env) {
    std::pair<std::string, std::string> kv = absl::StrSplit(e, absl::MaxSplits('=', 1));
    env_map[kv.first] = kv.second;
  }
  std::vector<std::string> env_storage;
  for (const auto& [k, v] : env_map) env_storage.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> envp;
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  const char* cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();

  pid_t pid = fork();
  if (pid < 0) return ErrnoError("fork");
  if (pid == 0) {
    // Child. Dies with the test so no server outlives a crashed test.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(in_pipe[0], STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    if (cwd != nullptr && chdir(cwd) != 0) _exit(127);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  // Small inputs only (fits the pipe buffer); a test never needs more.
  if (!options.stdin_data.empty()) {
    ssize_t unused = write(in_pipe[1], options.stdin_data.data(), options.stdin_data.size());
    (void)unused;
  }
  close(in_pipe[1]);
  return std::unique_ptr<Process>(
      new Process(Basename(path), pid, out_pipe[0], err_pipe[0], options.echo_stderr));
}

Process::Process(std::string name, pid_t pid, int stdout_fd, int stderr_fd, bool echo_stderr)
    : name_(std::move(name)), pid_(pid), echo_stderr_(echo_stderr) {
  stdout_thread_ = std::thread([this, stdout_fd] { ReadLoop(stdout_fd, true); });
  stderr_thread_ = std::thread([this, stderr_fd] { ReadLoop(stderr_fd, false); });
}

Process::~Process() {
  bool reaped;
  {
    absl::MutexLock lock(&mu_);
    reaped = reaped_;
  }
  if (!reaped) {
    kill(pid_, SIGKILL);
    int status;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  // The pipes close when the child is gone, unless something it spawned still holds them: give
  // that a moment, then stop reading regardless so the destructor never hangs.
  {
    absl::MutexLock lock(&mu_);
    auto closed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stdout_closed_ && stderr_closed_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&closed), absl::Seconds(2));
  }
  stop_reading_ = true;
  if (stdout_thread_.joinable()) stdout_thread_.join();
  if (stderr_thread_.joinable()) stderr_thread_.join();
}

void Process::ReadLoop(int fd, bool is_stdout) {
  char buf[4096];
  std::string partial;  // stderr echo: the unfinished last line
  while (!stop_reading_) {
    pollfd pfd = {fd, POLLIN, 0};
    int ready = poll(&pfd, 1, 50);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    absl::MutexLock lock(&mu_);
    (is_stdout ? stdout_ : stderr_).append(buf, n);
    if (!is_stdout && echo_stderr_) {
      partial.append(buf, n);
      size_t nl;
      while ((nl = partial.find('\n')) != std::string::npos) {
        std::cerr << "[" << name_ << "] " << partial.substr(0, nl + 1);
        partial.erase(0, nl + 1);
      }
    }
  }
  close(fd);
  absl::MutexLock lock(&mu_);
  if (!partial.empty()) std::cerr << "[" << name_ << "] " << partial << "\n";
  (is_stdout ? stdout_closed_ : stderr_closed_) = true;
}

absl::StatusOr<std::string> Process::WaitForLine(
    const std::function<bool(absl::string_view)>& match, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  size_t scanned = 0;  // offset of the first line not yet checked
  absl::MutexLock lock(&mu_);
  while (true) {
    size_t nl;
    while ((nl = stdout_.find('\n', scanned)) != std::string::npos) {
      absl::string_view line(stdout_.data() + scanned, nl - scanned);
      scanned = nl + 1;
      if (match(line)) return std::string(line);
    }
    if (stdout_closed_) {
      return absl::UnavailableError(absl::StrCat(name_,
                                                 " closed stdout before the line appeared; "
                                                 "stdout so far:\n",
                                                 stdout_));
    }
    size_t seen = stdout_.size();
    auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stdout_.size() != seen || stdout_closed_;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&changed), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("no matching line from ", name_, " within ",
                                                      absl::FormatDuration(timeout),
                                                      "; stdout so far:\n", stdout_));
    }
  }
}

absl::StatusOr<std::string> Process::WaitForLinePrefix(absl::string_view prefix,
                                                       absl::Duration timeout) {
  std::string p(prefix);
  return WaitForLine([&p](absl::string_view line) { return absl::StartsWith(line, p); }, timeout);
}

std::string Process::Stdout() const {
  absl::MutexLock lock(&mu_);
  return stdout_;
}

std::string Process::Stderr() const {
  absl::MutexLock lock(&mu_);
  return stderr_;
}

absl::Status Process::Signal(int signal) {
  absl::MutexLock lock(&mu_);
  if (reaped_) return absl::FailedPreconditionError(absl::StrCat(name_, " already exited"));
  if (kill(pid_, signal) != 0) return ErrnoError("kill");
  return absl::OkStatus();
}

absl::StatusOr<Process::ExitStatus> Process::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  {
    absl::MutexLock lock(&mu_);
    if (!reaped_) {
      while (true) {
        int status;
        pid_t r = waitpid(pid_, &status, WNOHANG);
        if (r == pid_) {
          reaped_ = true;
          exit_status_ = DecodeWaitStatus(status);
          break;
        }
        if (r < 0 && errno != EINTR) return ErrnoError("waitpid");
        if (absl::Now() >= deadline) {
          return absl::DeadlineExceededError(
              absl::StrCat(name_, " did not exit within ", absl::FormatDuration(timeout)));
        }
        mu_.Unlock();
        absl::SleepFor(absl::Milliseconds(2));
        mu_.Lock();
      }
    }
    // Output may still be in flight in the pipes; wait (bounded) for both to close.
    auto closed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stdout_closed_ && stderr_closed_;
    };
    mu_.AwaitWithDeadline(absl::Condition(&closed),
                          std::max(deadline, absl::Now() + absl::Seconds(1)));
    return exit_status_;
  }
}

absl::StatusOr<Process::ExitStatus> Process::Kill() {
  absl::Status s = Signal(SIGKILL);
  if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition) return s;
  return Wait(absl::Seconds(10));
}

absl::StatusOr<Process::ExitStatus> Process::Terminate(absl::Duration grace) {
  absl::Status s = Signal(SIGTERM);
  if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition) return s;
  absl::StatusOr<ExitStatus> status = Wait(grace);
  if (status.ok()) return status;
  return Kill();
}

absl::StatusOr<RunResult> RunProcess(const std::string& path, const std::vector<std::string>& args,
                                     absl::Duration timeout, const Process::Options& options) {
  Process::Options opts = options;
  opts.echo_stderr = false;  // Returned to the caller instead.
  absl::StatusOr<std::unique_ptr<Process>> process = Process::Start(path, args, opts);
  if (!process.ok()) return process.status();
  absl::StatusOr<Process::ExitStatus> status = (*process)->Wait(timeout);
  if (!status.ok()) {
    (*process)->Kill().IgnoreError();
    return absl::DeadlineExceededError(absl::StrCat(status.status().message(), "; stdout:\n",
                                                    (*process)->Stdout(), "\nstderr:\n",
                                                    (*process)->Stderr()));
  }
  return RunResult{*status, (*process)->Stdout(), (*process)->Stderr()};
}

absl::StatusOr<std::string> WaitForListenAddress(Process& process, absl::Duration timeout) {
  absl::StatusOr<std::string> line = process.WaitForLine(
      [](absl::string_view l) { return absl::StrContains(l, "listening on "); }, timeout);
  if (!line.ok()) return line.status();
  absl::string_view rest = *line;
  rest.remove_prefix(rest.find("listening on ") + std::strlen("listening on "));
  rest = absl::StripAsciiWhitespace(rest);
  // Take the first token ("listening on 127.0.0.1:41234 (grpc)" is fine too).
  rest = rest.substr(0, rest.find(' '));
  if (rest.empty() || rest.rfind(':') == absl::string_view::npos) {
    return absl::InternalError(absl::StrCat("cannot parse address from \"", *line, "\""));
  }
  return std::string(rest);
}

}  // namespace mesa::testing
