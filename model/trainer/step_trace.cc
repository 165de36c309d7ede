#include "model/trainer/step_trace.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "nlohmann/json.hpp"

namespace mesa::model {

StepTrace::StepTrace(int64_t start_step, int steps, int rank, std::string path, Backend* backend)
    : start_step_(start_step),
      steps_(steps),
      rank_(rank),
      path_(std::move(path)),
      backend_(backend) {}

double StepTrace::Now() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_)
      .count();
}

void StepTrace::BeginStep(int64_t step) {
  step_ = -1;
  if (written_ || step < start_step_ || step >= start_step_ + steps_) return;
  backend_->WaitForDevice();  // the work queued before the step is not the step's
  step_ = step;
  step_event_ = static_cast<int>(events_.size());
  const std::string name = absl::StrCat("step ", step);
  events_.push_back({name, step, Now(), 0});
  backend_->PushRange(name.c_str());
}

absl::Status StepTrace::EndStep() {
  if (!tracing()) return absl::OkStatus();
  backend_->WaitForDevice();
  backend_->PopRange();
  events_[step_event_].duration_us = Now() - events_[step_event_].start_us;
  const bool last = step_ == start_step_ + steps_ - 1;
  step_ = -1;
  if (!last) return absl::OkStatus();
  written_ = true;
  return Write();
}

StepTrace::Phase StepTrace::Scope(const char* name) {
  if (!tracing()) return Phase(nullptr, -1);
  backend_->WaitForDevice();
  backend_->PushRange(name);
  events_.push_back({name, step_, Now(), 0});
  return Phase(this, static_cast<int>(events_.size()) - 1);
}

StepTrace::Phase::~Phase() {
  if (trace_ == nullptr) return;
  trace_->backend_->WaitForDevice();
  trace_->backend_->PopRange();
  Event& e = trace_->events_[index_];
  e.duration_us = trace_->Now() - e.start_us;
}

absl::Status StepTrace::Write() const {
  nlohmann::json events = nlohmann::json::array();
  events.push_back(
      {{"name", "process_name"},
       {"ph", "M"},
       {"pid", rank_},
       {"args", {{"name", absl::StrCat("rank ", rank_, " (", backend_->Name(), ")")}}}});
  for (const Event& e : events_) {
    const bool step = absl::StrCat("step ", e.step) == e.name;
    events.push_back({{"name", e.name},
                      {"cat", step ? "step" : "phase"},
                      {"ph", "X"},
                      {"ts", e.start_us},
                      {"dur", e.duration_us},
                      {"pid", rank_},
                      {"tid", 0},
                      {"args", {{"step", e.step}}}});
  }
  const nlohmann::json trace = {{"traceEvents", events},
                                {"displayTimeUnit", "ms"},
                                {"otherData",
                                 {{"start_step", start_step_},
                                  {"steps", steps_},
                                  {"rank", rank_},
                                  {"backend", backend_->Name()}}}};
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), error);
  return base::WriteFileAtomically(path_, trace.dump(1));
}

}  // namespace mesa::model
