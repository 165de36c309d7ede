// Authentication, end to end: the real mesa-coordinator with TLS (certificates made by
// scripts/make_dev_ca.sh in the test), bearer tokens on the job API and client certificates on
// the worker API; mesactl and mesa-worker against it.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/client.h"
#include "gtest/gtest.h"
#include "security/tls.h"
#include "tests/coordinator_harness.h"
#include "tests/dev_ca.h"
#include "tests/process_harness.h"

namespace mesa::testing {
namespace {

constexpr char kAliceToken[] = "alice-7f3c9a1e5b2d4c6a";
constexpr char kRootToken[] = "root-0d8e2f4a6c1b3e5d7";
constexpr char kBobToken[] = "bob-5e6f7a8b9c0d1e2f3";
constexpr char kVeraToken[] = "vera-a1b2c3d4e5f60718";

std::shared_ptr<grpc::ChannelCredentials> Credentials(const security::ClientTlsFiles& files) {
  auto c = security::ChannelCredentialsFromFiles(files);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : nullptr;
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pki_ = new std::string(NewTempDir("pki"));
    rogue_ = new std::string(NewTempDir("rogue_pki"));
    for (const std::string* dir : {pki_, rogue_}) {  // the rogue CA issues the same names
      absl::Status made = MakeDevCa(
          *dir, {"--workers", "node-a", "w1", "w2", "mesa-worker-x7k2p", "mesa-worker-q9z4m"});
      ASSERT_TRUE(made.ok()) << made;
    }
  }
  static void TearDownTestSuite() {
    delete pki_;
    delete rogue_;
  }

  void SetUp() override {
    dir_ = NewTempDir("security_test");
    tokens_ = dir_ + "/tokens.yaml";
    std::ofstream(tokens_) << "users:\n  - {name: alice, token: " << kAliceToken
                           << ", role: user}\n  - {name: root, token: " << kRootToken
                           << ", role: admin}\n  - {name: bob, token: " << kBobToken
                           << ", role: user}\n  - {name: vera, token: " << kVeraToken
                           << ", role: viewer}\n";
    StartCoordinator();
  }

  // (Re)starts the coordinator on dir_'s store.
  void StartCoordinator() {
    coordinator_.reset();
    auto c = CoordinatorProcess::Start(
        dir_ + "/mesa.db",
        {"--tls_cert=" + Pki("server.pem"), "--tls_key=" + Pki("server.key"),
         "--client_ca=" + Pki("ca.pem"), "--tokens_file=" + tokens_},
        Credentials(WorkerFiles()));
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
  }

  static std::string Pki(const std::string& name) { return *pki_ + "/" + name; }
  static std::string Rogue(const std::string& name) { return *rogue_ + "/" + name; }
  static security::ClientTlsFiles WorkerFiles() {
    return {.ca = Pki("ca.pem"), .cert = Pki("worker.pem"), .key = Pki("worker.key")};
  }

