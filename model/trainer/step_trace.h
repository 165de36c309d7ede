// training.profile (proto/mesa/v1/job.proto): a Chrome/Perfetto trace of some training steps'
// phases, one JSON file per rank in the trace-event format ("X" events, microseconds), readable
// by ui.perfetto.dev and chrome://tracing. Phases wait for the device at both ends, so each holds
// its GPU work; they are also the backend's named ranges (NVTX on CUDA, for Nsight Systems).
#ifndef MESANET_MODEL_TRAINER_STEP_TRACE_H_
#define MESANET_MODEL_TRAINER_STEP_TRACE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/backend/backend.h"

namespace mesa::model {

class StepTrace {
 public:
  // Traces steps [start_step, start_step + steps) (the numbers the trainer reports them by) on
  // `backend`, and writes `path` after the last of them.
  StepTrace(int64_t start_step, int steps, int rank, std::string path, Backend* backend);

  // Step `step` starts / ends; EndStep writes the file after the window's last step (an error
  // there is the caller's to log: a trace never fails a run).
  void BeginStep(int64_t step);
  absl::Status EndStep();
  bool tracing() const { return step_ >= 0; }
  bool done() const { return written_; }

  // A phase of the current step, ended when the returned object goes; nothing outside the window.
  class Phase {
   public:
    Phase(Phase&& other) noexcept : trace_(other.trace_), index_(other.index_) {
      other.trace_ = nullptr;
    }
    Phase(const Phase&) = delete;
    Phase& operator=(const Phase&) = delete;
    Phase& operator=(Phase&&) = delete;
    ~Phase();

   private:
    friend class StepTrace;
    Phase(StepTrace* trace, int index) : trace_(trace), index_(index) {}
    StepTrace* trace_;
    int index_;
  };
  Phase Scope(const char* name);

 private:
  struct Event {
    std::string name;
    int64_t step;
    double start_us = 0, duration_us = 0;
  };
  double Now() const;
  absl::Status Write() const;

  const int64_t start_step_;
  const int steps_;
  const int rank_;
  const std::string path_;
  Backend* const backend_;
  const std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  int64_t step_ = -1;  // the step being traced, -1 outside
  int step_event_ = -1;
  bool written_ = false;
  std::vector<Event> events_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_TRAINER_STEP_TRACE_H_
