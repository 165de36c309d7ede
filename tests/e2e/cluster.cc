#include "tests/e2e/cluster.h"

#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/format.h"
#include "tests/dev_ca.h"

namespace mesa::e2e {
namespace {

// Binary locations inside the runfiles tree (see BUILD's data).
constexpr char kCoordinator[] = "coordinator/mesa-coordinator";
constexpr char kWorker[] = "worker/mesa-worker";
constexpr char kTrainer[] = "model/main/mesa-train";
constexpr char kMesactl[] = "cli/mesactl";
constexpr char kToken[] = "e2e-admin-0123456789abcdef";

// The tokens of the users of the e2e tokens file (role user).
std::string UserToken(const std::string& user) {
  return absl::StrCat("e2e-", user, "-0123456789abcdef");
}

bool Transient(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded ||
         status.code() == absl::StatusCode::kCancelled ||
         status.code() == absl::StatusCode::kUnknown;
}

}  // namespace

std::string CoordinatorBinary() { return testing::RunfilePath(kCoordinator); }
std::string WorkerBinary() { return testing::RunfilePath(kWorker); }
std::string TrainerBinary() { return testing::RunfilePath(kTrainer); }

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Start(int workers,
                                                        const ClusterOptions& options) {
  std::unique_ptr<Cluster> cluster(new Cluster());
  cluster->options_ = options;
  cluster->dir_ = testing::NewTempDir("cluster-");
  cluster->checkpoint_root_ = cluster->dir_ + "/checkpoints";
  for (const std::string& arg : options.coordinator_args) {
    if (absl::StartsWith(arg, "--checkpoint_root=")) {
      cluster->checkpoint_root_ = arg.substr(std::string("--checkpoint_root=").size());
    }
  }
  if (options.secure) {
    if (auto status = cluster->MakeCredentials(); !status.ok()) return status;
  }
  if (auto status = cluster->StartCoordinator(); !status.ok()) return status;
  for (int i = 1; i <= workers; ++i) {
    if (auto status = cluster->StartWorker(absl::StrCat("w", i)); !status.ok()) return status;
  }
  return cluster;
}

Cluster::~Cluster() {
  // Workers first (they stop their trainers on SIGTERM), then the coordinator.
  for (auto& [id, worker] : workers_) {
    if (worker != nullptr) worker->Terminate(absl::Seconds(5)).IgnoreError();
  }
  if (coordinator_ != nullptr) coordinator_->Kill().IgnoreError();
}

absl::Status Cluster::MakeCredentials() {
  pki_ = dir_ + "/pki";
  if (absl::Status made = testing::MakeDevCa(pki_); !made.ok()) return made;
  std::ofstream(pki_ + "/tokens.yaml")
      << "users:\n  - {name: e2e, token: " << kToken << ", role: admin}\n"
      << "  - {name: alice, token: " << UserToken("alice") << ", role: user}\n"
      << "  - {name: bob, token: " << UserToken("bob") << ", role: user}\n";
  return absl::OkStatus();
}

absl::Status Cluster::StartCoordinator() {
  const std::string listen = address_.empty() ? "127.0.0.1:0" : address_;
  std::vector<std::string> args = {
      "--listen=" + listen, "--metrics_listen=127.0.0.1:0", "--db=" + dir_ + "/coordinator.db",
      // The job's checkpoint root is the coordinator's decision; each worker's own root below
      // differs, so a retry that finds its predecessor's checkpoints proves it was followed.
      "--checkpoint_root=" + checkpoint_root_,
      "--lease_ttl=" + absl::FormatDuration(options_.lease_ttl),
      "--heartbeat_interval=" + absl::FormatDuration(options_.heartbeat_interval)};
  args.insert(args.end(), options_.coordinator_args.begin(), options_.coordinator_args.end());
  if (options_.secure) {
    args.insert(args.end(),
                {"--tls_cert=" + pki_ + "/server.pem", "--tls_key=" + pki_ + "/server.key",
                 "--client_ca=" + pki_ + "/ca.pem", "--tokens_file=" + pki_ + "/tokens.yaml"});
  }
  auto process = testing::Process::Start(CoordinatorBinary(), args);
  if (!process.ok()) return process.status();
  auto address = testing::WaitForListenAddress(**process, absl::Seconds(30));
  if (!address.ok()) return address.status();
  coordinator_ = std::move(*process);
  if (address_.empty()) {
    address_ = *address;
    cli::ConnectOptions connect;
    if (options_.secure) connect = {.ca = pki_ + "/ca.pem", .token = kToken};
    auto client = cli::JobClient::Connect(address_, absl::Seconds(10), connect);
    if (!client.ok()) return client.status();
    client_ = std::move(*client);
  }
  return absl::OkStatus();
}

absl::Status Cluster::KillCoordinator() {
  if (coordinator_ == nullptr) return absl::FailedPreconditionError("no coordinator");
  auto status = coordinator_->Kill();
  coordinator_.reset();
  return status.status();
}

absl::Status Cluster::StartWorker(const std::string& id,
                                  const std::vector<std::string>& extra_args) {
  std::vector<std::string> args = {
      "--coordinator=" + address_,
      "--worker_id=" + id,
      "--gpus=none",
      absl::StrCat("--cpu_slots=", options_.cpu_slots_per_worker),
      "--workdir=" + dir_ + "/" + id,
      "--checkpoint_root=" + dir_ + "/" + id + "/own-checkpoints",
      "--trainer=" + TrainerBinary(),
      "--metrics_listen=127.0.0.1:0",
      "--grace_period=" + absl::FormatDuration(options_.grace_period),
      "--collective_timeout=" + absl::FormatDuration(options_.collective_timeout),
      "--flush_interval=200ms"};
  if (options_.secure) {
    // One certificate per worker id (its CN): the coordinator binds the id to the certificate.
    if (!std::filesystem::exists(pki_ + "/" + id + ".pem")) {
      absl::Status issued = testing::MakeDevCa(pki_, {"--no-server", "--workers", id});
      if (!issued.ok()) return issued;
    }
    args.insert(args.end(), {"--ca=" + pki_ + "/ca.pem", "--tls_cert=" + pki_ + "/" + id + ".pem",
                             "--tls_key=" + pki_ + "/" + id + ".key"});
  }
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  auto process = testing::Process::Start(WorkerBinary(), args);
  if (!process.ok()) return process.status();
  auto metrics = (*process)->WaitForLinePrefix("metrics on ", absl::Seconds(30));
  if (!metrics.ok()) return metrics.status();
  workers_[id] = std::move(*process);
  return absl::OkStatus();
}

absl::StatusOr<testing::RunResult> Cluster::Mesactl(std::vector<std::string> args) {
  std::vector<std::string> global = {"--server=" + address_};
  testing::Process::Options options;
  if (options_.secure) {
    global.push_back("--ca=" + pki_ + "/ca.pem");
    options.env.push_back(absl::StrCat("MESA_TOKEN=", kToken));
  }
  args.insert(args.begin(), global.begin(), global.end());
  return testing::RunProcess(testing::RunfilePath(kMesactl), args, absl::Seconds(20), options);
}

absl::Status Cluster::KillWorker(const std::string& id) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second == nullptr) return absl::NotFoundError(id);
  auto status = it->second->Kill();
  it->second.reset();
  return status.status();
}