  // A mesactl-like client over TLS (trusting `ca`) with `token`.
  std::unique_ptr<cli::JobClient> Client(const std::string& token,
                                         const std::string& ca = Pki("ca.pem")) {
    auto client = cli::JobClient::Connect(coordinator_->address(), absl::Seconds(5),
                                          {.ca = ca, .token = token});
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  std::shared_ptr<grpc::Channel> Channel(const security::ClientTlsFiles& files) {
    return grpc::CreateChannel(coordinator_->address(), Credentials(files));
  }

  // Waits (bounded) for a line of the coordinator's stderr containing `text`.
  bool CoordinatorLogged(const std::string& text, absl::Duration timeout = absl::Seconds(20)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (absl::StrContains(coordinator_->process().Stderr(), text)) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  RunResult Mesactl(const std::vector<std::string>& args, Process::Options options = {}) {
    std::vector<std::string> full = {"--server=" + coordinator_->address(), "--timeout=10s"};
    full.insert(full.end(), args.begin(), args.end());
    absl::StatusOr<RunResult> r =
        RunProcess(RunfilePath("cli/mesactl"), full, absl::Seconds(30), options);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{-1, "", r.status().ToString()};
  }

  static std::string* pki_;
  static std::string* rogue_;
  std::string dir_;
  std::string tokens_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
};

std::string* SecurityTest::pki_ = nullptr;
std::string* SecurityTest::rogue_ = nullptr;

TEST_F(SecurityTest, AnonymousJobCallsAreUnauthenticated) {
  auto client = Client("");
  EXPECT_EQ(client->List({}, 0).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(client->Get("job-1").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(client->Submit(TinyTrainSpec("anon"), "anon-1").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(client->Cancel("job-1", "").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(CoordinatorLogged(
      "method=SubmitJob caller=\"(no valid token)\" target=\"\" result=UNAUTHENTICATED"));
  EXPECT_EQ(client->Explain("job-1").status().code(), absl::StatusCode::kUnauthenticated);
  absl::Status watch = client->Watch("job-1", 0, [](const mesa::v1::JobEvent&) { return true; });
  EXPECT_EQ(watch.code(), absl::StatusCode::kUnauthenticated) << watch;
  absl::Status logs =
      client->Logs("job-1", 0, false, [](const mesa::v1::LogLine&) { return true; });
  EXPECT_EQ(logs.code(), absl::StatusCode::kUnauthenticated) << logs;
  // A worker's client certificate is no substitute for a token on the job API.
  auto job_stub = mesa::v1::JobService::NewStub(coordinator_->channel());
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(5));
  mesa::v1::ListJobsResponse response;
  EXPECT_EQ(job_stub->ListJobs(&context, {}, &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(SecurityTest, WrongTokenIsUnauthenticated) {
  for (const std::string& token :
       {std::string("alice-7f3c9a1e5b2d4c6b"), std::string("x"), std::string(kAliceToken) + "0"}) {
    absl::StatusOr<std::vector<mesa::v1::Job>> jobs = Client(token)->List({}, 0);
    EXPECT_EQ(jobs.status().code(), absl::StatusCode::kUnauthenticated) << token;
    EXPECT_FALSE(absl::StrContains(jobs.status().message(), token)) << jobs.status();
  }
  // Not the Bearer scheme.
  auto stub = mesa::v1::JobService::NewStub(Channel({.ca = Pki("ca.pem")}));
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(5));
  context.AddMetadata("authorization", absl::StrCat("Basic ", kAliceToken));
  mesa::v1::ListJobsResponse response;
  EXPECT_EQ(stub->ListJobs(&context, {}, &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(SecurityTest, ValidTokenWorksAndTheAuditLogNamesTheUserNotTheToken) {
  auto alice = Client(kAliceToken);
  absl::StatusOr<mesa::v1::Job> job = alice->Submit(TinyTrainSpec("mine"), "alice-1");
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::vector<mesa::v1::Job>> jobs = Client(kRootToken)->List({}, 0);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 1u);
  ASSERT_TRUE(alice->Cancel(job->id(), "done").ok());
  EXPECT_TRUE(CoordinatorLogged(
      absl::StrCat("method=SubmitJob caller=\"alice\" target=\"", job->id(), "\" result=OK")));
  EXPECT_TRUE(CoordinatorLogged(
      absl::StrCat("method=CancelJob caller=\"alice\" target=\"", job->id(), "\" result=OK")));
  const std::string log = coordinator_->process().Stderr();
  EXPECT_FALSE(absl::StrContains(log, kAliceToken));
  EXPECT_FALSE(absl::StrContains(log, kRootToken));
}

TEST_F(SecurityTest, UsersSeeOnlyTheirJobsViewersReadAllAdminsDoAll) {
  auto alice = Client(kAliceToken);
  auto bob = Client(kBobToken);
  auto vera = Client(kVeraToken);
  auto root = Client(kRootToken);
  absl::StatusOr<mesa::v1::Job> a = alice->Submit(TinyTrainSpec("a"), "same-key");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->owner(), "alice");
  absl::StatusOr<mesa::v1::Job> b = bob->Submit(TinyTrainSpec("b"), "bob-1");
  ASSERT_TRUE(b.ok()) << b.status();

  // Alice: her job yes, Bob's no.
  ASSERT_TRUE(alice->Get(a->id()).ok());
  constexpr auto kDenied = absl::StatusCode::kPermissionDenied;
  EXPECT_EQ(alice->Get(b->id()).status().code(), kDenied);
  EXPECT_EQ(alice->Cancel(b->id(), "mine now").status().code(), kDenied);
  EXPECT_EQ(alice->Explain(b->id()).status().code(), kDenied);
  EXPECT_EQ(alice->Watch(b->id(), 0, [](const mesa::v1::JobEvent&) { return true; }).code(),
            kDenied);
  EXPECT_EQ(alice->Logs(b->id(), 0, false, [](const mesa::v1::LogLine&) { return true; }).code(),
            kDenied);
  EXPECT_EQ(alice->Get("job-999").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<mesa::v1::Job>> mine = alice->List({}, 0);
  ASSERT_TRUE(mine.ok()) << mine.status();
  ASSERT_EQ(mine->size(), 1u);
  EXPECT_EQ((*mine)[0].id(), a->id());
  // Another user's idempotency key neither returns nor names her job.
  absl::StatusOr<mesa::v1::Job> reuse = bob->Submit(TinyTrainSpec("a"), "same-key");
  EXPECT_EQ(reuse.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(absl::StrContains(reuse.status().message(), a->id())) << reuse.status();

  // Vera reads everything and changes nothing.
  absl::StatusOr<std::vector<mesa::v1::Job>> all = vera->List({}, 0);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 2u);
  EXPECT_TRUE(vera->Get(b->id()).ok());
  EXPECT_TRUE(vera->Explain(b->id()).ok());
  EXPECT_EQ(vera->Submit(TinyTrainSpec("v"), "vera-1").status().code(), kDenied);
  EXPECT_EQ(vera->Cancel(a->id(), "").status().code(), kDenied);

  // Root does everything.
  EXPECT_TRUE(root->Cancel(b->id(), "admin").ok());
  EXPECT_TRUE(alice->Cancel(a->id(), "").ok());
  EXPECT_TRUE(CoordinatorLogged(absl::StrCat("method=CancelJob caller=\"alice\" target=\"", b->id(),
                                             "\" result=PERMISSION_DENIED")));
  EXPECT_TRUE(CoordinatorLogged(
      absl::StrCat("method=CancelJob caller=\"root\" target=\"", b->id(), "\" result=OK")));
  EXPECT_TRUE(
      CoordinatorLogged("method=SubmitJob caller=\"vera\" target=\"\" "
                        "result=PERMISSION_DENIED"));
}

TEST_F(SecurityTest, PlaintextClientFailsAgainstTlsServer) {
  auto client = cli::JobClient::Connect(coordinator_->address(), absl::Seconds(3));
  client = std::make_unique<cli::JobClient>(
      grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials()),
      absl::Seconds(3), kAliceToken);
  EXPECT_EQ(client->List({}, 0).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, ClientTrustingAnotherCaFails) {
  EXPECT_EQ(Client(kAliceToken, Rogue("ca.pem"))->List({}, 0).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, WorkerWithoutClientCertificateCannotRegisterOrReport) {
  FakeWorker worker(Channel({.ca = Pki("ca.pem")}), "no-cert", 2);
  EXPECT_EQ(worker.Register().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(worker.Heartbeat(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kUnauthenticated);
  mesa::v1::UpdateAttemptRequest update;
  update.set_worker_id("no-cert");
  update.set_job_id("job-1");
  EXPECT_EQ(worker.Update(update).status().code(), absl::StatusCode::kUnauthenticated);
  auto stub = mesa::v1::WorkerService::NewStub(Channel({.ca = Pki("ca.pem")}));
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(5));
    grpc::Status s;
    if (i == 0) {
      mesa::v1::PutRendezvousResponse r;
      s = stub->PutRendezvous(&context, {}, &r);
    } else {
      mesa::v1::GetRendezvousResponse r;
      s = stub->GetRendezvous(&context, {}, &r);
    }
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << i;
  }
  // A user's token does not make a worker either.
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(5));
  context.AddMetadata("authorization", absl::StrCat("Bearer ", kRootToken));
  mesa::v1::RegisterWorkerRequest request;
  request.set_worker_id("token-only");
  request.mutable_resources()->set_cpu_slots(1);
  mesa::v1::RegisterWorkerResponse response;
  EXPECT_EQ(stub->RegisterWorker(&context, request, &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(CoordinatorLogged("method=RegisterWorker caller=\"(no client certificate)\""));
}

TEST_F(SecurityTest, WorkerWithCertificateOfAnotherCaCannotConnect) {
  FakeWorker worker(
      Channel({.ca = Pki("ca.pem"), .cert = Rogue("worker.pem"), .key = Rogue("worker.key")}),
      "rogue", 2);
  EXPECT_EQ(worker.Register().code(), absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, WorkerWithValidCertificateRegistersAndGetsAJob) {
  FakeWorker worker(
      Channel({.ca = Pki("ca.pem"), .cert = Pki("node-a.pem"), .key = Pki("node-a.key")}), "node-a",
      2);
  ASSERT_TRUE(worker.Register().ok());
  EXPECT_TRUE(
      CoordinatorLogged("method=RegisterWorker caller=\"node-a\" target=\"node-a\" result=OK"));
  absl::StatusOr<mesa::v1::Job> job =
      Client(kAliceToken)->Submit(TinyTrainSpec("assigned"), "alice-2");
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<mesa::v1::Assignment> a = worker.WaitForAssignment(absl::Seconds(20));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->job_id(), job->id());
}

// The audit log in the store: every mutating call, refused ones too, readable by admins only
// (ListAuditRecords, `mesactl audit`), and still there after a restart.
TEST_F(SecurityTest, AuditLogIsStoredReadByAdminsOnlyAndSurvivesARestart) {
  FakeWorker worker(
      Channel({.ca = Pki("ca.pem"), .cert = Pki("node-a.pem"), .key = Pki("node-a.key")}), "node-a",
      2);
  ASSERT_TRUE(worker.Register().ok());
  absl::StatusOr<mesa::v1::Job> job = Client(kAliceToken)->Submit(TinyTrainSpec("audited"), "");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(Client(kBobToken)->Cancel(job->id(), "").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Client("")->Submit(TinyTrainSpec("anon"), "").status().code(),
            absl::StatusCode::kUnauthenticated);
  ASSERT_TRUE(Client(kAliceToken)->Cancel(job->id(), "done").ok());
  for (const char* token : {kAliceToken, kVeraToken}) {
    EXPECT_EQ(Client(token)->Audit("", "", 0).status().code(), absl::StatusCode::kPermissionDenied);
  }
  auto records = Client(kRootToken)->Audit("", "", 0);
  ASSERT_TRUE(records.ok()) << records.status();
  std::vector<std::string> seen;
  for (const mesa::v1::AuditRecord& r : *records) {
    seen.push_back(absl::StrCat(r.method(), " ", r.caller(), " ", r.target(), " ", r.result()));
    EXPECT_GT(r.time().seconds(), 0);
  }
  const std::vector<std::string> want = {
      "RegisterWorker node-a node-a OK",
      absl::StrCat("SubmitJob alice ", job->id(), " OK"),
      absl::StrCat("CancelJob bob ", job->id(), " PERMISSION_DENIED"),
      "SubmitJob (no valid token)  UNAUTHENTICATED",
      absl::StrCat("CancelJob alice ", job->id(), " OK"),
  };
  EXPECT_EQ(seen, want);
  EXPECT_TRUE(absl::StrContains((*records)[2].message(), "another user"))
      << (*records)[2].message();
  // The store keeps them across a restart; mesactl reads them, filtered.
  StartCoordinator();
  Process::Options env;
  env.env = {"MESA_CA=" + Pki("ca.pem"), std::string("MESA_TOKEN=") + kRootToken};
  RunResult audit = Mesactl({"audit", "--target=" + job->id()}, env);
  EXPECT_EQ(audit.exit_status, 0) << audit.out << audit.err;
  EXPECT_TRUE(absl::StrContains(audit.out, absl::StrCat("SubmitJob  alice  ", job->id(), "  OK")))
      << audit.out;
  EXPECT_TRUE(absl::StrContains(audit.out, "CancelJob  bob")) << audit.out;
  EXPECT_FALSE(absl::StrContains(audit.out, "RegisterWorker")) << audit.out;
  RunResult json = Mesactl({"audit", "--json", "--caller=alice", "--limit=1"}, env);
  EXPECT_EQ(json.exit_status, 0) << json.err;
  EXPECT_TRUE(absl::StrContains(json.out, "\"method\": \"SubmitJob\"")) << json.out;
  EXPECT_FALSE(absl::StrContains(json.out, "CancelJob")) << json.out;
  env.env[1] = std::string("MESA_TOKEN=") + kAliceToken;
  RunResult denied = Mesactl({"audit"}, env);
  EXPECT_EQ(denied.exit_status, 1);
  EXPECT_TRUE(absl::StrContains(denied.err, "PERMISSION_DENIED")) << denied.err;
}

TEST_F(SecurityTest, MesactlWithCaAndTokenWorks) {
  RunResult flags = Mesactl({"--ca=" + Pki("ca.pem"), "--token=" + std::string(kAliceToken),
                             "submit", RunfilePath("examples/train_tiny_cpu.yaml")});
  EXPECT_EQ(flags.exit_status, 0) << flags.out << flags.err;
  Process::Options env;
  env.env = {"MESA_CA=" + Pki("ca.pem"), std::string("MESA_TOKEN=") + kAliceToken};
  RunResult list = Mesactl({"list"}, env);
  EXPECT_EQ(list.exit_status, 0) << list.out << list.err;
  EXPECT_TRUE(absl::StrContains(list.out, "tiny")) << list.out;

  RunResult no_token = Mesactl({"--ca=" + Pki("ca.pem"), "list"});
  EXPECT_EQ(no_token.exit_status, 1);
  EXPECT_TRUE(absl::StrContains(no_token.err, "UNAUTHENTICATED")) << no_token.err;
  EXPECT_TRUE(absl::StrContains(no_token.err, "MESA_TOKEN")) << no_token.err;
  RunResult no_ca = Mesactl({"--token=" + std::string(kAliceToken), "list"});
  EXPECT_EQ(no_ca.exit_status, 1) << no_ca.out;
  EXPECT_TRUE(absl::StrContains(no_ca.err, "MESA_CA")) << no_ca.err;
  RunResult wrong_ca =
      Mesactl({"--ca=" + Rogue("ca.pem"), "--token=" + std::string(kAliceToken), "list"});
  EXPECT_EQ(wrong_ca.exit_status, 1) << wrong_ca.out;
  EXPECT_TRUE(absl::StrContains(wrong_ca.err, "handshake failed")) << wrong_ca.err;
  absl::StatusOr<RunResult> clear =
      RunProcess(RunfilePath("cli/mesactl"), {"--server=192.0.2.1:50051", "list"},
                 absl::Seconds(30), {.env = {std::string("MESA_TOKEN=") + kAliceToken}});
  ASSERT_TRUE(clear.ok()) << clear.status();
  EXPECT_EQ(clear->exit_status, 2);
  EXPECT_TRUE(absl::StrContains(clear->err, "refusing to send a token in plaintext")) << clear->err;
  RunResult missing_ca = Mesactl({"--ca=" + dir_ + "/missing.pem", "list"});
  EXPECT_EQ(missing_ca.exit_status, 2);
  EXPECT_TRUE(absl::StrContains(missing_ca.err, "--ca")) << missing_ca.err;
}

// Regression: mesactl reads its server, CA and token from its configuration file's context (no
// flag, no variable); flags and variables still win over it.
TEST_F(SecurityTest, MesactlReadsServerCaAndTokenFromItsContext) {
  const std::string config = dir_ + "/mesa-config.yaml";
  std::ofstream(dir_ + "/alice.token") << kAliceToken << "\n";
  std::ofstream(config) << "current_context: cluster\ncontexts:\n"
                        << "  - {name: cluster, server: \"" << coordinator_->address()
                        << "\", ca: " << Pki("ca.pem") << ", token_file: alice.token}\n"
                        << "  - {name: anonymous, server: \"" << coordinator_->address()
                        << "\", ca: " << Pki("ca.pem") << "}\n";
  auto run = [&](std::vector<std::string> args, std::vector<std::string> env = {}) {
    env.push_back("MESA_CONFIG=" + config);
    absl::StatusOr<RunResult> r =
        RunProcess(RunfilePath("cli/mesactl"), args, absl::Seconds(30), {.env = env});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{-1, "", r.status().ToString()};
  };
  RunResult submit = run({"submit", RunfilePath("examples/train_tiny_cpu.yaml")});
  EXPECT_EQ(submit.exit_status, 0) << submit.out << submit.err;
  RunResult list = run({"list"});
  EXPECT_EQ(list.exit_status, 0) << list.out << list.err;
  EXPECT_TRUE(absl::StrContains(list.out, "tiny")) << list.out;
  RunResult anonymous = run({"--context=anonymous", "list"});
  EXPECT_EQ(anonymous.exit_status, 1);
  EXPECT_TRUE(absl::StrContains(anonymous.err, "UNAUTHENTICATED")) << anonymous.err;
  RunResult by_variable = run({"list"}, {"MESA_CONTEXT=anonymous"});
  EXPECT_TRUE(absl::StrContains(by_variable.err, "UNAUTHENTICATED")) << by_variable.err;
  // The variable beats the context, the flag beats both.
  RunResult env_token = run({"list"}, {std::string("MESA_TOKEN=") + kBobToken});
  EXPECT_EQ(env_token.exit_status, 0) << env_token.err;
  EXPECT_FALSE(absl::StrContains(env_token.out, "tiny")) << env_token.out;  // bob's jobs: none
  RunResult flag_token = run({"--token=" + std::string(kAliceToken), "list"},
                             {std::string("MESA_TOKEN=") + kBobToken});
  EXPECT_TRUE(absl::StrContains(flag_token.out, "tiny")) << flag_token.out;
  RunResult unknown = run({"--context=staging", "list"});
  EXPECT_EQ(unknown.exit_status, 2);
  EXPECT_TRUE(absl::StrContains(unknown.err, "no context \"staging\"")) << unknown.err;
}

// The real mesa-worker: registers with --tls_cert/--tls_key/--ca, and is refused without them.
TEST_F(SecurityTest, RealWorkerRegistersOnlyWithItsCertificate) {
  const std::vector<std::string> common = {"--coordinator=" + coordinator_->address(),
                                           "--gpus=none",
                                           "--cpu_slots=1",
                                           "--memory_bytes=1073741824",
                                           "--trainer=/bin/true",
                                           "--metrics_listen=127.0.0.1:0",
                                           "--workdir=" + dir_ + "/worker"};
  std::vector<std::string> with_cert = common;
  with_cert.insert(with_cert.end(),
                   {"--worker_id=node-a", "--ca=" + Pki("ca.pem"),
                    "--tls_cert=" + Pki("node-a.pem"), "--tls_key=" + Pki("node-a.key")});
  auto good = Process::Start(RunfilePath("worker/mesa-worker"), with_cert);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE(
      CoordinatorLogged("method=RegisterWorker caller=\"node-a\" target=\"node-a\" result=OK"));

  std::vector<std::string> without_cert = common;
  without_cert.insert(without_cert.end(), {"--worker_id=bad-node", "--ca=" + Pki("ca.pem")});
  auto bad = Process::Start(RunfilePath("worker/mesa-worker"), without_cert);
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_TRUE(
      CoordinatorLogged("method=RegisterWorker caller=\"(no client certificate)\" target=\"\" "
                        "result=UNAUTHENTICATED"));
  EXPECT_FALSE(absl::StrContains(coordinator_->process().Stderr(), "target=\"bad-node\""));

  RunResult half = *RunProcess(
      RunfilePath("worker/mesa-worker"),
      {"--coordinator=127.0.0.1:1", "--tls_cert=" + Pki("node-a.pem"), "--trainer=/bin/true"},
      absl::Seconds(20));
  EXPECT_EQ(half.exit_status, 2) << half.err;
}

// Several nodes, as deploy/worker/worker.yaml runs them: each agent's --worker_id is its pod's
// name and its certificate (one per pod, from cert-manager's csi-driver) names that pod. Both
// real agents register and stay live side by side; a shared certificate could serve only one
// (WorkerIdIsBoundToItsCertificate).
TEST_F(SecurityTest, TwoWorkersWithCertificatesOfTheirOwnPodsBothJoin) {
  std::vector<std::unique_ptr<Process>> workers;
  for (const std::string& pod : {"mesa-worker-x7k2p", "mesa-worker-q9z4m"}) {
    auto worker = Process::Start(
        RunfilePath("worker/mesa-worker"),
        {"--coordinator=" + coordinator_->address(), "--gpus=none", "--cpu_slots=1",
         "--memory_bytes=1073741824", "--trainer=/bin/true", "--metrics_listen=127.0.0.1:0",
         "--workdir=" + dir_ + "/" + pod, "--worker_id=" + pod, "--ca=" + Pki("ca.pem"),
         "--tls_cert=" + Pki(pod + ".pem"), "--tls_key=" + Pki(pod + ".key")});
    ASSERT_TRUE(worker.ok()) << worker.status();
    workers.push_back(*std::move(worker));
  }
  for (const std::string& pod : {"mesa-worker-x7k2p", "mesa-worker-q9z4m"}) {
    EXPECT_TRUE(CoordinatorLogged(
        absl::StrCat("method=RegisterWorker caller=\"", pod, "\" target=\"", pod, "\" result=OK")))
        << pod;
  }
  for (const auto& worker : workers) {
    EXPECT_FALSE(absl::StrContains(worker->Stderr(), "does not match")) << worker->Stderr();
  }
}

// With --client_ca a worker acts only under the worker id its certificate names (CN or SAN): a
// valid certificate of "w1" cannot register, heartbeat, report or rendezvous as "w2" (and so
// cannot take w2's lease over), and the refusal names both ids, nothing secret.
TEST_F(SecurityTest, WorkerIdIsBoundToItsCertificate) {
  const security::ClientTlsFiles w1_files = {
      .ca = Pki("ca.pem"), .cert = Pki("w1.pem"), .key = Pki("w1.key")};
  FakeWorker w2(Channel({.ca = Pki("ca.pem"), .cert = Pki("w2.pem"), .key = Pki("w2.key")}), "w2",
                1);
  ASSERT_TRUE(w2.Register().ok());
  FakeWorker impostor(Channel(w1_files), "w2", 2);
  absl::Status registered = impostor.Register();
  EXPECT_EQ(registered.code(), absl::StatusCode::kPermissionDenied) << registered;
  EXPECT_TRUE(absl::StrContains(registered.message(), "worker id \"w2\"")) << registered;
  EXPECT_TRUE(absl::StrContains(registered.message(), "issued to \"w1\"")) << registered;
  EXPECT_FALSE(absl::StrContains(registered.message(), "BEGIN")) << registered;
  EXPECT_EQ(impostor.Heartbeat(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kPermissionDenied);
  mesa::v1::UpdateAttemptRequest update;
  update.set_job_id("job-1");
  EXPECT_EQ(impostor.Update(update).status().code(), absl::StatusCode::kPermissionDenied);
  auto stub = mesa::v1::WorkerService::NewStub(Channel(w1_files));
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(5));
    grpc::Status s;
    if (i == 0) {
      mesa::v1::PutRendezvousRequest put;
      put.set_worker_id("w2");
      mesa::v1::PutRendezvousResponse r;
      s = stub->PutRendezvous(&context, put, &r);
    } else {
      mesa::v1::GetRendezvousRequest get;
      get.set_worker_id("w2");
      mesa::v1::GetRendezvousResponse r;
      s = stub->GetRendezvous(&context, get, &r);
    }
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << i << " " << s.error_message();
  }
  EXPECT_TRUE(CoordinatorLogged(
      "method=RegisterWorker caller=\"w1\" target=\"w2\" result=PERMISSION_DENIED"));
  // w2's lease survived the attempt: it still heartbeats; w1 registers under its own id.
  EXPECT_TRUE(w2.Heartbeat(absl::ZeroDuration()).ok());
  FakeWorker w1(Channel(w1_files), "w1", 2);
  EXPECT_TRUE(w1.Register().ok());

  // The real mesa-worker with w1's certificate and --worker_id=w2 is refused too.
  auto real = Process::Start(
      RunfilePath("worker/mesa-worker"),
      {"--coordinator=" + coordinator_->address(), "--gpus=none", "--cpu_slots=1",
       "--memory_bytes=1073741824", "--trainer=/bin/true", "--metrics_listen=127.0.0.1:0",
       "--workdir=" + dir_ + "/real-w2", "--worker_id=w2", "--ca=" + Pki("ca.pem"),
       "--tls_cert=" + Pki("w1.pem"), "--tls_key=" + Pki("w1.key")});
  ASSERT_TRUE(real.ok()) << real.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline &&
         !absl::StrContains((*real)->Stderr(), "does not match the client certificate")) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(absl::StrContains((*real)->Stderr(), "does not match the client certificate"))
      << (*real)->Stderr();
  EXPECT_FALSE(absl::StrContains((*real)->Stderr(), "PRIVATE KEY")) << (*real)->Stderr();
}

TEST(CoordinatorStartup, RefusesPlaintextOffLoopback) {
  const std::string dir = NewTempDir("startup");
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {"--listen=0.0.0.0:0", "--insecure"},
           {"--listen=0.0.0.0:0"},
       }) {
    std::vector<std::string> args = flags;
    args.insert(args.end(), {"--metrics_listen=", "--db=" + dir + "/mesa.db"});
    absl::StatusOr<RunResult> r = RunProcess(CoordinatorBinary(), args, absl::Seconds(30));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_status, 2) << r->err;
    EXPECT_TRUE(absl::StrContains(r->err, "not a loopback address")) << r->err;
  }
  absl::StatusOr<RunResult> r = RunProcess(
      CoordinatorBinary(),
      {"--listen=127.0.0.1:0", "--metrics_listen=", "--db=" + dir + "/b.db", "--client_ca=x.pem"},
      absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_status, 2) << r->err;
}

}  // namespace
}  // namespace mesa::testing
