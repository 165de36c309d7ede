#include "coordinator/auth.h"

#include <sys/stat.h>

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file_util.h"
#include "security/tls.h"

namespace mesa::coordinator {

namespace {

absl::Status Denied(const Principal& who, absl::string_view what) {
  return absl::PermissionDeniedError(
      absl::StrCat(RoleName(who.role), " ", who.name, " may not ", what));
}

}  // namespace

absl::Status CheckMaySubmit(const Principal& who) {
  if (who.role == Role::kViewer) return Denied(who, "submit jobs (role viewer)");
  return absl::OkStatus();
}

absl::Status CheckMayReadAudit(const Principal& who) {
  if (who.role != Role::kAdmin) {
    return Denied(who, absl::StrCat("read the audit log (role ", RoleName(who.role), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckMayRead(const Principal& who, const std::string& job_id,
                          const std::string& owner) {
  if (who.role == Role::kUser && owner != who.name) {
    return Denied(who, absl::StrCat("read job ", job_id, ": it belongs to another user"));
  }
  return absl::OkStatus();
}

absl::Status CheckMayCancel(const Principal& who, const std::string& job_id,
                            const std::string& owner) {
  if (who.role == Role::kViewer) return Denied(who, "cancel jobs (role viewer)");
  if (who.role == Role::kUser && owner != who.name) {
    return Denied(who, absl::StrCat("cancel job ", job_id, ": it belongs to another user"));
  }
  return absl::OkStatus();
}

std::string ListFilter(const Principal& who) { return who.role == Role::kUser ? who.name : ""; }

absl::StatusOr<Principal> Authenticator::AuthenticateUser(
    const grpc::ServerContext& context) const {
  if (!tokens_.has_value()) return Principal{"anonymous", Role::kAdmin};
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  const absl::Status refused = absl::UnauthenticatedError(
      "this coordinator requires a bearer token: pass --token or set MESA_TOKEN (metadata "
      "\"authorization: Bearer <token>\"); the token given, if any, is not valid");
  if (it == metadata.end()) return refused;
  absl::string_view value(it->second.data(), it->second.size());
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return refused;
  }
  std::optional<Principal> principal =
      tokens_->Find(absl::StripAsciiWhitespace(value.substr(kScheme.size())));
  if (!principal.has_value()) return refused;
  return *principal;
}

absl::StatusOr<WorkerPeer> Authenticator::AuthenticateWorker(
    const grpc::ServerContext& context) const {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  WorkerPeer peer;
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const char* property : {"x509_common_name", "x509_subject_alternative_name"}) {
      for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
        if (value.empty()) continue;
        peer.names.emplace_back(value.data(), value.size());
      }
    }
    peer.subject = peer.names.empty() ? "(certificate without a name)" : peer.names.front();
  }
  if (!require_client_certificate_) {
    if (peer.subject.empty()) peer.subject = "anonymous";
    return peer;
  }
  if (peer.subject.empty()) {
    return absl::UnauthenticatedError(
        "the worker API requires a client certificate signed by the coordinator's --client_ca "
        "(mesa-worker --tls_cert, --tls_key, --ca)");
  }
  return peer;
}

absl::Status Authenticator::CheckWorkerId(const WorkerPeer& peer,
                                          absl::string_view worker_id) const {
  if (!require_client_certificate_) return absl::OkStatus();
  for (const std::string& name : peer.names) {
    if (name == worker_id) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "worker id \"", absl::CHexEscape(worker_id), "\" does not match the client certificate (",
      peer.names.empty() ? std::string("which names no worker")
                         : absl::StrCat("issued to \"", absl::CHexEscape(peer.subject), "\""),
      "): a worker may register, heartbeat and report only under the worker id its certificate "
      "names as common name or subject alternative name (docs/security.md)"));
}

absl::StatusOr<ServerSecurity> ConfigureServerSecurity(const SecurityFlags& flags) {
  ServerSecurity security;
  const bool tls = !flags.tls_cert.empty() || !flags.tls_key.empty();
  const bool loopback = security::IsLoopbackAddress(flags.listen);
  if (flags.insecure && (tls || !flags.client_ca.empty())) {
    return absl::InvalidArgumentError("--insecure excludes --tls_cert, --tls_key and --client_ca");
  }
  if (!tls && !flags.client_ca.empty()) {
    return absl::InvalidArgumentError("--client_ca needs --tls_cert and --tls_key");
  }
  if (tls) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
        security::ServerCredentialsFromFiles({.cert = flags.tls_cert,
                                              .key = flags.tls_key,
                                              .client_ca = flags.client_ca,
                                              .reload_interval = flags.tls_reload_interval});
    if (!credentials.ok()) return credentials.status();
    security.credentials = *credentials;
    security.tls = true;
    if (flags.client_ca.empty()) {
      security.warnings.push_back(
          "WARNING: no --client_ca: any client reaching this port may act as a worker (register, "
          "receive jobs with their specs, report results)");
    }
  } else {
    if (!loopback) {
      return absl::InvalidArgumentError(absl::StrCat(
          "refusing to serve plaintext on ", flags.listen,
          ", which is not a loopback address: pass --tls_cert and --tls_key (and --client_ca for "
          "workers); --insecure is for loopback development only (docs/security.md)"));
    }
    security.credentials = grpc::InsecureServerCredentials();
    security.warnings.push_back(absl::StrCat(
        "WARNING: INSECURE: plaintext gRPC on ", flags.listen,
        flags.insecure ? " (--insecure)" : " (no --tls_cert)",
        "; no transport security, no worker authentication; loopback development only"));
  }
  std::optional<TokenTable> tokens;
  if (!flags.tokens_file.empty()) {
    absl::StatusOr<TokenTable> table = TokenTable::Load(flags.tokens_file);
    if (!table.ok()) return table.status();
    tokens = std::move(*table);
    struct stat st;
    if (stat(flags.tokens_file.c_str(), &st) == 0 && (st.st_mode & 0077) != 0) {
      security.warnings.push_back(absl::StrCat("WARNING: --tokens_file ", flags.tokens_file,
                                               " is readable or writable by other users (mode ",
                                               absl::StrFormat("%03o", st.st_mode & 0777),
                                               "); chmod 600 it"));
    }
  } else {
    security.warnings.push_back(
        "WARNING: no --tokens_file: the job API is open to every client (anyone may list, read, "
        "submit and cancel every job)");
  }
  security.authenticator =
      std::make_shared<const Authenticator>(std::move(tokens), !flags.client_ca.empty());
  return security;
}

}  // namespace mesa::coordinator