testing::Process* Cluster::worker(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : it->second.get();
}

std::string Cluster::AttemptDir(const std::string& worker_id, const std::string& job_id,
                                int attempt) const {
  return absl::StrCat(dir_, "/", worker_id, "/jobs/", job_id, "/attempt-", attempt);
}

absl::StatusOr<pid_t> Cluster::TrainerPid(const std::string& worker_id, const std::string& job_id,
                                          int attempt, int rank) const {
  const std::string workdir = AttemptDir(worker_id, job_id, attempt);
  const std::string rank_var = absl::StrCat("MESA_RANK=", rank);
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    pid_t pid = 0;
    if (!absl::SimpleAtoi(name, &pid)) continue;
    // NUL-separated argv and environment; the working directory names worker, job and attempt.
    std::ifstream cmdline_in(entry.path() / "cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(cmdline_in)), {});
    const std::string nul(1, '\0');
    const std::string workdir_arg = absl::StrCat(nul, workdir, nul);
    if (!absl::StrContains(cmdline, "mesa-train") || !absl::StrContains(cmdline, workdir_arg)) {
      continue;
    }
    std::ifstream environ_in(entry.path() / "environ", std::ios::binary);
    std::string env_block((std::istreambuf_iterator<char>(environ_in)), {});
    for (absl::string_view var : absl::StrSplit(env_block, '\0')) {
      if (var == rank_var) return pid;
    }
  }
  return absl::NotFoundError(absl::StrCat("no mesa-train rank ", rank, " in ", workdir));
}

