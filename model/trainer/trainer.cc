// The evaluation driver and the exit codes; training is training_run.cc.
#include "model/trainer/trainer.h"

#include "absl/strings/str_format.h"
#include "model/checkpoint/checkpoint.h"
#include "model/data/data_loader.h"
#include "model/trainer/evaluate.h"
#include "model/trainer/session.h"

namespace mesa::model {

mesa::v1::TrainerExitCode ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return mesa::v1::TRAINER_EXIT_OK;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return mesa::v1::TRAINER_EXIT_USER_ERROR;
    case absl::StatusCode::kAborted:
      return mesa::v1::TRAINER_EXIT_DIVERGED;
    default:
      return mesa::v1::TRAINER_EXIT_INFRA_ERROR;
  }
}

absl::StatusOr<RunResult> RunEvaluation(const JobConfig& config, const TrainerOptions& options,
                                        EventSink& events) {
  auto session_or = MakeSession(config, options);
  if (!session_or.ok()) return session_or.status();
  Session& s = *session_or;
  std::string source = config.eval.checkpoint;
  if (source.empty()) source = options.resume;
  if (source.empty()) source = CheckpointRoot(config, options);
  auto ckpt = LoadCheckpoint(source, config.model, s.net->layout(), /*want_optimizer=*/false);
  if (!ckpt.ok()) return ckpt.status();
  for (const std::string& reason : ckpt->skipped) {
    mesa::v1::TrainerEvent event;
    event.mutable_warning()->set_message("skipped corrupt checkpoint: " + reason);
    events.Emit(std::move(event));
    events.Log("skipped corrupt checkpoint: " + reason);
  }
  s.net->SetParamsFromHost(ckpt->params.data());
  auto loader = DataLoader::Open(config.data.val_paths, s.micro_batch, config.data.seq_len,
                                 s.data_rank, s.data_ranks);
  if (!loader.ok()) return loader.status();
  MesaSolve solve;
  // GLA layers read out with 0 CG steps whatever this says (MesaNet::LayerSolve).
  if (config.model.MesaLayers() == 0) {
    solve = {0, 0.0f};
  } else if (config.model.cg_tol > 0) {
    solve = {config.model.cg_max_steps, config.model.cg_tol};
  } else {
    solve = {config.model.cg_steps, 0.0f};
  }
  auto eval = Evaluate(*s.net, **loader, s.micro_batch, config.data.seq_len,
                       config.eval.max_batches, solve, s.comm.get(), s.slice);
  if (!eval.ok()) return eval.status();
  RunResult result;
  result.checkpoint_dir = ckpt->dir;
  result.final_loss = eval->loss;
  *result.result.mutable_eval() = eval->ToProto(config.eval.per_position);
  // The CG sweep: every setting on the same batches (a fresh loader reads them again).
  for (const EvalSettings::CgSetting& setting : config.eval.cg_sweep) {
    auto again = DataLoader::Open(config.data.val_paths, s.micro_batch, config.data.seq_len,
                                  s.data_rank, s.data_ranks);
    if (!again.ok()) return again.status();
    const MesaSolve sweep_solve{setting.max_steps, setting.tolerance};
    auto point = Evaluate(*s.net, **again, s.micro_batch, config.data.seq_len,
                          config.eval.max_batches, sweep_solve, s.comm.get(), s.slice);
    if (!point.ok()) return point.status();
    mesa::v1::CgSweepPoint* p = result.result.mutable_eval()->add_cg_sweep();
    p->set_cg_mode(setting.tolerance > 0 ? "tolerance" : "fixed");
    p->set_cg_max_steps(setting.max_steps);
    p->set_cg_tol(setting.tolerance);
    p->set_val_loss(point->loss);
    p->set_val_perplexity(point->perplexity);
    p->set_cg_steps_mean(point->cg_steps_mean);
    events.Log(absl::StrFormat(
        "CG sweep %s %d%s: loss %.4f, mean CG steps %.2f", p->cg_mode(), setting.max_steps,
        setting.tolerance > 0 ? absl::StrFormat(" tol %g", setting.tolerance) : std::string(),
        point->loss, point->cg_steps_mean));
  }
  result.result.set_checkpoint_path(ckpt->dir);
  result.result.set_step(ckpt->state.step);
  mesa::v1::TrainerEvent event;
  *event.mutable_result() = result.result;
  events.Emit(std::move(event));
  events.Log(absl::StrFormat("eval of %s: loss %.4f, perplexity %.3f, mean CG steps %.2f",
                             ckpt->dir, eval->loss, eval->perplexity, eval->cg_steps_mean));
  return result;
}

}  // namespace mesa::model
