#include "model/comm/subprocess_for_test.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/time/clock.h"

extern char** environ;

namespace mesa::model::testing {

std::vector<ProcessResult> RunProcesses(const std::vector<ProcessSpec>& specs,
                                        absl::Duration timeout, bool stop_others_on_failure) {
  bool stopped_by_peer = false;
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  struct Running {
    pid_t pid = -1;
    int fd = -1;
    bool exited = false;
  };
  std::vector<Running> running(specs.size());
  std::vector<ProcessResult> results(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (absl::StartsWith(*e, "OMPI_") || absl::StartsWith(*e, "PMIX_") ||
          absl::StartsWith(*e, "MESA_")) {
        continue;
      }
      env.push_back(*e);
    }
    env.insert(env.end(), specs[i].env.begin(), specs[i].env.end());
    std::vector<char*> argv, envp;
    for (const std::string& a : specs[i].argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) abort();
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      int devnull = open("/dev/null", O_RDONLY);
      dup2(devnull, 0);
      execve(argv[0], argv.data(), envp.data());
      execvpe(argv[0], argv.data(), envp.data());
      dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
      _exit(127);
    }
    setpgid(pid, pid);
    close(fds[1]);
    running[i] = {pid, fds[0], false};
  }
  bool terminated = false;
  absl::Time kill_at = absl::InfiniteFuture();
  size_t reaped = 0;
  auto terminate_all = [&](absl::Time now) {
    terminated = true;
    kill_at = now + absl::Seconds(2);
    for (const Running& r : running) {
      if (!r.exited) kill(-r.pid, SIGTERM);
    }
  };
  while (reaped < running.size()) {
    std::vector<pollfd> polls;
    std::vector<size_t> which;
    for (size_t i = 0; i < running.size(); ++i) {
      if (running[i].fd >= 0) {
        polls.push_back({running[i].fd, POLLIN, 0});
        which.push_back(i);
      }
    }
    poll(polls.data(), polls.size(), 20);
    for (size_t k = 0; k < polls.size(); ++k) {
      if (polls[k].revents == 0) continue;
      char buf[4096];
      const ssize_t r = read(polls[k].fd, buf, sizeof(buf));
      if (r > 0) {
        results[which[k]].output.append(buf, r);
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(polls[k].fd);
        running[which[k]].fd = -1;
      }
    }
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < running.size(); ++i) {
      if (running[i].exited) continue;
      int status = 0;
      if (waitpid(running[i].pid, &status, WNOHANG) != running[i].pid) continue;
      running[i].exited = true;
      ++reaped;
      results[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      results[i].seconds = absl::ToDoubleSeconds(now - start);
      results[i].timed_out = terminated && !stopped_by_peer;
      kill(-running[i].pid, SIGKILL);  // anything it left behind in its group
      if (stop_others_on_failure && results[i].exit_code != 0 && !terminated) {
        stopped_by_peer = true;
        terminate_all(now);
      }
    }
    if (!terminated && now > deadline) {
      terminate_all(now);
    } else if (terminated && now > kill_at) {
      for (const Running& r : running) {
        if (!r.exited) kill(-r.pid, SIGKILL);
      }
      kill_at = absl::InfiniteFuture();
    }
  }
  // Output still buffered in the pipes (a grandchild may hold one open: read what is there).
  for (size_t i = 0; i < running.size(); ++i) {
    if (running[i].fd < 0) continue;
    fcntl(running[i].fd, F_SETFL, O_NONBLOCK);
    char buf[4096];
    ssize_t r;
    while ((r = read(running[i].fd, buf, sizeof(buf))) > 0) results[i].output.append(buf, r);
    close(running[i].fd);
  }
  return results;
}

std::string MpirunPath() {
  if (const char* m = getenv("MPIRUN"); m != nullptr && *m != '\0') return m;
  if (access("/usr/bin/mpirun", X_OK) == 0) return "/usr/bin/mpirun";
  return "mpirun";
}

std::vector<std::string> MpirunArgs(int np) {
  return {MpirunPath(), "-np", std::to_string(np), "--oversubscribe", "--allow-run-as-root",
          // One node, no ssh, loopback TCP only: vader's shared memory segfaulted in CI-like
          // runs with several mpiruns at once (mca_btl_vader_poll_handle_frag), and tests need
          // correctness, not bandwidth.
          "--mca", "plm_rsh_agent", "false", "--mca", "btl", "self,tcp",
          "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo",
          "--bind-to", "none"};
}

std::vector<std::string> MpirunEnv() {
  std::vector<std::string> env = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                                  "OMPI_MCA_rmaps_base_oversubscribe=1"};
  // Each test its own session directory: concurrent mpiruns (bazel runs tests in parallel) share
  // /tmp/ompi.HOST.UID otherwise, and one's cleanup breaks the other's shared-memory setup.
  if (const char* tmp = std::getenv("TEST_TMPDIR"); tmp != nullptr && *tmp != '\0') {
    env.push_back(std::string("OMPI_MCA_orte_tmpdir_base=") + tmp);
  }
  return env;
}

}  // namespace mesa::model::testing
