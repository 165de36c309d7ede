// The agent side of the trainers' file rendezvous (docs/distributed.md, "Rendezvous"): mesa-train
// never links gRPC, so the agent relays between a per-attempt local directory and the
// coordinator's per-attempt key-value store (WorkerService.PutRendezvous/GetRendezvous).
//
// Files in the directory (written by mesa-train's FileIdExchange and by this bridge) follow
// launch/rendezvous_files.h: KEY holds a value, KEY+want says a rank waits for it.
// The bridge publishes every value file that a local rank writes (PutRendezvous), and for every
// `KEY+want` whose value is not here yet long-polls GetRendezvous and writes the value as KEY.
// Values it fetched are not published back. Keys are those of the trainer (<job>.<attempt>.tcp,
// .nccl); the RPC adds job and attempt again, so values never leak between attempts.
#ifndef MESANET_WORKER_RENDEZVOUS_BRIDGE_H_
#define MESANET_WORKER_RENDEZVOUS_BRIDGE_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "mesa/v1/worker_service.grpc.pb.h"

namespace mesa::worker {

// The current stub to the coordinator (the agent replaces it after a failed call).
using StubProvider = std::function<std::shared_ptr<mesa::v1::WorkerService::Stub>()>;

struct RendezvousBridgeOptions {
  std::string dir;  // Created by Start().
  std::string job_id;
  int attempt = 0;
  absl::Duration scan_interval = absl::Milliseconds(20);
  absl::Duration long_poll = absl::Seconds(10);  // wait_ms of one GetRendezvous
  absl::Duration rpc_timeout = absl::Seconds(10);
  // The coordinator keeps values in memory only: a published value is put again every
  // `republish_interval` for `republish_for` (the trainers' rendezvous timeout; no rank waits
  // longer), so a coordinator restart in between does not strand the waiting ranks.
  absl::Duration republish_interval = absl::Seconds(5);
  absl::Duration republish_for = absl::Seconds(300);
  // Lines for the attempt's agent log (may be null).
  std::function<void(const std::string&)> log;
  // The worker's id and its current lease, sent with every call (the lease changes when the agent
  // registers again). Null: sent empty (tests of the file side only).
  std::function<std::pair<std::string, std::string>()> identity;
};

class RendezvousBridge {
 public:
  RendezvousBridge(RendezvousBridgeOptions options, StubProvider stub);
  ~RendezvousBridge();  // Stop()

  // Creates the directory and starts watching it.
  absl::Status Start();
  // Cancels pending calls and joins; idempotent.
  void Stop();

  // Keys published / fetched so far (for tests and logs).
  std::set<std::string> published() const;
  std::set<std::string> fetched() const;

 private:
  struct Published {
    std::string value;
    absl::Time first;
    absl::Time next;  // Next put (first try, retry or republish).
    bool confirmed = false;
    bool given_up = false;
  };

  void ScanLoop();
  void ScanOnce();
  void FetchLoop(std::string key);
  absl::Status Put(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> Get(const std::string& key);
  bool stopping();
  void Log(const std::string& text);
  // Registers a call so Stop() can cancel it; false if already stopping.
  bool Track(grpc::ClientContext* context);
  void Untrack(grpc::ClientContext* context);

  const RendezvousBridgeOptions options_;
  const StubProvider stub_;
  std::thread scanner_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> calls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Published> published_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> wanted_ ABSL_GUARDED_BY(mu_);   // A fetch was started.
  std::set<std::string> fetched_ ABSL_GUARDED_BY(mu_);  // Written by us: not ours to publish.
  std::vector<std::thread> fetchers_ ABSL_GUARDED_BY(mu_);
};

// The local address of the route to `target` ("host:port", "dns:///host:port", "[v6]:port"):
// what peers on the coordinator's network can reach this node at. "" when it cannot be found.
std::string LocalAddressTowards(const std::string& target);

}  // namespace mesa::worker

#endif  // MESANET_WORKER_RENDEZVOUS_BRIDGE_H_
