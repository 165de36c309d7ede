#include "base/subprocess.h"

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
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace mesa::base {
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
  if (getppid() != parent) _exit(127);  // The parent died before prctl took effect.
  // The parent may block or ignore signals (gRPC ignores SIGPIPE); the child must not inherit that.
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
  // Everything else the parent has open (gRPC sockets, other children's pipes) stays out.
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

  // in: the child's stdin (/dev/null, or a pipe the reader thread feeds stdin_data into).
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, events[2] = {-1, -1};
  int exec_err[2] = {-1, -1};
  auto close_all = [&] {
    for (int* pair : {in, out, err, events, exec_err}) {
      CloseIfOpen(pair[0]);
      CloseIfOpen(pair[1]);
    }
  };
  if (options.stdin_data.empty()) {
    in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
  } else if (pipe2(in, O_CLOEXEC) != 0 || fcntl(in[1], F_SETFL, O_NONBLOCK) != 0) {
    CloseIfOpen(in[0]);
  }
  if (in[0] < 0 || pipe2(out, O_CLOEXEC) != 0 ||
      (!options.stderr_to_stdout && pipe2(err, O_CLOEXEC) != 0) ||
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
    ExecChild(program.c_str(), argv.data(), envp.data(), options.cwd.c_str(), in[0], out[1],
              options.stderr_to_stdout ? out[1] : err[1], events[1], options.events_fd, exec_err[1],
              parent);
  }
  // Also set the group from the parent, so Signal() right after Spawn() cannot miss it.
  setpgid(pid, pid);
  CloseIfOpen(in[0]);
  CloseIfOpen(out[1]);
  CloseIfOpen(err[1]);
  CloseIfOpen(events[1]);
  CloseIfOpen(exec_err[1]);

  int child_errno = 0;
  ssize_t n;
  do {
    n = read(exec_err[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  CloseIfOpen(exec_err[0]);
  if (n == sizeof(child_errno)) {
    int status;
    waitpid(pid, &status, 0);
    close_all();
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot start ", program, (options.cwd.empty() ? "" : absl::StrCat(" in ", options.cwd)),
        ": ", strerror(child_errno)));
  }

  std::unique_ptr<Subprocess> process(new Subprocess());
  process->pid_ = pid;
  process->on_line_ = std::move(on_line);
  process->on_output_ = options.on_output;
  std::vector<int> fds = {out[0], err[0], events[0]};
  process->reader_ = std::thread(
      &Subprocess::ReaderLoop, process.get(), std::move(fds), in[1], options.stdin_data,
      std::array<size_t, 3>{options.max_line_bytes, options.max_line_bytes,
                            options.max_event_line_bytes > 0 ? options.max_event_line_bytes
                                                             : options.max_line_bytes});
  return process;
}

void Subprocess::ReaderLoop(std::vector<int> fds, int stdin_fd, std::string stdin_data,
                            std::array<size_t, 3> max_line_bytes) {
  // A child that exits without reading its stdin makes write() fail with EPIPE; the SIGPIPE that
  // comes with it stays pending on this thread and is taken back below instead of killing us.
  sigset_t sigpipe;
  sigemptyset(&sigpipe);
  sigaddset(&sigpipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &sigpipe, nullptr);
  size_t stdin_written = 0;
  auto close_stdin = [&] { CloseIfOpen(stdin_fd); };

  constexpr std::array<Stream, 3> kStreams = {Stream::kStdout, Stream::kStderr, Stream::kEvents};
  std::array<std::string, 3> partial;
  std::array<char, 65536> buffer;
  // Lines over max_line_bytes go out in pieces, whether or not their newline came in the same read.
  auto emit = [&](int i, std::string line) {
    if (!on_line_) return;
    while (line.size() > max_line_bytes[i]) {
      on_line_(kStreams[i], line.substr(0, max_line_bytes[i]));
      line.erase(0, max_line_bytes[i]);
    }
    on_line_(kStreams[i], std::move(line));
  };
  // The stream has ended: its last line (without a newline), then the end to on_output_.
  auto finish = [&](int i) {
    CloseIfOpen(fds[i]);
    if (!partial[i].empty()) emit(i, std::move(partial[i]));
    partial[i].clear();
    if (on_output_) on_output_(kStreams[i], absl::string_view());
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
    if (stdin_fd >= 0) {
      pfds.push_back({stdin_fd, POLLOUT, 0});
      index.push_back(-1);
    }
    if (pfds.empty() && exited) break;
    if (exited && absl::Now() - exit_time > kDrainAfterExit) break;
    if (!pfds.empty()) {
      const int ready = poll(pfds.data(), pfds.size(), kPollMillis);
      if (ready < 0 && errno != EINTR) break;
      for (size_t p = 0; ready > 0 && p < pfds.size(); ++p) {
        if (pfds[p].revents == 0) continue;
        const int i = index[p];
        if (i < 0) {
          const ssize_t put =
              write(stdin_fd, stdin_data.data() + stdin_written, stdin_data.size() - stdin_written);
          if (put < 0 && (errno == EINTR || errno == EAGAIN)) continue;
          if (put < 0 && errno == EPIPE) {
            const timespec no_wait = {0, 0};
            sigtimedwait(&sigpipe, nullptr, &no_wait);
          }
          if (put > 0) stdin_written += put;
          if (put < 0 || stdin_written == stdin_data.size()) close_stdin();
          continue;
        }
        const ssize_t got = read(fds[i], buffer.data(), buffer.size());
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got <= 0) {
          finish(i);
          continue;
        }
        if (on_output_) on_output_(kStreams[i], absl::string_view(buffer.data(), got));
        partial[i].append(buffer.data(), got);
        size_t start = 0;
        while (true) {
          const size_t newline = partial[i].find('\n', start);
          if (newline == std::string::npos) break;
          emit(i, partial[i].substr(start, newline - start));
          start = newline + 1;
        }
        partial[i].erase(0, start);
        while (partial[i].size() >= max_line_bytes[i]) {
          emit(i, partial[i].substr(0, max_line_bytes[i]));
          partial[i].erase(0, max_line_bytes[i]);
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
        close_stdin();  // Nobody reads it any more (a grandchild may hold it: no matter).
      }
    }
  }
  close_stdin();
  for (int i = 0; i < 3; ++i) {
    if (fds[i] >= 0) finish(i);  // Given up on (a grandchild holds it open) or poll failed.
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

std::vector<std::string> InheritedEnvironment(const std::vector<std::string>& overrides,
                                              const std::vector<std::string>& drop_prefixes) {
  std::vector<std::string> env;
  std::unordered_map<std::string, size_t> index;  // variable name -> position in env
  auto name_of = [](const std::string& var) { return var.substr(0, var.find('=')); };
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view var(*e);
    bool drop = false;
    for (const std::string& prefix : drop_prefixes) drop |= absl::StartsWith(var, prefix);
    if (drop) continue;
    env.emplace_back(var);
    index.emplace(name_of(env.back()), env.size() - 1);
  }
  for (const std::string& var : overrides) {
    auto [it, added] = index.emplace(name_of(var), env.size());
    if (added) {
      env.push_back(var);
    } else {
      env[it->second] = var;
    }
  }
  return env;
}

}  // namespace mesa::base
