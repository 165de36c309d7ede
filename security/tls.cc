#include "security/tls.h"

#include <arpa/inet.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"

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

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFiles(
    const ServerTlsFiles& files) {
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  absl::StatusOr<std::string> cert = ReadPem(files.cert, "tls_cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(files.key, "tls_key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (!files.client_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(files.client_ca, "client_ca");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
    options.client_certificate_request = GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
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
  grpc::SslCredentialsOptions options;
  absl::StatusOr<std::string> ca = ReadPem(files.ca, "ca");
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *ca;
  if (!files.cert.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(files.cert, "tls_cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(files.key, "tls_key");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return grpc::SslCredentials(options);
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
