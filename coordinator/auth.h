// Who is calling: bearer tokens for the job API (--tokens_file) and client certificates for the
// worker API (--client_ca). See docs/security.md.
#ifndef MESANET_COORDINATOR_AUTH_H_
#define MESANET_COORDINATOR_AUTH_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/quotas.h"
#include "coordinator/token_table.h"
#include "grpcpp/grpcpp.h"

namespace mesa::coordinator {

// Roles (docs/security.md): a user submits jobs and sees, follows and cancels its own; a viewer
// reads every job and changes none; an admin does everything. PERMISSION_DENIED otherwise.
absl::Status CheckMaySubmit(const Principal& who);
// The audit log (ListAuditRecords): admins only.
absl::Status CheckMayReadAudit(const Principal& who);
// Reading a job: Get, Watch, Logs, Explain.
absl::Status CheckMayRead(const Principal& who, const std::string& job_id,
                          const std::string& owner);
absl::Status CheckMayCancel(const Principal& who, const std::string& job_id,
                            const std::string& owner);
// The owner ListJobs is restricted to ("" = every job).
std::string ListFilter(const Principal& who);

// The caller of the worker API, from its verified client certificate.
struct WorkerPeer {
  // For the audit log: the common name, else the first SAN; "anonymous" without a certificate
  // (only where none is required).
  std::string subject;
  // Every worker id the certificate allows: its common name and subject alternative names.
  std::vector<std::string> names;
};

// Checks the calls of both services. Without a token table the job API is open (each caller is
// the anonymous admin); without required client certificates the worker API is.
class Authenticator {
 public:
  Authenticator(std::optional<TokenTable> tokens, bool require_client_certificate)
      : tokens_(std::move(tokens)), require_client_certificate_(require_client_certificate) {}

  // From the call's "authorization: Bearer <token>" metadata; UNAUTHENTICATED when it is missing,
  // malformed or unknown (one message for all three, never echoing the token).
  absl::StatusOr<Principal> AuthenticateUser(const grpc::ServerContext& context) const;
  // UNAUTHENTICATED unless the peer presented a certificate that verified against --client_ca.
  absl::StatusOr<WorkerPeer> AuthenticateWorker(const grpc::ServerContext& context) const;
  // With --client_ca, a worker acts only under a worker id its certificate names (its common name
  // or one of its subject alternative names): PERMISSION_DENIED naming both otherwise. Without
  // --client_ca every id is allowed.
  absl::Status CheckWorkerId(const WorkerPeer& peer, absl::string_view worker_id) const;

  bool tokens_required() const { return tokens_.has_value(); }
  bool client_certificate_required() const { return require_client_certificate_; }

 private:
  std::optional<TokenTable> tokens_;
  bool require_client_certificate_;
};

// The coordinator's transport and authentication flags, checked together.
struct SecurityFlags {
  std::string listen;
  std::string tls_cert;
  std::string tls_key;
  std::string client_ca;
  std::string tokens_file;
  bool insecure = false;
  // How often --tls_cert, --tls_key and --client_ca are read again (security/tls.h).
  absl::Duration tls_reload_interval = absl::Seconds(60);
};

struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;  // TLS, or plaintext
  std::shared_ptr<const Authenticator> authenticator;
  bool tls = false;
  // Lines to log at start (plaintext warnings); never holds a token.
  std::vector<std::string> warnings;
};

// The policy of docs/security.md: TLS when --tls_cert/--tls_key are given; plaintext with
// --insecure, or with no TLS flag at all, only on a loopback --listen address (INVALID_ARGUMENT
// otherwise); --client_ca needs TLS.
absl::StatusOr<ServerSecurity> ConfigureServerSecurity(const SecurityFlags& flags);

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_AUTH_H_
