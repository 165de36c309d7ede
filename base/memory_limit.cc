#include "base/memory_limit.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mesa::base {
namespace {

constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();

// The first line of a file, trimmed; empty when unreadable.
std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return std::string(absl::StripAsciiWhitespace(line));
}

// A byte count from a limit file: "max" (v2) or a value of 2^62 and up (v1's "no limit") is
// unlimited; unreadable is unlimited too (no such limit here).
int64_t ReadLimit(const std::string& path) {
  const std::string text = FirstLine(path);
  int64_t value;
  if (text.empty() || text == "max" || !absl::SimpleAtoi(text, &value) ||
      value >= (int64_t{1} << 62)) {
    return kUnlimited;
  }
  return value;
}

int64_t ReadUsage(const std::string& path) {
  int64_t value;
  return absl::SimpleAtoi(FirstLine(path), &value) ? value : 0;
}

void Tighten(MemoryHeadroom* best, int64_t bytes, std::string source) {
  if (bytes < best->bytes) {
    best->bytes = bytes < 0 ? 0 : bytes;
    best->source = std::move(source);
  }
}

std::string MiB(int64_t bytes) { return absl::StrCat(bytes >> 20, " MiB"); }

}  // namespace

MemoryHeadroom AvailableMemory(const MemoryLimitPaths& paths) {
  MemoryHeadroom best{kUnlimited, "no limit found"};
  // The machine: MemAvailable (kB).
  {
    std::ifstream meminfo(paths.proc_root + "/meminfo");
    std::string line;
    while (std::getline(meminfo, line)) {
      absl::string_view rest(line);
      if (!absl::ConsumePrefix(&rest, "MemAvailable:")) continue;
      int64_t kb;
      absl::string_view number = absl::StripSuffix(absl::StripAsciiWhitespace(rest), "kB");
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(number), &kb)) {
        Tighten(&best, kb * 1024, "the machine's MemAvailable");
      }
    }
  }
  // cgroups: /proc/self/cgroup lists "0::/path" (v2) and "N:memory:/path" (v1).
  std::ifstream cgroups(paths.proc_root + "/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    if (parts[0] == "0" && parts[1].empty()) {
      // v2: every level from this cgroup up to the root may limit it.
      std::string cgroup = parts[2];
      while (true) {
        const std::string dir = paths.cgroup_root + (cgroup == "/" ? "" : cgroup);
        const int64_t limit = ReadLimit(dir + "/memory.max");
        if (limit != kUnlimited) {
          const int64_t used = ReadUsage(dir + "/memory.current");
          Tighten(&best, limit - used,
                  absl::StrCat("cgroup v2 memory.max of ", dir, " (", MiB(limit), ", ", MiB(used),
                               " in use)"));
        }
        if (cgroup == "/" || cgroup.empty()) break;
        const size_t slash = cgroup.rfind('/');
        cgroup = slash == 0 ? "/" : cgroup.substr(0, slash);
      }
    } else if (absl::StrContains(parts[1], "memory")) {
      // v1: a container sees its own cgroup at the controller's mount point.
      for (const std::string& dir :
           {paths.cgroup_root + "/memory" + parts[2], paths.cgroup_root + "/memory"}) {
        const int64_t limit = ReadLimit(dir + "/memory.limit_in_bytes");
        if (limit == kUnlimited) continue;
        const int64_t used = ReadUsage(dir + "/memory.usage_in_bytes");
        Tighten(&best, limit - used,
                absl::StrCat("cgroup v1 memory.limit_in_bytes of ", dir, " (", MiB(limit), ", ",
                             MiB(used), " in use)"));
        break;
      }
    }
  }
  // The address-space limit of this process, less what it has mapped (statm: pages).
  if (paths.use_rlimit) {
    rlimit limit;
    if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      std::istringstream statm(FirstLine(paths.proc_root + "/self/statm"));
      int64_t pages = 0;
      statm >> pages;
      const int64_t mapped = pages * sysconf(_SC_PAGE_SIZE);
      Tighten(&best, static_cast<int64_t>(limit.rlim_cur) - mapped,
              absl::StrCat("RLIMIT_AS (", MiB(static_cast<int64_t>(limit.rlim_cur)), ", ",
                           MiB(mapped), " mapped)"));
    }
  }
  return best;
}

}  // namespace mesa::base
