#include "security/tls.h"

#include <arpa/inet.h>

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace mesa::security {

absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view flag) {
  constexpr size_t kMaxPemBytes = 1 << 20;
  absl::StatusOr<std::string> pem = base::ReadFile(path, kMaxPemBytes);
  if (!pem.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", path, ": ", pem.status().message()));
  }
  if (!absl::StrContains(*pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, ": not a PEM file"));
  }
  return pem;
}

namespace {

// The files gRPC reads again every `interval` (rounded to whole seconds, at least 1); `key` and
// `cert` both empty or both set, and not all three empty.
std::shared_ptr<grpc::experimental::CertificateProviderInterface> WatchFiles(
    const std::string& key, const std::string& cert, const std::string& ca,
    absl::Duration interval) {
  const unsigned int seconds =
      static_cast<unsigned int>(std::clamp<int64_t>(absl::ToInt64Seconds(interval), 1, 86400));
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(key, cert, ca,
                                                                              seconds);
}

// Reads the files once, so that a missing or malformed one is an error at start naming its flag
// (the watcher would only log it and fail every handshake).
absl::Status CheckPems(std::initializer_list<std::pair<const std::string*, const char*>> files) {
  for (const auto& [path, flag] : files) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> pem = ReadPem(*path, flag);
    if (!pem.ok()) return pem.status();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFiles(
    const ServerTlsFiles& files) {
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (absl::Status s = CheckPems(
          {{&files.cert, "tls_cert"}, {&files.key, "tls_key"}, {&files.client_ca, "client_ca"}});
      !s.ok()) {
    return s;
  }
  grpc::experimental::TlsServerCredentialsOptions options(
      WatchFiles(files.key, files.cert, files.client_ca, files.reload_interval));
  options.watch_identity_key_cert_pairs();
  if (files.client_ca.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::experimental::TlsServerCredentials(options);
  if (credentials == nullptr) return absl::InternalError("gRPC refused the TLS server options");
  return credentials;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFiles(
    const ClientTlsFiles& files) {
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (files.ca.empty()) {
    if (!files.cert.empty()) {
      return absl::InvalidArgumentError(
          "--tls_cert needs --ca (a client certificate is only sent over TLS)");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (absl::Status s =
          CheckPems({{&files.ca, "ca"}, {&files.cert, "tls_cert"}, {&files.key, "tls_key"}});
      !s.ok()) {
    return s;
  }
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(
      WatchFiles(files.key, files.cert, files.ca, files.reload_interval));
  // Without a verifier of ours gRPC checks the server's name against the dialled host (its
  // HostNameCertificateVerifier), after the chain against `ca`: as SslCredentials did.
  options.watch_root_certs();
  if (!files.cert.empty()) options.watch_identity_key_cert_pairs();
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::experimental::TlsCredentials(options);
  if (credentials == nullptr) return absl::InternalError("gRPC refused the TLS channel options");
  return credentials;
}

bool IsLoopbackAddress(absl::string_view address) {
  absl::string_view host = address;
  if (absl::StartsWith(host, "[")) {
    size_t end = host.find(']');
    if (end == absl::string_view::npos) return false;
    host = host.substr(1, end - 1);
  } else if (size_t colon = host.rfind(':'); colon != absl::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (host == "localhost") return true;
  const std::string h(host);
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

}  // namespace mesa::security
