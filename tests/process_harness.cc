#include "tests/process_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace mesa::testing {
namespace {

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

namespace {
// A directory that is never created.
constexpr char kNoConfigDir[] = "/nonexistent/mesa-test-config-home";
}  // namespace

absl::StatusOr<std::unique_ptr<Process>> Process::Start(const std::string& path,
                                                        const std::vector<std::string>& args,
                                                        const Options& options) {
  std::unique_ptr<Process> process(new Process(Basename(path)));
  Process* p = process.get();
  base::SpawnOptions spawn;
  spawn.argv = {path};
  spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
  // mesactl reads a configuration file from the home directory (cli/config.h), which `bazel
  // test` passes through: point it at one that does not exist, so that a developer's contexts
  // cannot change what a test's mesactl connects to or sends. A test may name its own file.
  std::vector<std::string> env = {
      "MESA_CONFIG=", "MESA_CONTEXT=", absl::StrCat("XDG_CONFIG_HOME=", kNoConfigDir)};
  env.insert(env.end(), options.env.begin(), options.env.end());
  spawn.env = base::InheritedEnvironment(env);
  spawn.cwd = options.cwd;
  spawn.stdin_data = options.stdin_data;
  spawn.on_output = [p](base::Stream stream, absl::string_view data) { p->OnOutput(stream, data); };
  base::LineCallback echo;
  if (options.echo_stderr) {
    echo = [name = p->name_](base::Stream stream, std::string line) {
      if (stream == base::Stream::kStderr) std::cerr << "[" << name << "] " << line << "\n";
    };
  }
  absl::StatusOr<std::unique_ptr<base::Subprocess>> child =
      base::Subprocess::Spawn(spawn, std::move(echo));
  if (!child.ok()) return child.status();
  process->process_ = *std::move(child);
  return process;
}

Process::~Process() { process_.reset(); }

void Process::OnOutput(base::Stream stream, absl::string_view data) {
  absl::MutexLock lock(&mu_);
  if (stream == base::Stream::kStdout) {
    if (data.empty()) stdout_closed_ = true;
    stdout_.append(data.data(), data.size());
  } else {
    stderr_.append(data.data(), data.size());
  }
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
  if (process_->exit_status().has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(name_, " already exited"));
  }
  process_->Signal(signal);
  return absl::OkStatus();
}

// Once reaped, every byte of output has been delivered too.
absl::StatusOr<Process::ExitStatus> Process::Wait(absl::Duration timeout) {
  const std::optional<int> status = process_->WaitFor(timeout);
  if (!status.has_value()) {
    return absl::DeadlineExceededError(
        absl::StrCat(name_, " did not exit within ", absl::FormatDuration(timeout)));
  }
  return DecodeWaitStatus(*status);
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

absl::StatusOr<std::string> ScrapeMetrics(absl::string_view address) {
  absl::StatusOr<RunResult> r = RunProcess(
      "/usr/bin/curl", {"-sf", absl::StrCat("http://", address, "/metrics")}, absl::Seconds(10));
  if (!r.ok()) return r.status();
  if (r->exit_status != 0) {
    return absl::UnavailableError(
        absl::StrCat("curl http://", address, "/metrics exited ", r->exit_status, ": ", r->err));
  }
  return std::move(r->out);
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

}  // namespace mesa::testing