absl::StatusOr<std::unique_ptr<cli::JobClient>> Cluster::ClientAs(const std::string& user) {
  return cli::JobClient::Connect(address_, absl::Seconds(10),
                                 {.ca = pki_ + "/ca.pem", .token = UserToken(user)});
}

absl::StatusOr<mesa::v1::Job> Cluster::Submit(const mesa::v1::JobSpec& spec) {
  return client_->Submit(spec,
                         absl::StrCat("e2e-", spec.name(), "-", absl::ToUnixNanos(absl::Now())));
}

absl::StatusOr<mesa::v1::Job> Cluster::WaitFor(
    const std::string& job_id, const std::function<bool(const mesa::v1::Job&)>& done,
    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  mesa::v1::Job last;
  absl::Status last_error;
  while (absl::Now() < deadline) {
    auto job = client_->Get(job_id);
    if (job.ok()) {
      last = *job;
      if (done(*job)) return job;
    } else if (!Transient(job.status())) {
      return job.status();
    } else {
      last_error = job.status();
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "job ", job_id, " did not reach the expected state within ", absl::FormatDuration(timeout),
      "; last state ", mesa::v1::JobState_Name(last.state()), ", step ", last.progress().step(),
      ", failure: ", last.failure_reason(),
      last_error.ok() ? "" : ", last error: ", last_error.ok() ? "" : last_error.ToString()));
}

absl::StatusOr<mesa::v1::Job> Cluster::WaitForEnd(const std::string& job_id,
                                                  absl::Duration timeout) {
  return WaitFor(
      job_id, [](const mesa::v1::Job& job) { return cli::IsTerminal(job.state()); }, timeout);
}

absl::StatusOr<std::vector<mesa::v1::JobEvent>> Cluster::Events(const std::string& job_id) {
  auto job = client_->Get(job_id);
  if (!job.ok()) return job.status();
  const int64_t last = job->last_sequence();
  std::vector<mesa::v1::JobEvent> events;
  // Watch replays history and then follows; stop once the latest known event has arrived.
  absl::Status status = client_->Watch(job_id, 0, [&](const mesa::v1::JobEvent& event) {
    events.push_back(event);
    return event.sequence() < last;
  });
  if (!status.ok()) return status;
  return events;
}

absl::StatusOr<std::vector<mesa::v1::LogLine>> Cluster::Logs(const std::string& job_id) {
  std::vector<mesa::v1::LogLine> lines;
  absl::Status status =
      client_->Logs(job_id, 0, /*follow=*/false, [&](const mesa::v1::LogLine& line) {
        lines.push_back(line);
        return true;
      });
  if (!status.ok()) return status;
  return lines;
}

absl::Status WriteByteShard(const std::string& path, const std::vector<std::string>& documents) {
  std::vector<uint16_t> tokens;
  for (const std::string& document : documents) {
    tokens.push_back(256);  // BOS
    for (unsigned char c : document) tokens.push_back(c);
  }
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size());
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header.data()), header.size() * sizeof(int32_t));
  out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(uint16_t));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::vector<std::string> SyntheticDocuments(int count, uint64_t seed) {
  // Templated sentences: the grammar is learnable by a tiny model in a few dozen steps, the
  // choice of words keeps the loss well above zero.
  static const char* kSubjects[] = {"the cat",   "a dog",       "the bird",
                                    "my friend", "the teacher", "a child"};
  static const char* kVerbs[] = {"sees", "likes", "finds", "draws", "follows", "calls"};
  static const char* kObjects[] = {"the ball",  "a tree",    "the house",
                                   "a red car", "the river", "an apple"};
  std::mt19937_64 rng(seed);
  std::vector<std::string> documents;
  for (int d = 0; d < count; ++d) {
    std::string text;
    const int sentences = 4 + static_cast<int>(rng() % 5);
    for (int s = 0; s < sentences; ++s) {
      absl::StrAppend(&text, kSubjects[rng() % 6], " ", kVerbs[rng() % 6], " ", kObjects[rng() % 6],
                      ". ");
    }
    documents.push_back(std::move(text));
  }
  return documents;
}

