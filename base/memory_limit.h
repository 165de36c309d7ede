// How much memory this process may still take: the tightest of the cgroup limit (v2 memory.max
// of this process's cgroup and its parents, or v1 memory.limit_in_bytes) less what the cgroup
// uses, RLIMIT_AS less this process's address space, and the machine's MemAvailable. A trainer
// admits a plan only if it fits, and names the limit that refused it.
#ifndef MESANET_BASE_MEMORY_LIMIT_H_
#define MESANET_BASE_MEMORY_LIMIT_H_

#include <cstdint>
#include <string>

namespace mesa::base {

struct MemoryHeadroom {
  int64_t bytes = 0;   // what may still be allocated
  std::string source;  // which limit, in words, e.g. "cgroup v2 memory.max of /sys/fs/cgroup/x"
};

// Where the limits are read from; tests point these at a fixture tree.
struct MemoryLimitPaths {
  std::string proc_root = "/proc";
  std::string cgroup_root = "/sys/fs/cgroup";
  bool use_rlimit = true;
};

MemoryHeadroom AvailableMemory(const MemoryLimitPaths& paths = {});

}  // namespace mesa::base

#endif  // MESANET_BASE_MEMORY_LIMIT_H_
