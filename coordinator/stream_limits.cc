#include "coordinator/stream_limits.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mesa::coordinator {

StreamLimits::Slot::~Slot() {
  if (limits_ != nullptr) limits_->Close(connection_);
}

absl::StatusOr<StreamLimits::Slot> StreamLimits::Open(absl::string_view connection) {
  absl::MutexLock lock(&mu_);
  if (open_ >= options_.max_open_streams) {
    return absl::ResourceExhaustedError(
        absl::StrCat("at most ", options_.max_open_streams,
                     " watch and log streams are open at once on this coordinator (quota "
                     "max_open_streams); close one or try again later"));
  }
  const int per_connection = options_.max_streams_per_connection;
  if (per_connection > 0) {
    auto it = by_connection_.find(connection);
    if (it != by_connection_.end() && it->second >= per_connection) {
      return absl::ResourceExhaustedError(
          absl::StrCat("at most ", per_connection,
                       " watch and log streams may be open at once on one connection (quota "
                       "max_streams_per_connection); close one first"));
    }
  }
  ++open_;
  ++by_connection_[connection];
  return Slot(this, std::string(connection));
}

void StreamLimits::Close(const std::string& connection) {
  absl::MutexLock lock(&mu_);
  --open_;
  auto it = by_connection_.find(connection);
  if (it != by_connection_.end() && --it->second <= 0) by_connection_.erase(it);
}

int StreamLimits::open() const {
  absl::MutexLock lock(&mu_);
  return open_;
}

int StreamLimits::open(absl::string_view connection) const {
  absl::MutexLock lock(&mu_);
  auto it = by_connection_.find(connection);
  return it == by_connection_.end() ? 0 : it->second;
}

}  // namespace mesa::coordinator
