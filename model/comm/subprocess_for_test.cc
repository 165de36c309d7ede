#include "model/comm/subprocess_for_test.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/subprocess.h"

namespace mesa::model::testing {

std::vector<ProcessResult> RunProcesses(const std::vector<ProcessSpec>& specs,
                                        absl::Duration timeout, bool stop_others_on_failure) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  std::vector<ProcessResult> results(specs.size());
  absl::Mutex mu;  // guards the outputs, which the reader threads append to
  std::vector<std::unique_ptr<base::Subprocess>> running(specs.size());
  size_t finished = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    base::SpawnOptions options;
    options.argv = specs[i].argv;
    options.env = base::InheritedEnvironment(specs[i].env, {"OMPI_", "PMIX_", "MESA_"});
    options.stderr_to_stdout = true;
    options.on_output = [&mu, &output = results[i].output](base::Stream, absl::string_view data) {
      absl::MutexLock lock(&mu);
      output.append(data.data(), data.size());
    };
    absl::StatusOr<std::unique_ptr<base::Subprocess>> process =
        base::Subprocess::Spawn(options, nullptr);
    if (process.ok()) {
      running[i] = *std::move(process);
    } else {  // as if the exec had failed in the child
      results[i].exit_code = 127;
      results[i].output = absl::StrCat(process.status().message(), "\n");
      ++finished;
    }
  }
  bool terminated = false, stopped_by_peer = false;
  absl::Time kill_at = absl::InfiniteFuture();
  auto terminate_all = [&](absl::Time now) {
    terminated = true;
    kill_at = now + absl::Seconds(2);
    for (const auto& process : running) {
      if (process != nullptr) process->Signal(SIGTERM);  // a no-op once reaped
    }
  };
  std::vector<bool> done(specs.size(), false);
  while (finished < specs.size()) {
    absl::SleepFor(absl::Milliseconds(20));
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < specs.size(); ++i) {
      if (done[i] || running[i] == nullptr) continue;
      // Set once the child has exited, its group has been killed and its output read.
      const std::optional<int> status = running[i]->exit_status();
      if (!status.has_value()) continue;
      done[i] = true;
      ++finished;
      results[i].exit_code = WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
      results[i].seconds = absl::ToDoubleSeconds(now - start);
      results[i].timed_out = terminated && !stopped_by_peer;
      if (stop_others_on_failure && results[i].exit_code != 0 && !terminated) {
        stopped_by_peer = true;
        terminate_all(now);
      }
    }
    if (!terminated && now > deadline) {
      terminate_all(now);
    } else if (terminated && now > kill_at) {
      for (const auto& process : running) {
        if (process != nullptr) process->Signal(SIGKILL);
      }
      kill_at = absl::InfiniteFuture();
    }
  }
  running.clear();  // joins the reader threads
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
          "--mca", "plm_rsh_agent", "false", "--mca", "btl", "self,tcp", "--mca",
          "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo", "--bind-to", "none"};
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
