#include "worker/events.h"

#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace mesa::worker {
namespace {

using Json = nlohmann::json;

// The first of `keys` present with a number value.
std::optional<double> Number(const Json& object, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto it = object.find(key);
    if (it != object.end() && it->is_number()) return it->get<double>();
  }
  return std::nullopt;
}

std::optional<int64_t> Integer(const Json& object, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto it = object.find(key);
    if (it != object.end() && it->is_number()) return static_cast<int64_t>(it->get<double>());
  }
  return std::nullopt;
}

std::string String(const Json& object, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto it = object.find(key);
    if (it != object.end() && it->is_string()) return it->get<std::string>();
  }
  return "";
}

EventType TypeOf(const std::string& name) {
  if (name == "step" || name == "progress" || name == "train") return EventType::kStep;
  if (name == "eval" || name == "validation" || name == "val") return EventType::kEval;
  if (name == "checkpoint") return EventType::kCheckpoint;
  if (name == "result" || name == "done" || name == "final") return EventType::kResult;
  if (name == "stopped" || name == "stop") return EventType::kStopped;
  if (name == "error" || name == "fatal") return EventType::kError;
  return EventType::kOther;
}

// Result fields that are not metrics.
bool IsReservedKey(const std::string& key) {
  return key == "event" || key == "type" || key == "time" || key == "t" || key == "step" ||
         key == "total_steps" || key == "final_loss" || key == "val_loss" ||
         key == "val_perplexity" || key == "checkpoint_path" || key == "path" ||
         key == "metrics" || key == "rank";
}

}  // namespace

absl::StatusOr<TrainerEvent> ParseEventLine(const std::string& line) {
  Json object = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded() || !object.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("not a JSON object: ", line.substr(0, 200)));
  }
  TrainerEvent event;
  event.type_name = String(object, {"event", "type"});
  if (event.type_name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("event line without \"event\" field: ", line.substr(0, 200)));
  }
  event.type = TypeOf(event.type_name);
  event.step = Integer(object, {"step"});
  event.total_steps = Integer(object, {"total_steps", "steps"});
  event.loss = Number(object, {"loss", "train_loss"});
  event.lr = Number(object, {"lr"});
  event.grad_norm = Number(object, {"grad_norm"});
  event.tokens_per_second = Number(object, {"tokens_per_second", "tokens_per_sec", "tok_per_s"});
  event.mfu = Number(object, {"mfu"});
  event.cg_steps_mean = Number(object, {"cg_steps_mean", "mean_cg_steps", "cg_steps"});
  event.eta_seconds = Number(object, {"eta_seconds", "eta_s", "eta"});
  event.val_loss = Number(object, {"val_loss"});
  event.val_perplexity = Number(object, {"val_perplexity", "perplexity", "val_ppl", "ppl"});
  event.final_loss = Number(object, {"final_loss"});
  event.path = String(object, {"path", "checkpoint_path", "checkpoint", "dir"});
  event.message = String(object, {"message", "reason", "error"});
  event.kind = String(object, {"kind", "failure_kind"});
  if (event.type == EventType::kResult) {
    if (auto it = object.find("metrics"); it != object.end() && it->is_object()) {
      for (const auto& [key, value] : it->items()) {
        if (value.is_number()) event.metrics[key] = value.get<double>();
      }
    }
    for (const auto& [key, value] : object.items()) {
      if (value.is_number() && !IsReservedKey(key)) event.metrics[key] = value.get<double>();
    }
  }
  return event;
}

void ApplyToProgress(const TrainerEvent& event, mesa::v1::Progress& progress) {
  if (event.step) progress.set_step(*event.step);
  if (event.total_steps) progress.set_total_steps(*event.total_steps);
  if (event.type != EventType::kStep) return;  // Only step events carry training figures.
  if (event.loss) progress.set_loss(static_cast<float>(*event.loss));
  if (event.lr) progress.set_lr(static_cast<float>(*event.lr));
  if (event.grad_norm) progress.set_grad_norm(static_cast<float>(*event.grad_norm));
  if (event.tokens_per_second) {
    progress.set_tokens_per_second(static_cast<float>(*event.tokens_per_second));
  }
  if (event.mfu) progress.set_mfu(static_cast<float>(*event.mfu));
  if (event.cg_steps_mean) progress.set_cg_steps_mean(static_cast<float>(*event.cg_steps_mean));
  if (event.eta_seconds) progress.set_eta_seconds(static_cast<float>(*event.eta_seconds));
}

void ApplyToResult(const TrainerEvent& event, mesa::v1::JobResult& result) {
  if (event.type != EventType::kResult && event.type != EventType::kEval) return;
  if (event.final_loss) result.set_final_loss(static_cast<float>(*event.final_loss));
  if (event.val_loss) result.set_val_loss(static_cast<float>(*event.val_loss));
  if (event.val_perplexity) result.set_val_perplexity(static_cast<float>(*event.val_perplexity));
  if (event.type == EventType::kResult && !event.path.empty()) {
    result.set_checkpoint_path(event.path);
  }
  for (const auto& [key, value] : event.metrics) (*result.mutable_metrics())[key] = value;
}

}  // namespace mesa::worker
