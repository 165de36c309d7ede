// Progress reporting of the trainer.
//
// Machine-readable: mesa.v1.TrainerEvent messages (proto/mesa/v1/trainer.proto), one JSON line
// each (proto/trainer_events.h), to a file descriptor (--events_fd, e.g. a pipe from the worker
// agent) and/or a file (--events_file).
// Human-readable: log lines on stderr, and a single redrawn progress line when stderr is a TTY.
#ifndef MESANET_MODEL_TRAINER_EVENTS_H_
#define MESANET_MODEL_TRAINER_EVENTS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "mesa/v1/trainer.pb.h"
#include "model/trainer/tensorboard.h"

namespace mesa::model {

class EventSink {
 public:
  EventSink() = default;
  ~EventSink();
  // Either may be unset (-1 / empty). The file is appended to.
  absl::Status Open(int events_fd, const std::string& events_file);
  // Tests: receive every event too.
  void set_observer(std::function<void(const mesa::v1::TrainerEvent&)> observer) {
    observer_ = std::move(observer);
  }
  void set_quiet(bool quiet) { quiet_ = quiet; }
  // Stamped on every event.
  void set_rank(int rank) { rank_ = rank; }
  // Step and evaluation events also go to a TensorBoard file in `dir` (TensorBoardScalars),
  // created with the first of them (a run that fails before its first step leaves nothing). A file
  // that cannot be made or written is reported once on stderr and dropped: the run goes on.
  void set_tensorboard_dir(std::string dir);

  // Sets time and rank and writes one line (flushed).
  void Emit(mesa::v1::TrainerEvent event);
  void Log(const std::string& message);
  // Redraws the progress line (TTY only).
  void Progress(int64_t step, int64_t total, double loss, double tokens_per_second,
                double eta_seconds);

 private:
  void WriteLine(const std::string& line);
  std::mutex mutex_;
  int fd_ = -1;
  FILE* file_ = nullptr;
  bool tty_ = false;
  bool progress_shown_ = false;
  bool quiet_ = false;
  int rank_ = 0;
  std::function<void(const mesa::v1::TrainerEvent&)> observer_;
  std::string tensorboard_dir_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

// The TensorBoard scalars of a step or evaluation event (tags "train/loss", "train/lr",
// "train/grad_norm", "train/tokens_per_second", "train/mfu", "train/mfu_with_cg",
// "train/cg_steps", "train/step_seconds"; "eval/loss", "eval/perplexity", "eval/cg_steps"),
// with the step they belong to; none for other events.
std::vector<std::pair<std::string, double>> TensorBoardScalars(const mesa::v1::TrainerEvent& event,
                                                               int64_t* step);

// One line saying what an evaluation or generation produced (mesa-train's stdout under the worker
// agent, where the whole result travels as the "result" event instead).
std::string ResultSummaryLine(const mesa::v1::ResultEvent& result);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TRAINER_EVENTS_H_
