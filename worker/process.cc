#include "worker/process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mesa::worker {
namespace {

constexpr int kPollMillis = 100;
// After the child exits, how long to keep reading output that is still in the pipes (or held
// open by a grandchild) before giving up on it.
constexpr absl::Duration kDrainAfterExit = absl::Milliseconds(500);

void CloseIfOpen(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// Only async-signal-safe calls between fork() and exec().
[[noreturn]] void ExecChild(const char* program, char* const* argv, char* const* envp,
                            const char* cwd, int stdin_fd, int out_w, int err_w, int events_w,
                            int events_fd, int exec_err_w, pid_t parent) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // The agent died before prctl took effect.
  // The agent may block or ignore signals (gRPC ignores SIGPIPE); the trainer must not inherit that.
  sigset_t all;
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) signal(sig, SIG_DFL);

  const int keep = events_w >= 0 ? events_fd : 2;
  // Move the error pipe above every descriptor the child keeps, so the dup2()s below cannot
  // clobber it; it stays close-on-exec.
  const int exec_err = fcntl(exec_err_w, F_DUPFD_CLOEXEC, keep + 1);
  if (exec_err < 0) _exit(127);
  dup2(stdin_fd, 0);
  dup2(out_w, 1);
  dup2(err_w, 2);
  if (events_w >= 0) {
    if (events_w == events_fd) {
      fcntl(events_fd, F_SETFD, 0);  // dup2 onto itself would keep FD_CLOEXEC.
    } else {
      dup2(events_w, events_fd);
    }
  }
  // Everything else the agent has open (gRPC sockets, other trainers' pipes) stays out.
  for (int fd = 3; fd < keep; ++fd) close(fd);
  for (int fd = keep + 1; fd < exec_err; ++fd) close(fd);
  if (syscall(SYS_close_range, exec_err + 1, ~0U, 0) != 0) {
    for (int fd = exec_err + 1; fd < 65536; ++fd) close(fd);
  }
  exec_err_w = exec_err;
  // exec_err_w is close-on-exec: it closes on success and carries errno on failure.
  if (cwd[0] != '\0' && chdir(cwd) != 0) {
    const int error = errno;
    [[maybe_unused]] ssize_t n = write(exec_err_w, &error, sizeof(error));
    _exit(127);
  }
  execve(program, argv, envp);
  const int error = errno;
  [[maybe_unused]] ssize_t n = write(exec_err_w, &error, sizeof(error));
  _exit(127);
}

}  // namespace

const char* StreamName(Stream stream) {
  switch (stream) {
    case Stream::kStdout:
      return "stdout";
    case Stream::kStderr:
      return "stderr";
    case Stream::kEvents:
      return "events";
  }
  return "?";
}

