#include "model/trainer/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "tensorboard/event.pb.h"

namespace mesa::model {
namespace {

// The reflected CRC-32C table (polynomial 0x82f63b78), built once.
const std::array<uint32_t, 256>& Crc32cTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void AppendLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t Crc32c(std::string_view data) {
  const std::array<uint32_t, 256>& table = Crc32cTable();
  uint32_t crc = 0xffffffffu;
  for (unsigned char byte : data) crc = table[(crc ^ byte) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

uint32_t MaskedCrc32c(std::string_view data) {
  const uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string TensorBoardRecord(std::string_view data) {
  std::string header;
  AppendLittleEndian(header, data.size(), 8);
  std::string record = header;
  AppendLittleEndian(record, MaskedCrc32c(header), 4);
  record.append(data);
  AppendLittleEndian(record, MaskedCrc32c(data), 4);
  return record;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(const std::string& dir,
                                                                           absl::Time now) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("TensorBoard directory ", dir, ": ", ec.message()));
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  const std::string path = absl::StrCat(dir, "/events.out.tfevents.", absl::ToUnixSeconds(now), ".",
                                        host, ".", getpid());
  // "x": a new file; never another attempt's (TensorBoard reads every file of the directory).
  FILE* file = std::fopen(path.c_str(), "wbx");
  if (file == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("TensorBoard file ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(path, file));
  tensorboard::Event first;
  first.set_wall_time(absl::ToDoubleSeconds(now - absl::UnixEpoch()));
  first.set_file_version("brain.Event:2");
  if (absl::Status s = writer->Write(first.SerializeAsString()); !s.ok()) return s;
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status TensorBoardWriter::Scalars(int64_t step, absl::Time wall_time,
                                        const std::vector<std::pair<std::string, double>>& values) {
  tensorboard::Event event;
  event.set_wall_time(absl::ToDoubleSeconds(wall_time - absl::UnixEpoch()));
  event.set_step(step);
  for (const auto& [tag, value] : values) {
    tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return Write(event.SerializeAsString());
}

absl::Status TensorBoardWriter::Write(std::string_view event_bytes) {
  const std::string record = TensorBoardRecord(event_bytes);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return absl::DataLossError(
        absl::StrCat("TensorBoard file ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace mesa::model
