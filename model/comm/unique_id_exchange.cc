#include "model/comm/unique_id_exchange.h"

#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "launch/rendezvous_files.h"

namespace mesa::model {
namespace {

absl::Status CheckKey(absl::string_view key) {
  if (!launch::IsRendezvousKey(key)) {
    return absl::InvalidArgumentError(absl::StrCat("bad rendezvous key \"", key, "\""));
  }
  return absl::OkStatus();
}

// Readers see either no file or the whole value. '+' is not a key character: a temporary can
// never be mistaken for a value (the agent's rendezvous bridge publishes every file whose name is a
// key).
absl::Status WriteValue(const std::string& path, const std::string& value) {
  base::AtomicWriteOptions options;
  options.temp_infix = "+tmp";
  absl::Status status = base::WriteFileAtomically(path, value, options);
  if (status.ok()) return status;
  return absl::UnavailableError(status.message());
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
    return WriteValue(path, *value);
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
    // Not there yet, or (never seen) not readable yet: poll until the deadline.
    if (absl::StatusOr<std::string> read = base::ReadFile(path); read.ok()) {
      *value = *std::move(read);
      return absl::OkStatus();
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous: no value for \"", key, "\" from rank ", root, " after ",
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
    return absl::InvalidArgumentError(
        absl::StrCat("MESA_RENDEZVOUS=\"", spec, "\": expected file:DIR or a directory"));
  }
  if (dir.empty()) return absl::InvalidArgumentError("MESA_RENDEZVOUS: empty directory");
  return std::make_unique<FileIdExchange>(dir, rank, timeout);
}

}  // namespace mesa::model
