#include "worker/events.h"

namespace mesa::worker {
namespace {

void ApplyEvalMetrics(const mesa::v1::EvalMetrics& eval, mesa::v1::JobResult& result) {
  result.set_val_loss(static_cast<float>(eval.val_loss()));
  result.set_val_perplexity(static_cast<float>(eval.val_perplexity()));
}

}  // namespace

void ApplyStep(const mesa::v1::StepEvent& step, mesa::v1::Progress& progress) {
  progress.set_step(step.step());
  if (step.total_steps() > 0) progress.set_total_steps(step.total_steps());
  if (step.skipped()) return;  // No update was made: the last good figures stand.
  progress.set_loss(static_cast<float>(step.loss()));
  progress.set_lr(static_cast<float>(step.lr()));
  progress.set_grad_norm(static_cast<float>(step.grad_norm()));
  progress.set_tokens_per_second(static_cast<float>(step.tokens_per_second()));
  progress.set_mfu(static_cast<float>(step.mfu()));
  progress.set_cg_steps_mean(static_cast<float>(step.cg_steps_mean()));
  progress.set_eta_seconds(static_cast<float>(step.eta_seconds()));
  progress.set_tokens(step.tokens());
}

void ApplyEval(const mesa::v1::EvalEvent& eval, mesa::v1::Progress& progress,
               mesa::v1::JobResult& result) {
  progress.set_step(eval.step());
  ApplyEvalMetrics(eval.metrics(), result);
}

void ApplyResult(const mesa::v1::ResultEvent& event, mesa::v1::JobResult& result) {
  auto& metrics = *result.mutable_metrics();
  if (event.final_loss() != 0) result.set_final_loss(static_cast<float>(event.final_loss()));
  if (!event.checkpoint_path().empty()) result.set_checkpoint_path(event.checkpoint_path());
  metrics["steps"] = static_cast<double>(event.step());
  if (event.skipped_steps() > 0) metrics["skipped_steps"] = event.skipped_steps();
  if (event.tokens() > 0) metrics["tokens"] = static_cast<double>(event.tokens());
  if (event.seconds() > 0) metrics["seconds"] = event.seconds();
  result.mutable_completions()->CopyFrom(event.completions());
  if (event.has_eval()) {
    const mesa::v1::EvalMetrics& eval = event.eval();
    ApplyEvalMetrics(eval, result);
    metrics["val_tokens"] = static_cast<double>(eval.tokens());
    metrics["batches"] = static_cast<double>(eval.batches());
    metrics["cg_steps_mean"] = eval.cg_steps_mean();
    metrics["cg_tol"] = eval.cg_tol();
    metrics["cg_max_steps"] = eval.cg_max_steps();
    result.mutable_cg_sweep()->CopyFrom(eval.cg_sweep());
    // Evaluation jobs: every dataset in full (curves included), their means and the CG figures.
    result.mutable_datasets()->CopyFrom(eval.datasets());
    result.mutable_internals()->CopyFrom(eval.internals());
    result.mutable_tasks()->CopyFrom(eval.tasks());
    result.mutable_task_groups()->CopyFrom(eval.task_groups());
    result.mutable_task_partials()->CopyFrom(eval.task_partials());
    if (eval.has_averaged_curve()) *result.mutable_averaged_curve() = eval.averaged_curve();
    if (eval.datasets_size() > 0) {
      result.set_average_loss(eval.average_loss());
      result.set_average_perplexity(eval.average_perplexity());
      mesa::v1::CgStats& cg = *result.mutable_cg();
      cg.set_cg_mode(eval.cg_mode());
      cg.set_cg_max_steps(eval.cg_max_steps());
      cg.set_cg_tol(static_cast<float>(eval.cg_tol()));
      cg.set_cg_steps_mean(eval.cg_steps_mean());
    }
  }
}

}  // namespace mesa::worker