// Tiny corpus shared by the tests of this binary (written once).
const Corpus& TheCorpus() {
  static const Corpus* corpus = [] {
    auto* c = new Corpus();
    const std::string dir = testing::NewTempDir("corpus-");
    c->train = dir + "/train_000.bin";
    c->val = dir + "/val_000.bin";
    for (auto [path, status] :
         {std::pair{c->train, WriteByteShard(c->train, SyntheticDocuments(400, 1))},
          std::pair{c->val, WriteByteShard(c->val, SyntheticDocuments(40, 2))}}) {
      if (!status.ok()) {
        std::fprintf(stderr, "cannot write %s: %s\n", path.c_str(), status.ToString().c_str());
        std::abort();
      }
    }
    return c;
  }();
  return *corpus;
}

mesa::v1::JobSpec TinyTrain(const std::string& name, int64_t steps, int64_t checkpoint_interval) {
  const Corpus& corpus = TheCorpus();
  mesa::v1::JobSpec spec;
  spec.set_name(name);
  spec.set_type(mesa::v1::JOB_TYPE_TRAIN);
  spec.set_max_retries(2);
  spec.mutable_resources()->set_gpus(0);
  spec.mutable_resources()->set_cpu_threads(1);
  auto* model = spec.mutable_model();
  model->set_vocab_size(257);
  model->set_d_model(32);
  model->set_n_layers(1);
  model->set_n_heads(2);
  model->set_head_dim(16);
  model->set_mixer("mesa");
  model->set_cg_steps(4);
  auto* data = spec.mutable_data();
  data->set_train_path(corpus.train);
  data->set_val_path(corpus.val);
  data->set_tokenizer("byte");
  data->set_seq_len(64);
  data->set_batch_size(4);
  auto* optimizer = spec.mutable_optimizer();
  optimizer->set_lr(3e-3f);
  optimizer->set_warmup_steps(5);
  auto* training = spec.mutable_training();
  training->set_steps(steps);
  training->set_seed(7);
  training->set_device("cpu");
  training->set_log_interval(1);
  training->set_eval_batches(4);
  training->set_eval_interval(1000000);  // No evaluation during training; the final one runs.
  spec.mutable_checkpoint()->set_interval_steps(checkpoint_interval);
  spec.mutable_checkpoint()->set_keep_last(3);
  return spec;
}

mesa::v1::JobSpec TinyEval(const std::string& name, const std::string& checkpoint) {
  mesa::v1::JobSpec spec = TinyTrain(name, 0, 0);
  spec.set_type(mesa::v1::JOB_TYPE_EVAL);
  spec.clear_optimizer();
  spec.clear_checkpoint();
  spec.mutable_training()->set_steps(0);
  spec.mutable_eval()->set_checkpoint(checkpoint);
  spec.mutable_eval()->set_max_batches(4);
  return spec;
}

mesa::v1::JobSpec TinyGenerate(const std::string& name, const std::string& checkpoint,
                               const std::vector<std::string>& prompts) {
  mesa::v1::JobSpec spec;
  spec.set_name(name);
  spec.set_type(mesa::v1::JOB_TYPE_GENERATE);
  spec.mutable_resources()->set_gpus(0);
  spec.mutable_resources()->set_cpu_threads(1);
  spec.mutable_training()->set_device("cpu");
  auto* g = spec.mutable_generate();
  g->set_checkpoint(checkpoint);
  for (const std::string& p : prompts) g->add_prompts(p);
  g->set_max_new_tokens(8);
  g->set_temperature(0);
  return spec;
}

}  // namespace mesa::e2e
