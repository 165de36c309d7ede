// TensorBoard event files: the training curves of a run as TensorBoard (and W&B, MLflow, ...
// through their TensorBoard importers) read them, written beside the checkpoints.
//
// A file is a sequence of records: uint64 length (little-endian), uint32 masked CRC-32C of those
// 8 bytes, the data (a serialized mesa.tensorboard.Event, proto/tensorboard/event.proto), uint32
// masked CRC-32C of the data; the first record's event holds file_version "brain.Event:2". Every
// attempt of a run starts a new file in the same directory (TensorBoard reads them as one run).
#ifndef MESANET_MODEL_TRAINER_TENSORBOARD_H_
#define MESANET_MODEL_TRAINER_TENSORBOARD_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mesa::model {

// CRC-32C (Castagnoli), as the record framing uses it; and its masked form,
// ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t Crc32c(std::string_view data);
uint32_t MaskedCrc32c(std::string_view data);

// One framed record around `data`.
std::string TensorBoardRecord(std::string_view data);

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) and a new file events.out.tfevents.<seconds>.<host>.<pid>
  // in it, and writes the file_version record.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Open(const std::string& dir,
                                                                 absl::Time now);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event with a scalar per (tag, value), flushed: the file is readable while the run goes on.
  absl::Status Scalars(int64_t step, absl::Time wall_time,
                       const std::vector<std::pair<std::string, double>>& values);
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string path, FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status Write(std::string_view event_bytes);
  std::string path_;
  FILE* file_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_TRAINER_TENSORBOARD_H_
