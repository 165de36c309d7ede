#include "worker/rendezvous_bridge.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#include <tuple>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "launch/rendezvous_files.h"

namespace mesa::worker {
namespace {

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
}

// The attempt is over as far as the coordinator is concerned (or the request is bad): retrying
// cannot help.
bool Permanent(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition ||
         status.code() == absl::StatusCode::kNotFound ||
         status.code() == absl::StatusCode::kInvalidArgument;
}

// Readers (the trainer polls for the name) see no file or the whole value; the temporary
// (KEY+tmp.agent.PID.RAND) is no key.
absl::Status WriteValue(const std::string& path, const std::string& value) {
  base::AtomicWriteOptions options;
  options.temp_infix = "+tmp.agent";
  return base::WriteFileAtomically(path, value, options);
}

}  // namespace

std::string LocalAddressTowards(const std::string& target_in) {
  std::string target = target_in;
  for (const char* scheme : {"dns:///", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(target, scheme)) target = target.substr(strlen(scheme));
  }
  std::string host, port = "1";
  if (!target.empty() && target[0] == '[') {
    const size_t close = target.find(']');
    if (close == std::string::npos) return "";
    host = target.substr(1, close - 1);
    if (close + 2 < target.size() && target[close + 1] == ':') port = target.substr(close + 2);
  } else {
    const size_t colon = target.rfind(':');
    host = colon == std::string::npos ? target : target.substr(0, colon);
    if (colon != std::string::npos) port = target.substr(colon + 1);
  }
  if (host.empty()) return "";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return "";
  std::string out;
  for (addrinfo* ai = res; ai != nullptr && out.empty(); ai = ai->ai_next) {
    // connect() on a UDP socket sends nothing; it only picks the route and thus the source
    // address.
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* addr =
          local.ss_family == AF_INET6
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (inet_ntop(local.ss_family, addr, text, sizeof(text)) != nullptr) out = text;
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

RendezvousBridge::RendezvousBridge(RendezvousBridgeOptions options, StubProvider stub)
    : options_(std::move(options)), stub_(std::move(stub)) {}

RendezvousBridge::~RendezvousBridge() { Stop(); }

absl::Status RendezvousBridge::Start() {
  std::error_code error;
  std::filesystem::create_directories(options_.dir, error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot create ", options_.dir, ": ", error.message()));
  }
  scanner_ = std::thread(&RendezvousBridge::ScanLoop, this);
  return absl::OkStatus();
}

void RendezvousBridge::Stop() {
  std::vector<std::thread> fetchers;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    for (grpc::ClientContext* context : calls_) context->TryCancel();
  }
  if (scanner_.joinable()) scanner_.join();
  {
    // The scanner has exited: no fetcher is added any more.
    absl::MutexLock lock(&mu_);
    fetchers.swap(fetchers_);
  }
  for (std::thread& fetcher : fetchers) fetcher.join();
}

std::set<std::string> RendezvousBridge::published() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> keys;
  for (const auto& [key, entry] : published_) {
    if (entry.confirmed) keys.insert(key);
  }
  return keys;
}

std::set<std::string> RendezvousBridge::fetched() const {
  absl::MutexLock lock(&mu_);
  return fetched_;
}

bool RendezvousBridge::stopping() {
  absl::MutexLock lock(&mu_);
  return stop_;
}

void RendezvousBridge::Log(const std::string& text) {
  if (options_.log) options_.log(text);
}

bool RendezvousBridge::Track(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  if (stop_) return false;
  calls_.insert(context);
  return true;
}

void RendezvousBridge::Untrack(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  calls_.erase(context);
}

absl::Status RendezvousBridge::Put(const std::string& key, const std::string& value) {
  mesa::v1::PutRendezvousRequest request;
  if (options_.identity)
    std::tie(*request.mutable_worker_id(), *request.mutable_lease_id()) = options_.identity();
  request.set_job_id(options_.job_id);
  request.set_attempt(options_.attempt);
  request.set_key(key);
  request.set_value(value);
  grpc::ClientContext context;
  SetDeadline(context, options_.rpc_timeout);
  if (!Track(&context)) return absl::CancelledError("stopping");
  mesa::v1::PutRendezvousResponse response;
  const grpc::Status status = stub_()->PutRendezvous(&context, request, &response);
  Untrack(&context);
  return FromGrpc(status);
}

