// Certificate rotation without restart (docs/security.md "Rotating keys"): the real
// mesa-coordinator and mesa-worker read their certificate files again every
// --tls_reload_interval, so files renewed in place (as cert-manager rewrites a Secret) apply to
// the next connection. Certificates come from scripts/make_dev_ca.sh, made in the test: two CAs,
// "old" and "new", each issuing a server certificate and a worker certificate for node-a.
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "security/tls.h"
#include "tests/coordinator_harness.h"
#include "tests/dev_ca.h"
#include "tests/process_harness.h"

namespace mesa::testing {
namespace {

namespace fs = std::filesystem;

bool Eventually(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(200));
  }
  return done();
}

class RotationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    old_ = new std::string(NewTempDir("old_pki"));
    new_ = new std::string(NewTempDir("new_pki"));
    for (const std::string* dir : {old_, new_}) {
      absl::Status made = MakeDevCa(*dir, {"--workers", "node-a"});
      ASSERT_TRUE(made.ok()) << made;
    }
  }
  static void TearDownTestSuite() {
    delete old_;
    delete new_;
  }

  void SetUp() override {
    dir_ = NewTempDir("rotation_test");
    live_ = dir_ + "/live";  // the files the processes are started with, rewritten in place
    fs::create_directories(live_);
  }

  static std::string Old(const std::string& name) { return *old_ + "/" + name; }
  static std::string New(const std::string& name) { return *new_ + "/" + name; }
  std::string Live(const std::string& name) const { return live_ + "/" + name; }

  // Replaces live/`to` with `from` atomically (a copy, then a rename over the old file).
  void Install(const std::string& from, const std::string& to) {
    const std::string tmp = Live(to + ".tmp");
    fs::copy_file(from, tmp, fs::copy_options::overwrite_existing);
    fs::rename(tmp, Live(to));
  }
  // The coordinator's server certificate and client CA, and the worker's certificate and CA,
  // all from the PKI in `pki` (a key before its certificate).
  void InstallPki(const std::string& pki) {
    for (const char* name : {"server.key", "server.pem", "node-a.key", "node-a.pem", "ca.pem"}) {
      Install(pki + "/" + name, name);
    }
  }

  // Starts mesa-coordinator on the live files (which hold `pki`'s), reading them every second.
  void StartCoordinator(const std::string& pki, const std::vector<std::string>& more = {}) {
    std::vector<std::string> flags = {"--tls_cert=" + Live("server.pem"),
                                      "--tls_key=" + Live("server.key"),
                                      "--client_ca=" + Live("ca.pem"), "--tls_reload_interval=1s"};
    flags.insert(flags.end(), more.begin(), more.end());
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        security::ChannelCredentialsFromFiles(
            {.ca = pki + "/ca.pem", .cert = pki + "/worker.pem", .key = pki + "/worker.key"});
    ASSERT_TRUE(credentials.ok()) << credentials.status();
    auto started = CoordinatorProcess::Start(dir_ + "/mesa.db", flags, *credentials);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(*started);
  }

  // A channel with a connection of its own (gRPC would otherwise share one between channels).
  std::shared_ptr<grpc::Channel> Dial(const security::ClientTlsFiles& files,
                                      const std::string& server_name = "") {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        security::ChannelCredentialsFromFiles(files);
    EXPECT_TRUE(credentials.ok()) << credentials.status();
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
    return grpc::CreateCustomChannel(coordinator_->address(), *credentials, args);
  }
  // A job API call over a new connection trusting `ca` and presenting `pki`'s node-a certificate:
  // OK once the TLS handshake succeeds, UNAVAILABLE when it fails.
  absl::Status Connect(const std::string& ca, const std::string& pki) {
    auto stub = mesa::v1::JobService::NewStub(
        Dial({.ca = ca, .cert = pki + "/node-a.pem", .key = pki + "/node-a.key"}));
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    mesa::v1::ListJobsResponse response;
    grpc::Status s = stub->ListJobs(&context, {}, &response);
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  }

  bool CoordinatorLogged(const std::string& text) {
    return Eventually([&] { return absl::StrContains(coordinator_->process().Stderr(), text); });
  }

  static std::string* old_;
  static std::string* new_;
  std::string dir_;
  std::string live_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
};

