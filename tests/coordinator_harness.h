// Test helpers around the real mesa-coordinator binary: start it on a loopback port with a given
// database, connect to it, and play a worker agent over WorkerService.

#ifndef MESANET_TESTS_COORDINATOR_HARNESS_H_
#define MESANET_TESTS_COORDINATOR_HARNESS_H_

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "mesa/v1/job.pb.h"
#include "mesa/v1/job_service.grpc.pb.h"
#include "mesa/v1/worker_service.grpc.pb.h"
#include "tests/process_harness.h"

namespace mesa::testing {

// Runfiles path of //coordinator:mesa-coordinator.
std::string CoordinatorBinary();

class CoordinatorProcess {
 public:
  // Starts mesa-coordinator on 127.0.0.1:0 (gRPC and metrics) with the SQLite file `db_path`
  // and waits (bounded) for its "listening on" line. channel() connects with `credentials`
  // (null: plaintext).
  static absl::StatusOr<std::unique_ptr<CoordinatorProcess>> Start(
      const std::string& db_path, const std::vector<std::string>& extra_args = {},
      std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

  const std::string& address() const { return address_; }
  Process& process() { return *process_; }
  // A channel that is already connected (bounded wait).
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  std::unique_ptr<mesa::v1::JobService::Stub> JobStub() const;
  std::unique_ptr<mesa::v1::WorkerService::Stub> WorkerStub() const;

 private:
  CoordinatorProcess() = default;
  std::unique_ptr<Process> process_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
};

// A valid CPU training spec named `name`; tests vary fields of it.
mesa::v1::JobSpec TinyTrainSpec(const std::string& name);

// A ClientContext deadline `timeout` from now.
void SetDeadline(grpc::ClientContext& context, absl::Duration timeout);

// Plays a worker agent: registers, long-polls heartbeats for assignments, reports attempts.
class FakeWorker {
 public:
  FakeWorker(std::shared_ptr<grpc::Channel> channel, std::string worker_id, int cpu_slots,
             int gpus = 0);

  // Memory to report at registration (WorkerResources.memory_bytes); 0 = none.
  void set_memory_bytes(int64_t bytes) { resources_.set_memory_bytes(bytes); }

  absl::Status Register();
  // Heartbeats until an assignment arrives; DeadlineExceeded after `timeout`.
  absl::StatusOr<mesa::v1::Assignment> WaitForAssignment(absl::Duration timeout);
  // One heartbeat with the given long-poll wait.
  absl::StatusOr<mesa::v1::HeartbeatResponse> Heartbeat(absl::Duration max_wait);

  absl::StatusOr<mesa::v1::UpdateAttemptResponse> Update(mesa::v1::UpdateAttemptRequest request);
  absl::Status Running(const mesa::v1::Assignment& a, const mesa::v1::Progress& progress);
  absl::Status Succeed(const mesa::v1::Assignment& a, const mesa::v1::JobResult& result);
  absl::Status Fail(const mesa::v1::Assignment& a, mesa::v1::FailureKind kind,
                    const std::string& message);

  const std::string& worker_id() const { return worker_id_; }
  // The lease of the last Register() (worker calls must carry it).
  const std::string& lease_id() const { return lease_id_; }

 private:
  std::unique_ptr<mesa::v1::WorkerService::Stub> stub_;
  std::string worker_id_;
  mesa::v1::WorkerResources resources_;
  std::string lease_id_;
  std::set<std::pair<std::string, int>> running_;  // (job id, attempt)
};

}  // namespace mesa::testing

#endif  // MESANET_TESTS_COORDINATOR_HARNESS_H_