absl::StatusOr<std::string> RendezvousBridge::Get(const std::string& key) {
  mesa::v1::GetRendezvousRequest request;
  if (options_.identity)
    std::tie(*request.mutable_worker_id(), *request.mutable_lease_id()) = options_.identity();
  request.set_job_id(options_.job_id);
  request.set_attempt(options_.attempt);
  request.set_key(key);
  request.set_wait_ms(absl::ToInt64Milliseconds(options_.long_poll));
  grpc::ClientContext context;
  SetDeadline(context, options_.long_poll + options_.rpc_timeout);
  if (!Track(&context)) return absl::CancelledError("stopping");
  mesa::v1::GetRendezvousResponse response;
  const grpc::Status status = stub_()->GetRendezvous(&context, request, &response);
  Untrack(&context);
  if (!status.ok()) return FromGrpc(status);
  return response.value();
}

void RendezvousBridge::ScanLoop() {
  while (!stopping()) {
    ScanOnce();
    absl::SleepFor(options_.scan_interval);
  }
}

void RendezvousBridge::ScanOnce() {
  std::vector<std::string> values, wants;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(options_.dir, error)) {
    std::string key;
    switch (launch::ClassifyRendezvousEntry(entry.path().filename().string(), &key)) {
      case launch::RendezvousEntry::kValue:
        values.push_back(std::move(key));
        break;
      case launch::RendezvousEntry::kWant:
        wants.push_back(std::move(key));
        break;
      case launch::RendezvousEntry::kOther:
        break;  // temporaries
    }
  }
  const absl::Time now = absl::Now();
  // New values written by a local rank; due puts (retries and republishing).
  std::vector<std::pair<std::string, std::string>> due;
  for (const std::string& key : values) {
    {
      absl::MutexLock lock(&mu_);
      if (fetched_.count(key) > 0 || published_.count(key) > 0) continue;
    }
    auto value = base::ReadFile(options_.dir + "/" + key);
    if (!value.ok()) continue;
    absl::MutexLock lock(&mu_);
    published_[key] = Published{*value, now, now};
  }
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, entry] : published_) {
      if (entry.given_up || now < entry.next) continue;
      if (entry.confirmed && now - entry.first > options_.republish_for) continue;
      due.emplace_back(key, entry.value);
    }
  }
  for (const auto& [key, value] : due) {
    const absl::Status status = Put(key, value);
    if (stopping()) return;
    std::string message;
    {
      absl::MutexLock lock(&mu_);
      Published& entry = published_[key];
      if (status.ok()) {
        if (!entry.confirmed) {
          message = absl::StrCat("rendezvous: published \"", key, "\" to the coordinator");
        }
        entry.confirmed = true;
        entry.next = absl::Now() + options_.republish_interval;
      } else if (Permanent(status)) {
        entry.given_up = true;
        message = absl::StrCat("rendezvous: cannot publish \"", key, "\": ", status.message());
      } else {
        entry.next = absl::Now() + absl::Milliseconds(500);  // Unreachable: soon again.
      }
    }
    if (!message.empty()) Log(message);  // Outside the lock: the callback takes the runner's.
  }
  for (const std::string& key : wants) {
    absl::MutexLock lock(&mu_);
    if (stop_ || wanted_.count(key) > 0) continue;
    wanted_.insert(key);
    fetchers_.emplace_back(&RendezvousBridge::FetchLoop, this, key);
  }
}

void RendezvousBridge::FetchLoop(std::string key) {
  const std::string path = options_.dir + "/" + key;
  absl::Duration backoff = absl::Milliseconds(100);
  bool reported_wait = false;
  while (!stopping()) {
    std::error_code error;
    // A rank on this node published it (both ranks here): nothing to fetch.
    if (std::filesystem::exists(path, error)) return;
    auto value = Get(key);
    if (value.ok()) {
      // Published meanwhile by a local rank (and relayed back to us): it is already here.
      if (std::filesystem::exists(path, error)) return;
      {
        absl::MutexLock lock(&mu_);
        fetched_.insert(key);  // Before the file appears, so the scanner does not publish it.
      }
      if (absl::Status status = WriteValue(path, *value); !status.ok()) {
        Log(absl::StrCat("rendezvous: cannot write \"", key, "\": ", status.message()));
        return;
      }
      Log(absl::StrCat("rendezvous: fetched \"", key, "\" from the coordinator"));
      return;
    }
    const absl::Status& status = value.status();
    if (status.code() == absl::StatusCode::kDeadlineExceeded) {
      // Not published yet (rank 0 may still be starting): poll again.
      if (!reported_wait) {
        Log(absl::StrCat("rendezvous: still waiting for \"", key, "\""));
        reported_wait = true;
      }
      backoff = absl::Milliseconds(100);
      continue;
    }
    if (Permanent(status)) {
      Log(absl::StrCat("rendezvous: giving up on \"", key, "\": ", status.message()));
      return;
    }
    if (stopping()) return;
    absl::SleepFor(backoff);  // Unavailable: the coordinator is restarting or unreachable.
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

}  // namespace mesa::worker