std::string* RotationTest::old_ = nullptr;
std::string* RotationTest::new_ = nullptr;

TEST_F(RotationTest, CoordinatorServesTheRenewedCertificateAndTrustsOnlyTheNewClientCa) {
  InstallPki(*old_);
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(*old_));
  ASSERT_TRUE(Connect(Old("ca.pem"), *old_).ok());
  EXPECT_EQ(Connect(New("ca.pem"), *new_).code(), absl::StatusCode::kUnavailable);
  // A worker connected before the rotation; its connection stays up.
  FakeWorker before(
      Dial({.ca = Old("ca.pem"), .cert = Old("worker.pem"), .key = Old("worker.key")}),
      "mesa-worker", 1);
  ASSERT_TRUE(before.Register().ok());

  InstallPki(*new_);  // the server certificate, its key and --client_ca, rewritten in place

  // New connections get the new server certificate, with a client certificate of the new CA.
  absl::Status renewed;
  EXPECT_TRUE(Eventually([&] { return (renewed = Connect(New("ca.pem"), *new_)).ok(); }))
      << renewed;
  FakeWorker node_a(
      Dial({.ca = New("ca.pem"), .cert = New("node-a.pem"), .key = New("node-a.key")}), "node-a",
      1);
  EXPECT_TRUE(node_a.Register().ok());
  // A client trusting only the old CA no longer accepts the server.
  absl::Status old_server = Connect(Old("ca.pem"), *new_);
  EXPECT_EQ(old_server.code(), absl::StatusCode::kUnavailable) << old_server;
  // A client certificate of the replaced CA is refused at the handshake.
  absl::Status old_client = Connect(New("ca.pem"), *old_);
  EXPECT_EQ(old_client.code(), absl::StatusCode::kUnavailable) << old_client;
  // What was connected before keeps its connection (TLS checks certificates at the handshake
  // only): a CA change reaches a client when it reconnects.
  EXPECT_TRUE(before.Heartbeat(absl::ZeroDuration()).ok());
}

TEST_F(RotationTest, WorkerUsesItsRenewedCertificateAndCaOnItsNextConnection) {
  InstallPki(*old_);
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(*old_));
  const std::string address = coordinator_->address();
  auto worker = Process::Start(
      RunfilePath("worker/mesa-worker"),
      {"--coordinator=" + address, "--worker_id=node-a", "--ca=" + Live("ca.pem"),
       "--tls_cert=" + Live("node-a.pem"), "--tls_key=" + Live("node-a.key"),
       "--tls_reload_interval=1s", "--gpus=none", "--cpu_slots=1", "--memory_bytes=1073741824",
       "--trainer=/bin/true", "--metrics_listen=127.0.0.1:0", "--workdir=" + dir_ + "/worker"});
  ASSERT_TRUE(worker.ok()) << worker.status();
  ASSERT_TRUE(
      CoordinatorLogged("method=RegisterWorker caller=\"node-a\" target=\"node-a\" result=OK"));

  // The whole cluster moves to the new CA: the worker's files are renewed in place and the
  // coordinator comes back on the same address with the new server certificate and client CA.
  InstallPki(*new_);
  absl::SleepFor(absl::Seconds(3));  // past the worker's reload interval
  coordinator_.reset();
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(*new_, {"--listen=" + address}));
  // The worker, not restarted, reconnects with the new certificate, trusting the new CA.
  EXPECT_TRUE(
      CoordinatorLogged("method=RegisterWorker caller=\"node-a\" target=\"node-a\" result=OK"));
  EXPECT_FALSE(absl::StrContains(coordinator_->process().Stderr(), "result=UNAUTHENTICATED"));
}

TEST_F(RotationTest, ClientsStillCheckTheServerName) {
  InstallPki(*old_);
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(*old_));
  const security::ClientTlsFiles files = {
      .ca = Old("ca.pem"), .cert = Old("node-a.pem"), .key = Old("node-a.key")};
  EXPECT_TRUE(FakeWorker(Dial(files, "localhost"), "node-a", 1).Register().ok());
  // The certificate names localhost, 127.0.0.1 and ::1, not this: the handshake fails.
  EXPECT_EQ(FakeWorker(Dial(files, "other.example"), "node-a", 1).Register().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace mesa::testing
