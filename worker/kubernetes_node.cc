#include "worker/kubernetes_node.h"

#include <curl/curl.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "nlohmann/json.hpp"

namespace mesa::worker {
namespace {

constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

// Collects the body, refusing more than kMaxNodeObjectBytes (curl then fails the transfer).
size_t Collect(char* data, size_t size, size_t count, void* user) {
  auto* body = static_cast<std::string*>(user);
  const size_t n = size * count;
  if (body->size() + n > kMaxNodeObjectBytes) return 0;
  body->append(data, n);
  return n;
}

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  absl::StatusOr<std::string> text = base::ReadFile(path);
  if (!text.ok()) {
    // FAILED_PRECONDITION whatever the cause: a setting to mend, not a transient error.
    return absl::FailedPreconditionError(absl::StrCat("token file: ", text.status().message()));
  }
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) return absl::FailedPreconditionError(absl::StrCat("empty token file ", path));
  if (token.find_first_of("\r\n") != std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat("token file ", path, " holds several lines"));
  }
  return token;
}

absl::Status HttpError(long code, const std::string& url, const std::string& body) {
  // The API's Status object says why; its message is enough (and bounded).
  std::string why = body.substr(0, 300);
  if (auto status = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
      status.is_object() && status.contains("message") && status["message"].is_string()) {
    why = status["message"].get<std::string>();
  }
  const std::string message = absl::StrCat("GET ", url, ": HTTP ", code, ": ", why);
  switch (code) {
    case 401:
      return absl::UnauthenticatedError(message);
    case 403:
      return absl::PermissionDeniedError(message);
    case 404:
      return absl::NotFoundError(message);
    default:
      return absl::UnavailableError(message);
  }
}

}  // namespace

KubernetesApiOptions InClusterApiOptions() {
  KubernetesApiOptions options;
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host != nullptr && *host != '\0' && port != nullptr && *port != '\0') {
    const std::string h = host;
    // An IPv6 service address needs brackets in a URL.
    options.server =
        absl::StrCat("https://", h.find(':') != std::string::npos ? "[" + h + "]" : h, ":", port);
  }
  options.token_file = absl::StrCat(kServiceAccountDir, "/token");
  options.ca_file = absl::StrCat(kServiceAccountDir, "/ca.crt");
  return options;
}

absl::Status CheckNodeName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 253 && absl::ascii_isalnum(name.front()) &&
            absl::ascii_isalnum(name.back());
  for (char c : name) {
    ok = ok && ((c >= 'a' && c <= 'z') || absl::ascii_isdigit(c) || c == '.' || c == '-');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "node name \"", name.substr(0, 253),
      "\" is not a DNS subdomain (1 to 253 of [a-z0-9.-], alphanumeric at both ends)"));
}

absl::StatusOr<bool> ParseNodeUnschedulable(const std::string& json, const std::string& node) {
  const nlohmann::json object = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat("node ", node, ": the answer is not JSON"));
  }
  if (!object.is_object() || object.value("kind", "") != "Node") {
    return absl::InvalidArgumentError(absl::StrCat("node ", node, ": the answer is not a Node"));
  }
  const auto metadata = object.find("metadata");
  if (metadata == object.end() || !metadata->is_object() || metadata->value("name", "") != node) {
    return absl::InvalidArgumentError(
        absl::StrCat("node ", node, ": the answer is a Node of another name"));
  }
  const auto spec = object.find("spec");
  if (spec == object.end()) return false;
  if (!spec->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("node ", node, ": spec is not an object"));
  }
  const auto unschedulable = spec->find("unschedulable");
  if (unschedulable == spec->end() || unschedulable->is_null()) return false;
  if (!unschedulable->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat("node ", node, ": spec.unschedulable is not a boolean"));
  }
  return unschedulable->get<bool>();
}

NodeClient::NodeClient(KubernetesApiOptions options) : options_(std::move(options)) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

absl::StatusOr<bool> NodeClient::Unschedulable(const std::string& node) const {
  if (absl::Status s = CheckNodeName(node); !s.ok()) return s;
  absl::StatusOr<std::string> token = ReadToken(options_.token_file);
  if (!token.ok()) return token.status();
  const std::string url = absl::StrCat(options_.server, "/api/v1/nodes/", node);

  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
  const std::string authorization = absl::StrCat("Authorization: Bearer ", *token);
  curl_slist* headers = curl_slist_append(nullptr, authorization.c_str());
  headers = curl_slist_append(headers, "Accept: application/json");
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> header_list(headers, curl_slist_free_all);
  std::string body;
  char error[CURL_ERROR_SIZE] = {0};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  // HTTPS only, with the API server's certificate checked against the cluster's CA.
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https");
  curl_easy_setopt(c, CURLOPT_CAINFO, options_.ca_file.c_str());
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(options_.timeout)));
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // several threads: no SIGALRM for timeouts
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  const CURLcode result = curl_easy_perform(c);
  if (result != CURLE_OK) {
    if (result == CURLE_WRITE_ERROR) {
      return absl::InvalidArgumentError(
          absl::StrCat("GET ", url, ": the Node object exceeds ", kMaxNodeObjectBytes, " bytes"));
    }
    return absl::UnavailableError(
        absl::StrCat("GET ", url, ": ", error[0] != '\0' ? error : curl_easy_strerror(result)));
  }
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  if (code != 200) return HttpError(code, url, body);
  return ParseNodeUnschedulable(body, node);
}

NodeCordonFollower::NodeCordonFollower(std::string node, absl::Duration interval, Hooks hooks)
    : node_(std::move(node)), interval_(interval), hooks_(std::move(hooks)) {}

NodeCordonFollower::~NodeCordonFollower() { Stop(); }

void NodeCordonFollower::Start() {
  thread_ = std::thread([this] {
    do {
      PollOnce().IgnoreError();  // logged and counted there; the next poll tries again
    } while (!stop_.WaitForNotificationWithTimeout(interval_));
  });
}

void NodeCordonFollower::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

absl::Status NodeCordonFollower::PollOnce() {
  absl::StatusOr<bool> cordoned = hooks_.read();
  absl::Status status = cordoned.status();
  if (!cordoned.ok()) {
    if (hooks_.read_failed) hooks_.read_failed(status);
  } else {
    status = hooks_.apply(*cordoned);
  }
  // Messages vary (curl's timings), so the step and the code say whether it is a new error.
  const std::string step = cordoned.ok() ? "following" : "reading";
  const std::string key =
      status.ok() ? "" : absl::StrCat(step, " ", absl::StatusCodeToString(status.code()));
  absl::MutexLock lock(&mu_);
  if (key != last_error_ && hooks_.log) {
    hooks_.log(status.ok() ? absl::StrCat("node ", node_, ": followed again")
                           : absl::StrCat(step, " node ", node_, " failed (", status.ToString(),
                                          "); the drain state stays as it is, retrying every ",
                                          absl::FormatDuration(interval_)));
  }
  last_error_ = key;
  return status;
}

}  // namespace mesa::worker