std::string FindProgram(const std::string& name, const std::string& path_env) {
  if (name.find('/') != std::string::npos) return name;
  for (absl::string_view dir : absl::StrSplit(path_env, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Spawn(const SpawnOptions& options,
                                                              LineCallback on_line) {
  if (options.argv.empty()) return absl::InvalidArgumentError("empty argv");
  if (options.events_fd >= 0 && options.events_fd < 3) {
    return absl::InvalidArgumentError("events_fd must be >= 3");
  }
  const char* path_env = getenv("PATH");
  const std::string program = FindProgram(options.argv[0], path_env ? path_env : "/usr/bin:/bin");
  if (program.empty()) {
    return absl::NotFoundError(absl::StrCat(options.argv[0], ": not found in PATH"));
  }

  // Everything the child needs is prepared before fork(): after it, no allocation.
  std::vector<char*> argv;
  for (const std::string& arg : options.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& var : options.env) envp.push_back(const_cast<char*>(var.c_str()));
  envp.push_back(nullptr);

  int out[2] = {-1, -1}, err[2] = {-1, -1}, events[2] = {-1, -1}, exec_err[2] = {-1, -1};
  int stdin_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  auto close_all = [&] {
    for (int* pair : {out, err, events, exec_err}) {
      CloseIfOpen(pair[0]);
      CloseIfOpen(pair[1]);
    }
    CloseIfOpen(stdin_fd);
  };
  if (stdin_fd < 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 ||
      (options.events_fd >= 0 && pipe2(events, O_CLOEXEC) != 0) ||
      pipe2(exec_err, O_CLOEXEC) != 0) {
    const int error = errno;
    close_all();
    return absl::InternalError(absl::StrCat("pipe: ", strerror(error)));
  }

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close_all();
    return absl::ResourceExhaustedError(absl::StrCat("fork: ", strerror(error)));
  }
  if (pid == 0) {
    ExecChild(program.c_str(), argv.data(), envp.data(), options.cwd.c_str(), stdin_fd, out[1],
              err[1], events[1], options.events_fd, exec_err[1], parent);
  }
  // Also set the group from the parent, so Signal() right after Spawn() cannot miss it.
  setpgid(pid, pid);
  CloseIfOpen(out[1]);
  CloseIfOpen(err[1]);
  CloseIfOpen(events[1]);
  CloseIfOpen(exec_err[1]);
  CloseIfOpen(stdin_fd);

  int child_errno = 0;
  ssize_t n;
  do {
    n = read(exec_err[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  CloseIfOpen(exec_err[0]);
  if (n == sizeof(child_errno)) {
    int status;
    waitpid(pid, &status, 0);
    CloseIfOpen(out[0]);
    CloseIfOpen(err[0]);
    CloseIfOpen(events[0]);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot start ", program, (options.cwd.empty() ? "" : absl::StrCat(" in ", options.cwd)),
        ": ", strerror(child_errno)));
  }

  std::unique_ptr<Subprocess> process(new Subprocess());
  process->pid_ = pid;
  process->on_line_ = std::move(on_line);
  std::vector<int> fds = {out[0], err[0], events[0]};
  process->reader_ = std::thread(&Subprocess::ReaderLoop, process.get(), std::move(fds),
                                 options.max_line_bytes);
  return process;
}

void Subprocess::ReaderLoop(std::vector<int> fds, size_t max_line_bytes) {
  constexpr std::array<Stream, 3> kStreams = {Stream::kStdout, Stream::kStderr, Stream::kEvents};
  std::array<std::string, 3> partial;
  std::array<char, 65536> buffer;
  // Lines over max_line_bytes go out in pieces, whether or not their newline came in the same read.
  auto emit = [&](int i, std::string line) {
    if (!on_line_) return;
    while (line.size() > max_line_bytes) {
      on_line_(kStreams[i], line.substr(0, max_line_bytes));
      line.erase(0, max_line_bytes);
    }
    on_line_(kStreams[i], std::move(line));
  };
  bool exited = false;
  absl::Time exit_time;
  while (true) {
    std::vector<pollfd> pfds;
    std::vector<int> index;
    for (int i = 0; i < 3; ++i) {
      if (fds[i] >= 0) {
        pfds.push_back({fds[i], POLLIN, 0});
        index.push_back(i);
      }
    }
    if (pfds.empty() && exited) break;
    if (exited && absl::Now() - exit_time > kDrainAfterExit) break;
    if (!pfds.empty()) {
      const int ready = poll(pfds.data(), pfds.size(), kPollMillis);
      if (ready < 0 && errno != EINTR) break;
      for (size_t p = 0; ready > 0 && p < pfds.size(); ++p) {
        if (pfds[p].revents == 0) continue;
        const int i = index[p];
        const ssize_t got = read(fds[i], buffer.data(), buffer.size());
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got <= 0) {
          CloseIfOpen(fds[i]);
          continue;
        }
        partial[i].append(buffer.data(), got);
        size_t start = 0;
        while (true) {
          const size_t newline = partial[i].find('\n', start);
          if (newline == std::string::npos) break;
          emit(i, partial[i].substr(start, newline - start));
          start = newline + 1;
        }
        partial[i].erase(0, start);
        while (partial[i].size() >= max_line_bytes) {
          emit(i, partial[i].substr(0, max_line_bytes));
          partial[i].erase(0, max_line_bytes);
        }
      }
    } else {
      absl::SleepFor(absl::Milliseconds(kPollMillis));
    }
    if (!exited) {
      // WNOWAIT: detect the exit but keep the zombie, so the process group id stays reserved
      // until stragglers in it have been killed below.
      siginfo_t info;
      info.si_pid = 0;
      if (waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_) {
        exited = true;
        exit_time = absl::Now();
      }
    }
  }
  for (int i = 0; i < 3; ++i) {
    if (!partial[i].empty()) emit(i, std::move(partial[i]));
    CloseIfOpen(fds[i]);
  }
  absl::MutexLock lock(&mu_);
  kill(-pid_, SIGKILL);  // Whatever the child left running in its group.
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  status_ = status;
}

void Subprocess::Signal(int sig) {
  absl::MutexLock lock(&mu_);
  if (!reaped_) kill(-pid_, sig);
}

std::optional<int> Subprocess::exit_status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

std::optional<int> Subprocess::WaitFor(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return status_.has_value(); };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  return status_;
}

int Subprocess::Wait() {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return status_.has_value(); };
  mu_.Await(absl::Condition(&done));
  return *status_;
}

int Subprocess::Terminate(absl::Duration grace) {
  Signal(SIGTERM);
  if (auto status = WaitFor(grace)) return *status;
  Signal(SIGKILL);
  return Wait();
}

Subprocess::~Subprocess() {
  if (pid_ > 0) {
    Signal(SIGKILL);
    if (reader_.joinable()) reader_.join();
  }
}

}  // namespace mesa::worker
