#include "model/trainer/events.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/trainer_events.h"

namespace mesa::model {

EventSink::~EventSink() {
  if (file_ != nullptr) fclose(file_);
}

absl::Status EventSink::Open(int events_fd, const std::string& events_file) {
  tty_ = isatty(STDERR_FILENO);
  if (events_fd >= 0) {
    if (fcntl(events_fd, F_GETFD) < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--events_fd ", events_fd, " is not open"));
    }
    fd_ = events_fd;
  }
  if (!events_file.empty()) {
    file_ = fopen(events_file.c_str(), "a");
    if (file_ == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--events_file ", events_file, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

void EventSink::WriteLine(const std::string& line) {
  if (fd_ >= 0) {
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      const ssize_t n = write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the reader went away; keep training
      p += n;
      left -= n;
    }
  }
  if (file_ != nullptr) {
    fwrite(line.data(), 1, line.size(), file_);
    fflush(file_);
  }
}

void EventSink::Emit(mesa::v1::TrainerEvent event) {
  event.set_time(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  event.set_rank(rank_);
  std::lock_guard<std::mutex> lock(mutex_);
  WriteLine(FormatEventLine(event));
  if (!tensorboard_dir_.empty()) {
    int64_t step = 0;
    const auto scalars = TensorBoardScalars(event, &step);
    const absl::Time time = absl::FromUnixNanos(static_cast<int64_t>(event.time() * 1e9));
    if (!scalars.empty() && tensorboard_ == nullptr) {
      auto writer = TensorBoardWriter::Open(tensorboard_dir_, time);
      if (writer.ok()) {
        tensorboard_ = *std::move(writer);
      } else {
        fprintf(stderr, "[mesa-train] warning: %s; no TensorBoard events this run\n",
                std::string(writer.status().message()).c_str());
        tensorboard_dir_.clear();
      }
    }
    if (!scalars.empty() && tensorboard_ != nullptr) {
      if (absl::Status s = tensorboard_->Scalars(step, time, scalars); !s.ok()) {
        fprintf(stderr, "[mesa-train] warning: %s; no more TensorBoard events this run\n",
                std::string(s.message()).c_str());
        tensorboard_.reset();
        tensorboard_dir_.clear();
      }
    }
  }
  if (observer_) observer_(event);
}

void EventSink::set_tensorboard_dir(std::string dir) {
  std::lock_guard<std::mutex> lock(mutex_);
  tensorboard_dir_ = std::move(dir);
  tensorboard_.reset();
}

std::vector<std::pair<std::string, double>> TensorBoardScalars(const mesa::v1::TrainerEvent& event,
                                                               int64_t* step) {
  std::vector<std::pair<std::string, double>> out;
  if (event.has_step() && !event.step().skipped()) {
    const mesa::v1::StepEvent& s = event.step();
    *step = s.step();
    out = {{"train/loss", s.loss()},
           {"train/lr", s.lr()},
           {"train/grad_norm", s.grad_norm()},
           {"train/tokens_per_second", s.tokens_per_second()},
           {"train/step_seconds", s.step_seconds()}};
    // Reported only where they are known (a GPU's peak FLOPs; Mesa layers solving).
    if (s.mfu() > 0) out.push_back({"train/mfu", s.mfu()});
    if (s.mfu_with_cg() > 0) out.push_back({"train/mfu_with_cg", s.mfu_with_cg()});
    if (s.cg_steps_mean() > 0) out.push_back({"train/cg_steps", s.cg_steps_mean()});
  } else if (event.has_eval() && event.eval().has_metrics()) {
    const mesa::v1::EvalMetrics& m = event.eval().metrics();
    *step = event.eval().step();
    out = {{"eval/loss", m.val_loss()}, {"eval/perplexity", m.val_perplexity()}};
    if (m.cg_steps_mean() > 0) out.push_back({"eval/cg_steps", m.cg_steps_mean()});
  }
  return out;
}

void EventSink::Log(const std::string& message) {
  if (quiet_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (progress_shown_) {
    fputs("\r\033[K", stderr);
    progress_shown_ = false;
  }
  fprintf(stderr, "[mesa-train] %s\n", message.c_str());
  fflush(stderr);
}

void EventSink::Progress(int64_t step, int64_t total, double loss, double tokens_per_second,
                         double eta_seconds) {
  if (!tty_ || quiet_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const int width = 30;
  const int filled = total > 0 ? static_cast<int>(width * step / total) : 0;
  std::string bar(filled, '#');
  bar.resize(width, '.');
  const int64_t eta = static_cast<int64_t>(eta_seconds);
  fprintf(stderr, "\r\033[K[%s] %lld/%lld loss %.4f  %.0f tok/s  ETA %lld:%02lld:%02lld",
          bar.c_str(), static_cast<long long>(step), static_cast<long long>(total), loss,
          tokens_per_second, static_cast<long long>(eta / 3600),
          static_cast<long long>((eta / 60) % 60), static_cast<long long>(eta % 60));
  fflush(stderr);
  progress_shown_ = true;
}

std::string ResultSummaryLine(const mesa::v1::ResultEvent& result) {
  const std::string source = absl::StrFormat(
      "checkpoint %s (step %d), %.2f s", result.checkpoint_path(), result.step(), result.seconds());
  if (result.completions_size() > 0) {
    int64_t tokens = 0;
    for (const mesa::v1::Completion& c : result.completions()) tokens += c.tokens_size();
    return absl::StrFormat(
        "result: %d completion(s), %d tokens; %s (the completions are in the job's result)",
        result.completions_size(), tokens, source);
  }
  const mesa::v1::EvalMetrics& e = result.eval();
  return absl::StrFormat(
      "result: val_loss %.4f, perplexity %.3f over %d tokens (%d batches), mean CG steps %.2f; %s "
      "(the whole result, per-position curves included, is in the job's result)",
      e.val_loss(), e.val_perplexity(), e.tokens(), e.batches(), e.cg_steps_mean(), source);
}

}  // namespace mesa::model
