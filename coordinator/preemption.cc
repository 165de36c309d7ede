#include "coordinator/preemption.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/worker_api_limits.h"

namespace mesa::coordinator {

absl::StatusOr<PreemptionPolicy> ParsePreemptionPolicy(absl::string_view text) {
  PreemptionPolicy out;
  if (text.empty()) return out;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--queue_preemption entry \"", entry, "\": ", why,
          " (expected QUEUE=never or QUEUE=lower_priority[/GRACE], e.g. prod=lower_priority/2m)"));
    };
    const std::vector<absl::string_view> kv = absl::StrSplit(entry, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) return bad("no QUEUE=");
    const std::vector<absl::string_view> policy = absl::StrSplit(kv[1], absl::MaxSplits('/', 1));
    QueuePreemption q;
    if (policy[0] == "lower_priority") {
      q.lower_priority = true;
    } else if (policy[0] != "never") {
      return bad(absl::StrCat("unknown policy \"", policy[0], "\""));
    }
    if (policy.size() == 2) {
      if (!q.lower_priority) return bad("a grace period goes with lower_priority only");
      if (!absl::ParseDuration(policy[1], &q.grace) || q.grace <= absl::ZeroDuration() ||
          q.grace > absl::Seconds(kMaxStopGraceSeconds)) {
        return bad(absl::StrCat("grace \"", policy[1], "\" is not a duration in (0, 1h]"));
      }
    }
    if (!out.emplace(std::string(kv[0]), q).second) return bad("queue listed twice");
  }
  return out;
}

}  // namespace mesa::coordinator
