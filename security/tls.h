// gRPC transport credentials from PEM files, for the coordinator (server certificate, optional
// client CA for workers' mutual TLS) and its clients (mesactl, worker agents). See
// docs/security.md.
#ifndef MESANET_SECURITY_TLS_H_
#define MESANET_SECURITY_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace mesa::security {

// Reads a PEM file named by `flag` (for error messages); refuses empty files and files without a
// "-----BEGIN" line.
absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view flag);

struct ServerTlsFiles {
  std::string cert;       // --tls_cert: server certificate chain (PEM)
  std::string key;        // --tls_key: its private key (PEM)
  std::string client_ca;  // --client_ca: CA whose certificates clients may present; empty: none
};

// TLS server credentials. With a client CA, clients may present a certificate; one that is
// presented must verify against the CA (else the handshake fails), and the call's auth context
// then names the peer (PeerHasClientCertificate). Clients without one still connect: the
// worker API refuses them, the job API authenticates them with bearer tokens.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFiles(
    const ServerTlsFiles& files);

struct ClientTlsFiles {
  std::string ca;    // CA that signed the server's certificate; empty: plaintext
  std::string cert;  // client certificate (workers' mutual TLS); empty: none
  std::string key;   // its private key
};

// Channel credentials: plaintext when `files.ca` is empty (then cert and key must be empty too),
// else TLS verifying the server against `ca`, presenting cert/key when given.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFiles(
    const ClientTlsFiles& files);

// True when the host of `address` ("host:port", "[v6]:port") is a loopback address: 127.0.0.0/8,
// ::1 or "localhost". Anything else, wildcards (0.0.0.0, [::]) included, is not.
bool IsLoopbackAddress(absl::string_view address);

}  // namespace mesa::security

#endif  // MESANET_SECURITY_TLS_H_
