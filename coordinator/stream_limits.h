// Caps on open WatchJob and GetJobLogs streams ("per connection: max concurrent
// streams"): one across the whole server, so watchers cannot take every server thread, and one per
// client connection, so one connection cannot take every slot of the first. Every stream the job
// API opens takes its slot here, in one place (JobServiceImpl::OpenStream).
#ifndef MESANET_COORDINATOR_STREAM_LIMITS_H_
#define MESANET_COORDINATOR_STREAM_LIMITS_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mesa::coordinator {

struct StreamLimitOptions {
  // Open streams across all connections (--max_open_streams); at least 1.
  int max_open_streams = 1024;
  // Open streams of one connection (--max_streams_per_connection); 0: no per-connection cap.
  int max_streams_per_connection = 64;
  // A connection with no call in flight for this long is closed (--idle_connection_timeout), and a
  // connection must finish its TLS handshake within min(this, 30 s): an idle or stalled client
  // does not hold a connection (and its memory) forever.
  absl::Duration idle_connection_timeout = absl::Minutes(5);
};

class StreamLimits {
 public:
  // One open stream; its slot is freed when the slot is destroyed.
  class Slot {
   public:
    Slot(Slot&& other) noexcept
        : limits_(other.limits_), connection_(std::move(other.connection_)) {
      other.limits_ = nullptr;
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    Slot& operator=(Slot&&) = delete;
    ~Slot();

   private:
    friend class StreamLimits;
    Slot(StreamLimits* limits, std::string connection)
        : limits_(limits), connection_(std::move(connection)) {}
    StreamLimits* limits_;
    std::string connection_;
  };

  explicit StreamLimits(StreamLimitOptions options) : options_(options) {}

  // Takes a slot for a stream of `connection` (gRPC's ServerContext::peer(): "ipv4:ADDR:PORT",
  // one value per TCP connection). RESOURCE_EXHAUSTED naming the limit and its value when the
  // connection or the server already holds as many streams as allowed.
  absl::StatusOr<Slot> Open(absl::string_view connection);

  // Streams open now, on all connections and on `connection`.
  int open() const;
  int open(absl::string_view connection) const;

 private:
  void Close(const std::string& connection);

  const StreamLimitOptions options_;
  mutable absl::Mutex mu_;
  int open_ ABSL_GUARDED_BY(mu_) = 0;
  // Connections with at least one open stream (an entry is dropped with its last stream).
  absl::flat_hash_map<std::string, int> by_connection_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_STREAM_LIMITS_H_
