#include "model/comm/unique_id_exchange.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "launch/rendezvous_files.h"

namespace mesa::model {
namespace {

absl::Status CheckKey(absl::string_view key) {
  if (!launch::IsRendezvousKey(key)) {
    return absl::InvalidArgumentError(absl::StrCat("bad rendezvous key \"", key, "\""));
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& value) {
  // '+' is not a key character: a temporary can never be mistaken for a value (the agent's
  // rendezvous bridge publishes every file whose name is a key).
  const std::string tmp = absl::StrCat(path, "+tmp.", getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(tmp, ": ", strerror(errno)));
  const char* p = value.data();
  size_t left = value.size();
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      close(fd);
      return absl::UnavailableError(absl::StrCat(tmp, ": ", strerror(errno)));
    }
    p += w;
    left -= w;
  }
  fsync(fd);
  close(fd);
  // Readers see either no file or the whole value.
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("rename to ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CommunicatorIdExchange::Exchange(absl::string_view key, int root, std::string* value) {
  if (absl::Status st = CheckKey(key); !st.ok()) return st;
  uint64_t size = comm_->rank() == root ? value->size() : 0;
  if (absl::Status st = comm_->BroadcastBytes(&size, sizeof(size), root); !st.ok()) return st;
  if (size > (1u << 20)) return absl::InternalError("rendezvous value over 1 MiB");
  value->resize(size);
  return comm_->BroadcastBytes(value->data(), static_cast<int64_t>(size), root);
}

std::string FileIdExchange::PathFor(absl::string_view key) const {
  return launch::RendezvousValuePath(dir_, key);
}

absl::Status FileIdExchange::Exchange(absl::string_view key, int root, std::string* value) {
  if (absl::Status st = CheckKey(key); !st.ok()) return st;
  const std::string path = PathFor(key);
  if (rank_ == root) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) return absl::UnavailableError(absl::StrCat(dir_, ": ", ec.message()));
    return WriteFileAtomically(path, *value);
  }
  // "KEY+want" tells the worker agent which key to fetch from the coordinator's rendezvous for
  // ranks on other nodes (docs/distributed.md). Best effort: on one node or shared storage the
  // value shows up without it.
  {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    std::ofstream(launch::RendezvousWantPath(dir_, key), std::ios::trunc);
  }
  const absl::Time deadline = absl::Now() + timeout_;
  absl::Duration pause = absl::Milliseconds(2);
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::stringstream buffer;
      buffer << in.rdbuf();
      *value = buffer.str();
      return absl::OkStatus();
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous: no value for \"", key, "\" from rank ", root, " after ",
          absl::FormatDuration(timeout_), " (waited for ", path, ")"));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(100));
  }
}

absl::Status CallbackIdExchange::Exchange(absl::string_view key, int root, std::string* value) {
  if (absl::Status st = CheckKey(key); !st.ok()) return st;
  if (rank_ == root) return publish_(key, *value);
  auto got = lookup_(key, absl::Now() + timeout_);
  if (!got.ok()) return got.status();
  *value = *std::move(got);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<UniqueIdExchange>> ExchangeFromSpec(const std::string& spec,
                                                                   int rank,
                                                                   absl::Duration timeout) {
  std::string dir = spec;
  if (absl::StartsWith(spec, "file:")) {
    dir = spec.substr(5);
  } else if (spec.find("://") != std::string::npos || spec.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MESA_RENDEZVOUS=\"", spec, "\": expected file:DIR or a directory"));
  }
  if (dir.empty()) return absl::InvalidArgumentError("MESA_RENDEZVOUS: empty directory");
  return std::make_unique<FileIdExchange>(dir, rank, timeout);
}

}  // namespace mesa::model
