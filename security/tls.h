// gRPC transport credentials from PEM files, for the coordinator (server certificate, optional
// client CA for workers' mutual TLS) and its clients (mesactl, worker agents). See
// docs/security.md.
//
// The files are watched: gRPC's FileWatcherCertificateProvider reads them again every
// `reload_interval`, and every TLS handshake after a change uses what it read (connections already
// open keep the certificates they were made with). So a renewed certificate, key or CA bundle —
// cert-manager rewriting a mounted Secret — takes effect without a restart. Replace the files
// atomically (write new ones, then rename, as the kubelet does with its ..data link): a
// certificate read with the other's key fails handshakes until the next read.
#ifndef MESANET_SECURITY_TLS_H_
#define MESANET_SECURITY_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace mesa::security {

// How often the certificate files are read again, unless a caller says otherwise.
inline constexpr absl::Duration kDefaultReloadInterval = absl::Seconds(60);

// Reads a PEM file named by `flag` (for error messages); refuses empty files and files without a
// "-----BEGIN" line.
absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view flag);

struct ServerTlsFiles {
  std::string cert;       // --tls_cert: server certificate chain (PEM)
  std::string key;        // --tls_key: its private key (PEM)
  std::string client_ca;  // --client_ca: CA whose certificates clients may present; empty: none
  // How often the three files are read again (whole seconds, at least 1).
  absl::Duration reload_interval = kDefaultReloadInterval;
};

// TLS server credentials, the files watched (above). Each file must be readable and PEM at start
// (INVALID_ARGUMENT naming the flag otherwise). With a client CA, clients may present a
// certificate; one that is presented must verify against the CA (else the handshake fails), and
// the call's auth context then names the peer. Clients without one still connect: the worker API
// refuses them, the job API authenticates them with bearer tokens.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFiles(
    const ServerTlsFiles& files);

struct ClientTlsFiles {
  std::string ca;    // CA that signed the server's certificate; empty: plaintext
  std::string cert;  // client certificate (workers' mutual TLS); empty: none
  std::string key;   // its private key
  // How often the files are read again (whole seconds, at least 1).
  absl::Duration reload_interval = kDefaultReloadInterval;
};

// Channel credentials: plaintext when `files.ca` is empty (then cert and key must be empty too),
// else TLS verifying the server's certificate against `ca` and its name against the dialled host,
// presenting cert/key when given; the files watched (above).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFiles(
    const ClientTlsFiles& files);

// True when the host of `address` ("host:port", "[v6]:port") is a loopback address: 127.0.0.0/8,
// ::1 or "localhost". Anything else, wildcards (0.0.0.0, [::]) included, is not.
bool IsLoopbackAddress(absl::string_view address);

}  // namespace mesa::security

#endif  // MESANET_SECURITY_TLS_H_
