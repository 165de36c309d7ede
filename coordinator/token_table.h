// Bearer tokens and the users they stand for (--tokens_file), shared by the coordinator's job API
// and mesa-serve's HTTP API. No gRPC here: mesa-serve runs where gRPC is not installed.
#ifndef MESANET_COORDINATOR_TOKEN_TABLE_H_
#define MESANET_COORDINATOR_TOKEN_TABLE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/quotas.h"

namespace mesa::coordinator {

enum class Role { kViewer, kUser, kAdmin };
absl::string_view RoleName(Role role);

// An authenticated caller of the job API.
struct Principal {
  std::string name;
  Role role = Role::kAdmin;
};

// Equality that takes the same time wherever the first difference is (it depends only on the
// sizes), so comparing a presented token with a configured one reveals nothing of the latter.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// The users of --tokens_file:
//   users:
//     - {name: alice, token: <at least 16 characters>, role: user}   # user | viewer | admin
//     - {name: bob, token: ..., role: user, quota: {max_gpus: 8, max_queued_jobs: 50,
//        submit_rate: 30, submit_burst: 10}}   # optional: overrides the --user_* quota flags
class TokenTable {
 public:
  static absl::StatusOr<TokenTable> Parse(const std::string& yaml);
  static absl::StatusOr<TokenTable> Load(const std::string& path);
  // The user holding `token`; every entry is compared (in constant time), so the time taken does
  // not say which one matched.
  std::optional<Principal> Find(absl::string_view token) const;
  size_t size() const { return entries_.size(); }
  // The `quota:` entries, by user name.
  const absl::flat_hash_map<std::string, QuotaOverride>& quota_overrides() const {
    return quota_overrides_;
  }

 private:
  struct Entry {
    std::string token;
    Principal principal;
  };
  std::vector<Entry> entries_;
  absl::flat_hash_map<std::string, QuotaOverride> quota_overrides_;
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_TOKEN_TABLE_H_
