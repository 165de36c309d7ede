#include "tests/coordinator_harness.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "cli/client.h"

namespace mesa::testing {

std::string CoordinatorBinary() { return RunfilePath("coordinator/mesa-coordinator"); }

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
}

absl::StatusOr<std::unique_ptr<CoordinatorProcess>> CoordinatorProcess::Start(
    const std::string& db_path, const std::vector<std::string>& extra_args,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  std::vector<std::string> args = {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                                   absl::StrCat("--db=", db_path)};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  absl::StatusOr<std::unique_ptr<Process>> process = Process::Start(CoordinatorBinary(), args);
  if (!process.ok()) return process.status();
  absl::StatusOr<std::string> address = WaitForListenAddress(**process, absl::Seconds(15));
  if (!address.ok()) return address.status();
  std::unique_ptr<CoordinatorProcess> c(new CoordinatorProcess());
  c->process_ = std::move(*process);
  c->address_ = *address;
  c->channel_ = mesa::cli::JobClient::OpenChannel(
      c->address_, credentials != nullptr ? credentials : grpc::InsecureChannelCredentials());
  if (!c->channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", c->address_));
  }
  return c;
}

std::unique_ptr<mesa::v1::JobService::Stub> CoordinatorProcess::JobStub() const {
  return mesa::v1::JobService::NewStub(channel_);
}

std::unique_ptr<mesa::v1::WorkerService::Stub> CoordinatorProcess::WorkerStub() const {
  return mesa::v1::WorkerService::NewStub(channel_);
}

mesa::v1::JobSpec TinyTrainSpec(const std::string& name) {
  mesa::v1::JobSpec spec;
  spec.set_name(name);
  spec.set_type(mesa::v1::JOB_TYPE_TRAIN);
  spec.mutable_resources()->set_gpus(0);
  spec.mutable_resources()->set_cpu_threads(1);
  auto* m = spec.mutable_model();
  m->set_vocab_size(257);
  m->set_d_model(64);
  m->set_n_layers(2);
  m->set_n_heads(2);
  m->set_head_dim(32);
  auto* d = spec.mutable_data();
  d->set_train_path("/data/tiny/train_*.bin");
  d->set_tokenizer("byte");
  d->set_seq_len(128);
  d->set_batch_size(8);
  spec.mutable_optimizer()->set_lr(3e-3f);
  spec.mutable_optimizer()->set_warmup_steps(10);
  spec.mutable_training()->set_steps(200);
  spec.mutable_training()->set_device("cpu");
  return spec;
}

FakeWorker::FakeWorker(std::shared_ptr<grpc::Channel> channel, std::string worker_id, int cpu_slots,
                       int gpus)
    : stub_(mesa::v1::WorkerService::NewStub(channel)), worker_id_(std::move(worker_id)) {
  resources_.set_cpu_slots(cpu_slots);
  for (int i = 0; i < gpus; ++i) {
    auto* gpu = resources_.add_gpus();
    gpu->set_index(i);
    gpu->set_name("Fake GPU");
    gpu->set_memory_bytes(80LL << 30);
  }
}

absl::Status FakeWorker::Register() {
  mesa::v1::RegisterWorkerRequest request;
  request.set_worker_id(worker_id_);
  request.set_hostname(worker_id_);
  *request.mutable_resources() = resources_;
  for (const auto& [job, attempt] : running_) {
    auto* r = request.add_running();
    r->set_job_id(job);
    r->set_attempt(attempt);
  }
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(5));
  mesa::v1::RegisterWorkerResponse response;
  grpc::Status status = stub_->RegisterWorker(&context, request, &response);
  if (!status.ok()) return cli::FromGrpcStatus(status);
  lease_id_ = response.lease_id();
  return absl::OkStatus();
}

absl::StatusOr<mesa::v1::HeartbeatResponse> FakeWorker::Heartbeat(absl::Duration max_wait) {
  mesa::v1::HeartbeatRequest request;
  request.set_worker_id(worker_id_);
  request.set_lease_id(lease_id_);
  request.set_max_wait_ms(absl::ToInt64Milliseconds(max_wait));
  for (const auto& [job, attempt] : running_) {
    auto* r = request.add_running();
    r->set_job_id(job);
    r->set_attempt(attempt);
  }
  grpc::ClientContext context;
  SetDeadline(context, max_wait + absl::Seconds(5));
  mesa::v1::HeartbeatResponse response;
  grpc::Status status = stub_->Heartbeat(&context, request, &response);
  if (!status.ok()) return cli::FromGrpcStatus(status);
  for (const auto& a : response.assignments()) running_.insert({a.job_id(), a.attempt()});
  return response;
}

absl::StatusOr<mesa::v1::Assignment> FakeWorker::WaitForAssignment(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    absl::Duration wait = std::min(absl::Milliseconds(500), deadline - absl::Now());
    absl::StatusOr<mesa::v1::HeartbeatResponse> response = Heartbeat(wait);
    if (!response.ok()) return response.status();
    if (response->reregister()) {
      absl::Status s = Register();
      if (!s.ok()) return s;
      continue;
    }
    if (response->assignments_size() > 0) return response->assignments(0);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("no assignment for ", worker_id_, " within ", absl::FormatDuration(timeout)));
}

absl::StatusOr<mesa::v1::UpdateAttemptResponse> FakeWorker::Update(
    mesa::v1::UpdateAttemptRequest request) {
  request.set_worker_id(worker_id_);
  request.set_lease_id(lease_id_);
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(5));
  mesa::v1::UpdateAttemptResponse response;
  grpc::Status status = stub_->UpdateAttempt(&context, request, &response);
  if (!status.ok()) return cli::FromGrpcStatus(status);
  if (request.phase() != mesa::v1::ATTEMPT_PHASE_RUNNING) {
    running_.erase({request.job_id(), request.attempt()});
  }
  return response;
}

absl::Status FakeWorker::Running(const mesa::v1::Assignment& a,
                                 const mesa::v1::Progress& progress) {
  mesa::v1::UpdateAttemptRequest request;
  request.set_job_id(a.job_id());
  request.set_attempt(a.attempt());
  request.set_phase(mesa::v1::ATTEMPT_PHASE_RUNNING);
  *request.mutable_progress() = progress;
  return Update(request).status();
}

absl::Status FakeWorker::Succeed(const mesa::v1::Assignment& a, const mesa::v1::JobResult& result) {
  mesa::v1::UpdateAttemptRequest request;
  request.set_job_id(a.job_id());
  request.set_attempt(a.attempt());
  request.set_phase(mesa::v1::ATTEMPT_PHASE_SUCCEEDED);
  *request.mutable_result() = result;
  return Update(request).status();
}

absl::Status FakeWorker::Fail(const mesa::v1::Assignment& a, mesa::v1::FailureKind kind,
                              const std::string& message) {
  mesa::v1::UpdateAttemptRequest request;
  request.set_job_id(a.job_id());
  request.set_attempt(a.attempt());
  request.set_phase(mesa::v1::ATTEMPT_PHASE_FAILED);
  request.set_failure_kind(kind);
  request.set_message(message);
  return Update(request).status();
}

}  // namespace mesa::testing
