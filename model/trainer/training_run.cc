// The training driver behind RunTraining (trainer.h): one TrainingRun per call, built in the order
// that validates before allocating, then the step loop.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file_util.h"
#include "model/checkpoint/checkpoint.h"
#include "model/comm/communicator.h"
#include "model/data/data_loader.h"
#include "model/optimizer/adamw.h"
#include "model/trainer/evaluate.h"
#include "model/trainer/resume_policy.h"
#include "model/trainer/session.h"
#include "model/trainer/step_trace.h"
#include "model/trainer/trainer.h"
#include "spec/tokenizer_record.h"

namespace mesa::model {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

#define MESA_RETURN_IF_ERROR(expr)     \
  do {                                 \
    absl::Status status_ = (expr);     \
    if (!status_.ok()) return status_; \
  } while (0)

// What one optimizer step computed, before the update.
struct StepResult {
  bool finite = true;  // every rank's losses and the gradient norm
  double loss = 0;     // mean over the step's valid targets of every rank
  double grad_norm = NAN;
  float* grads = nullptr;  // summed over ranks (ZeRO-1: valid in this rank's shard)
  double cg_forward = 0, cg_backward = 0;
  int grad_buckets = 0;
  bool stop_after = false;  // some rank was asked to stop before this step (all agree)
};

class TrainingRun {
 public:
  TrainingRun(const JobConfig& config, const TrainerOptions& options, EventSink& events,
              Session session)
      : config_(config),
        options_(options),
        events_(events),
        s_(std::move(session)),
        net_(*s_.net),
        backend_(*s_.backend),
        zero1_(config.optimizer.zero_stage == 1 && s_.comm->world_size() > 1),
        shards_{net_.num_params(), zero1_ ? s_.comm->world_size() : 1},
        overlap_(s_.comm->world_size() > 1 && options.grad_bucket_bytes > 0),
        bucket_elements_(
            std::max<int64_t>(1, options.grad_bucket_bytes / static_cast<int64_t>(sizeof(float)))),
        train_solve_{config.model.cg_steps, 0.0f},
        root_(CheckpointRoot(config, options)),
        trace_(std::make_unique<StepTrace>(config.training.profile_start_step,
                                           config.training.profile_steps, options.rank, TracePath(),
                                           &backend_)) {}

  ~TrainingRun() {
    if (zero_buffer_ != nullptr) backend_.Free(zero_buffer_);
  }

  absl::Status Open();
  absl::Status Restore();
  absl::Status CheckCheckpointTokenizer(absl::string_view field, const CheckpointData& ckpt) const;
  void AnnounceStart();
  absl::StatusOr<RunResult> Loop();

 private:
  // Reads the step's micro-batches; the valid-target count and the stop votes are summed over
  // ranks.
  absl::Status ReadBatches(double* valid_targets, bool* stop_after);
  // Forward and backward of every micro-batch, the finite vote, and the gradient reduction.
  absl::StatusOr<StepResult> ComputeStep();
  absl::Status ReduceGradients(std::optional<GradientBucketer>& bucketer, StepResult& step);
  absl::Status UpdateWeights(const StepResult& step, float lr);
  // A skipped step; Aborted after too many in a row.
  absl::Status SkipStep();
  void ReportStep(const StepResult& step, float lr, Clock::time_point step_start);
  absl::Status MaybeEvaluate();
  absl::StatusOr<EvalResult> RunEval();
  bool eval_shortfall_reported_ = false;
  absl::StatusOr<std::string> Save(const char* why);
  absl::StatusOr<RunResult> Finish();
  bool StopRequestedHere() const {
    return options_.stop_requested != nullptr && options_.stop_requested->load();
  }

  const JobConfig& config_;
  const TrainerOptions& options_;
  EventSink& events_;
  const Clock::time_point start_ = Clock::now();
  Session s_;
  MesaNet& net_;
  Backend& backend_;
  // ZeRO-1 (optimizer.zero_stage 1, several ranks): each rank keeps the AdamW moments of its
  // shard only (contiguous equal chunks, ShardLayout); gradients are summed (all-reduced during
  // the backward with overlap_, else reduce-scattered after it), each rank updates its shard of the
  // weights, and the weights are all-gathered (docs/distributed.md).
  const bool zero1_;
  const ShardLayout shards_;
  // Overlap the gradient all-reduce with the last micro-batch's backward pass (plain data
  // parallelism and ZeRO-1 alike; off: one blocking all-reduce, or ZeRO-1's reduce-scatter).
  const bool overlap_;
  const int64_t bucket_elements_;
  const MesaSolve train_solve_;
  const std::string root_;
  // training.profile (never tracing without it): <root>/profile/trace-step<S>-rank<R>.json.
  std::string TracePath() const {
    return absl::StrCat(root_, "/profile/trace-step", config_.training.profile_start_step, "-rank",
                        options_.rank, ".json");
  }
  const std::unique_ptr<StepTrace> trace_;
  bool trace_logged_ = false;
  std::unique_ptr<BatchSource> train_;
  // With data.val_path (or data.synthetic's evaluation examples): every eval_interval steps and at
  // the end.
  std::unique_ptr<BatchSource> val_;
  std::unique_ptr<AdamW> adamw_;
  float* zero_buffer_ = nullptr;  // reduce-scatter / all-gather buffer (ZeRO-1), padded

  TrainState state_;
  RunResult result_;
  int consecutive_nonfinite_ = 0;
  int64_t steps_this_run_ = 0;
  double last_loss_ = NAN;
  std::vector<std::vector<int32_t>> tokens_, targets_;  // this rank's slice of each micro-batch
  std::vector<int32_t> read_tokens_, read_targets_;     // the whole sequences
  Clock::time_point window_start_ = Clock::now();
  int64_t window_tokens_ = 0;
};

absl::Status TrainingRun::Open() {
  if (options_.rank == 0) {
    // A checkpoint directory the trainer cannot write to is the job's fault, known before the first
    // step; a write that fails later (disk full, I/O error) is the machine's (Save()).
    std::error_code error;
    const bool existed = std::filesystem::exists(root_, error);
    std::filesystem::create_directories(root_, error);
    absl::Status probe =
        error ? absl::Status(absl::StatusCode::kInternal, error.message())
              : base::WriteFileAtomically(root_ + "/.write_test", "checkpoints go here\n");
    if (!probe.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint.dir \"", root_, "\" cannot be written: ", probe.message()));
    }
    std::filesystem::remove(root_ + "/.write_test", error);
    // Leave no trace until there is a checkpoint to keep (a run that fails early has none).
    if (!existed) std::filesystem::remove(root_, error);
  }
  const DataSettings& data = config_.data;
  // Every rank of a context-parallel group reads the same sequences and runs its slice of them.
  if (data.synthetic.has_value()) {
    train_ = SyntheticStream(config_, /*eval=*/false, s_.micro_batch, s_.data_rank, s_.data_ranks);
    val_ = SyntheticStream(config_, /*eval=*/true, s_.micro_batch, s_.data_rank, s_.data_ranks);
  } else {
    auto train = DataLoader::Open(data.train_paths, s_.micro_batch, data.seq_len, s_.data_rank,
                                  s_.data_ranks);
    if (!train.ok()) return train.status();
    train_ = *std::move(train);
  }
  if (!data.val_paths.empty()) {
    auto val =
        DataLoader::Open(data.val_paths, s_.micro_batch, data.seq_len, s_.data_rank, s_.data_ranks);
    if (!val.ok()) return val.status();
    val_ = *std::move(val);
  }
  const int shard_rank = zero1_ ? s_.comm->rank() : 0;
  adamw_ = std::make_unique<AdamW>(config_.optimizer, net_.layout(), &backend_,
                                   shards_.begin(shard_rank), shards_.end(shard_rank));
  if (zero1_) zero_buffer_ = backend_.AllocateFloats(shards_.padded_size());
  tokens_.resize(data.grad_accum_steps);
  targets_.resize(data.grad_accum_steps);
  return absl::OkStatus();
}

// A checkpoint written with another tokenizer (checkpoints before records carry none: taken as
// they are) is the user's mistake.
absl::Status TrainingRun::CheckCheckpointTokenizer(absl::string_view field,
                                                   const CheckpointData& ckpt) const {
  if (ckpt.state.tokenizer_json.empty()) return absl::OkStatus();
  absl::StatusOr<spec::TokenizerRecord> found =
      spec::TokenizerRecordFromJson(ckpt.state.tokenizer_json, ckpt.dir);
  if (!found.ok()) return found.status();
  return spec::CompareTokenizers(field, config_.data.tokenizer, *found,
                                 absl::StrCat("the checkpoint ", ckpt.dir, " was trained with"));
}

absl::Status TrainingRun::Restore() {
  // Explicit --resume, else the newest valid checkpoint under our own root when the resume policy
  // says so (a retry of this job always; another run's per checkpoint.resume), else
  // checkpoint.init_from (weights only), else the seed.
  std::string resume_from = options_.resume;
  if (resume_from.empty()) {
    absl::StatusOr<TrainState> found = PeekCheckpointState(root_);
    absl::StatusOr<ResumeDecision> decision =
        DecideResume(config_.checkpoint.resume, options_.run_id, config_.training.steps,
                     found.ok() ? &*found : nullptr, root_);
    if (!decision.ok()) return decision.status();
    if (decision->resume) resume_from = root_;
    if (!decision->note.empty()) events_.Log(decision->note);
  }
  if (!resume_from.empty()) {
    auto ckpt = LoadCheckpoint(resume_from, config_.model, net_.layout(), /*want_optimizer=*/true);
    if (!ckpt.ok()) return ckpt.status();
    MESA_RETURN_IF_ERROR(CheckCheckpointTokenizer("--resume / checkpoint.resume", *ckpt));
    absl::StatusOr<bool> resets =
        ResumedResetAtBos(config_.data, ckpt->state.reset_at_bos, ckpt->dir);
    if (!resets.ok()) return resets.status();
    net_.set_reset_at_bos(*resets);
    for (const std::string& reason : ckpt->skipped) {
      events_.Log("skipped corrupt checkpoint: " + reason);
    }
    net_.SetParamsFromHost(ckpt->params.data());
    if (ckpt->has_optimizer) {
      // Checkpoints hold the whole moments whatever the rank count; take this rank's range.
      backend_.CopyToDevice(adamw_->m(), ckpt->exp_avg.data() + adamw_->shard_begin(),
                            sizeof(float) * adamw_->size());
      backend_.CopyToDevice(adamw_->v(), ckpt->exp_avg_sq.data() + adamw_->shard_begin(),
                            sizeof(float) * adamw_->size());
    }
    state_ = ckpt->state;  // its seed and spec are replaced by this run's below
    MESA_RETURN_IF_ERROR(train_->SetPosition(state_.data));
    events_.Log(absl::StrCat("resumed from ", ckpt->dir, " at step ", state_.step));
    mesa::v1::TrainerEvent event;
    event.mutable_resumed()->set_step(state_.step);
    event.mutable_resumed()->set_checkpoint(ckpt->dir);
    for (const std::string& reason : ckpt->skipped) event.mutable_resumed()->add_skipped(reason);
    events_.Emit(std::move(event));
  } else if (!config_.checkpoint.init_from.empty()) {
    auto ckpt = LoadCheckpoint(config_.checkpoint.init_from, config_.model, net_.layout(), false);
    if (!ckpt.ok()) return ckpt.status();
    MESA_RETURN_IF_ERROR(CheckCheckpointTokenizer("checkpoint.init_from", *ckpt));
    net_.SetParamsFromHost(ckpt->params.data());
    events_.Log(absl::StrCat("initialised weights from ", ckpt->dir));
  } else {
    net_.InitializeParams(config_.training.seed);
    MESA_RETURN_IF_ERROR(s_.comm->Broadcast(net_.params(), net_.num_params(), 0));
  }
  state_.seed = config_.training.seed;
  state_.spec_json = SpecJson(config_);
  state_.run_id = options_.run_id;
  state_.tokenizer_json = spec::TokenizerRecordJson(config_.data.tokenizer);
  state_.reset_at_bos = net_.config().reset_at_bos;
  return absl::OkStatus();
}

void TrainingRun::AnnounceStart() {
  const DataSettings& data = config_.data;
  events_.Log(absl::StrFormat(
      "model %s: %d layers, d_model %d, %d heads x %d, %lld parameters; batch %d x %d (%d micro-"
      "batches of %d)%s%s, %lld steps, %s (%s activations) with %d threads%s",
      LayerMixersName(config_.model).c_str(), config_.model.n_layers, config_.model.d_model,
      config_.model.n_heads, config_.model.head_dim,
      static_cast<long long>(net_.layout().num_values()), data.batch_size, data.seq_len,
      data.grad_accum_steps, s_.micro_batch,
      s_.slice.count > 1
          ? absl::StrFormat(
                ", each sequence in %d context-parallel slices of %d tokens (this rank: "
                "slice %d)",
                s_.slice.count, data.seq_len / s_.slice.count, s_.slice.index)
          : std::string(),
      net_.config().reset_at_bos ? ", documents reset at BOS" : "",
      static_cast<long long>(config_.training.steps), backend_.Name(),
      ActivationTypeName(backend_.activation_type()), s_.threads,
      overlap_ ? absl::StrFormat("; gradient all-reduce overlapped with the backward, %.3g MiB "
                                 "buckets",
                                 bucket_elements_ * 4.0 / (1 << 20))
               : std::string()));
  mesa::v1::TrainerEvent event;
  mesa::v1::StartEvent& start = *event.mutable_start();
  start.set_step(state_.step);
  start.set_communicator(s_.comm->name());
  start.set_total_steps(config_.training.steps);
  start.set_parameters(net_.layout().num_values());
  start.set_device(backend_.Name());
  start.set_threads(s_.threads);
  start.set_world_size(options_.world_size);
  start.set_zero_stage(zero1_ ? 1 : 0);
  start.set_context_parallel(s_.slice.count);
  start.set_deterministic(config_.training.deterministic);
  start.set_precision(PrecisionName(config_.training.precision));
  start.set_activations(ActivationTypeName(backend_.activation_type()));
  start.set_grad_overlap(overlap_);
  start.set_grad_bucket_bytes(overlap_ ? bucket_elements_ * 4 : 0);
  start.set_optimizer_state_bytes(2 * sizeof(float) * adamw_->size());
  events_.Emit(std::move(event));
}

absl::Status TrainingRun::ReadBatches(double* valid_targets, bool* stop_after) {
  // Every micro-batch is read first: the loss is normalised by the step's token count. The stop
  // request is reduced with it, so every rank stops after the same step.
  double step_counts[2] = {0, StopRequestedHere() ? 1.0 : 0.0};  // valid targets, stop votes
  for (size_t a = 0; a < tokens_.size(); ++a) {
    MESA_RETURN_IF_ERROR(train_->Next(&read_tokens_, &read_targets_));
    TakeSlice(read_tokens_, s_.micro_batch, config_.data.seq_len, s_.slice, &tokens_[a]);
    TakeSlice(read_targets_, s_.micro_batch, config_.data.seq_len, s_.slice, &targets_[a]);
    for (int32_t t : targets_[a]) step_counts[0] += t != config_.model.bos_token;
  }
  MESA_RETURN_IF_ERROR(s_.comm->AllReduce(step_counts, 2, ReduceOp::kSum));
  *valid_targets = step_counts[0];
  *stop_after = step_counts[1] > 0;
  return absl::OkStatus();
}

absl::StatusOr<StepResult> TrainingRun::ComputeStep() {
  StepResult step;
  double valid_targets = 0;
  {
    auto phase = trace_->Scope("read batches");
    MESA_RETURN_IF_ERROR(ReadBatches(&valid_targets, &step.stop_after));
  }
  const float loss_scale = valid_targets > 0 ? static_cast<float>(1.0 / valid_targets) : 0.0f;
  const int accum = static_cast<int>(tokens_.size());
  net_.ZeroGrads();
  // Collectives are matched by the order ranks issue them, so every rank must issue the same
  // ones even when only some see a non-finite loss. The loss sum and "some rank saw a
  // non-finite loss" are reduced once per step, after the last forward and BEFORE the last
  // backward: a rank whose loss went non-finite stops computing and votes at once; the others
  // vote after their last forward. Every rank then knows, before any gradient bucket is sent,
  // whether the step survives; if not, no rank runs the last backward or reduces gradients
  // (the step is skipped everywhere), so no rank waits for a bucket another never sends.
  // Under context parallelism every micro-batch is voted on: the backward hands state gradients
  // between the slices of a sequence, so none may start one that another slice skips.
  const bool vote_each = s_.slice.count > 1;
  bool finite = true;  // this rank's losses until the vote, every rank's after it
  bool voted = false;  // on the current micro-batch
  double local_loss_sum = 0, loss_sum = 0;  // this rank's, every rank's (after the vote)
  auto vote = [&]() -> absl::Status {
    double step_sums[2] = {local_loss_sum, finite ? 0.0 : 1.0};
    MESA_RETURN_IF_ERROR(s_.comm->AllReduce(step_sums, 2, ReduceOp::kSum));
    loss_sum = step_sums[0];
    finite = step_sums[1] == 0;
    voted = true;
    return absl::OkStatus();
  };
  std::optional<GradientBucketer> bucketer;
  for (int a = 0; a < accum; ++a) {
    voted = false;
    std::optional<StepTrace::Phase> forward(trace_->Scope("forward"));
    auto stats = net_.Forward(tokens_[a].data(), targets_[a].data(), s_.micro_batch, train_solve_);
    forward.reset();
    if (!stats.ok()) return stats.status();
    const bool injected = options_.nonfinite_forward && options_.nonfinite_forward(state_.step, a);
    if (!stats->finite || injected) {
      finite = false;
      break;
    }
    local_loss_sum += stats->loss_sum;
    step.cg_forward += stats->cg_steps_mean / accum;
    MesaNet::GradsReadyFn on_grads_ready;
    if (a == accum - 1 || vote_each) {
      MESA_RETURN_IF_ERROR(vote());
      if (!finite) break;
    }
    if (a == accum - 1) {
      // Only the last micro-batch reduces: earlier ones only accumulate into grads().
      if (overlap_) {
        bucketer.emplace(s_.comm.get(), net_.grads(), net_.num_params(), bucket_elements_);
        on_grads_ready = [&bucketer](int64_t offset, int64_t n) {
          return bucketer->MarkReady(offset, n);
        };
      }
    }
    auto backward = trace_->Scope("backward");
    auto cg = net_.Backward(options_.inject_nonfinite ? NAN : loss_scale, on_grads_ready);
    if (!cg.ok()) return cg.status();
    step.cg_backward += *cg / accum;
  }
  if (!voted) MESA_RETURN_IF_ERROR(vote());
  step.finite = finite;
  step.loss = valid_targets > 0 ? loss_sum / valid_targets : 0.0;
  {
    auto phase = trace_->Scope("reduce gradients");
    MESA_RETURN_IF_ERROR(ReduceGradients(bucketer, step));
  }
  step.finite = step.finite && std::isfinite(step.loss) && std::isfinite(step.grad_norm);
  return step;
}

absl::Status TrainingRun::ReduceGradients(std::optional<GradientBucketer>& bucketer,
                                          StepResult& step) {
  // Gradients are summed over ranks (each rank's loss is already scaled by 1 / the global token
  // count), before the norm and clipping: the result is one process's gradient of the whole
  // batch. With overlap the buckets already in flight are completed (ZeRO-1 included: every rank
  // then holds the whole sum and reads its shard; twice a reduce-scatter's bytes, but during the
  // backward, where the equal shards would not line up with the per-layer ranges it finishes).
  // Blocking ZeRO-1 reduce-scatters: the sum lands only in this rank's shard. Either way ZeRO-1's
  // norm is the all-reduced sum of the shards' sums of squares, so both give the same bits. A
  // skipped step (finite is the same on every rank) reduces nothing.
  step.grads = net_.grads();
  if (!step.finite) return absl::OkStatus();
  if (bucketer.has_value()) {
    MESA_RETURN_IF_ERROR(bucketer->Finish());
    step.grad_buckets = bucketer->buckets_sent();
  } else if (zero1_) {
    backend_.Copy(zero_buffer_, net_.grads(), net_.num_params());
    if (shards_.padded_size() > net_.num_params()) {
      backend_.Zero(zero_buffer_ + net_.num_params(), shards_.padded_size() - net_.num_params());
    }
    MESA_RETURN_IF_ERROR(s_.comm->ReduceScatter(zero_buffer_, shards_, ReduceOp::kSum));
    step.grads = zero_buffer_;  // same offsets as net.grads() over [0, num_params)
  } else {
    MESA_RETURN_IF_ERROR(s_.comm->AllReduce(net_.grads(), net_.num_params(), ReduceOp::kSum));
  }
  if (zero1_) {
    double sum_sq = adamw_->ShardSumOfSquares(step.grads);
    MESA_RETURN_IF_ERROR(s_.comm->AllReduce(&sum_sq, 1, ReduceOp::kSum));
    step.grad_norm = std::sqrt(sum_sq);
  } else {
    step.grad_norm = adamw_->GradNorm(step.grads);
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::SkipStep() {
  ++consecutive_nonfinite_;
  ++state_.skipped_steps;
  ++state_.step;  // the batch is consumed; the schedule moves on
  ++steps_this_run_;
  mesa::v1::TrainerEvent event;
  event.mutable_step()->set_step(state_.step);
  event.mutable_step()->set_total_steps(config_.training.steps);
  event.mutable_step()->set_skipped(true);
  event.mutable_step()->set_skipped_steps(state_.skipped_steps);
  events_.Emit(std::move(event));
  events_.Log(absl::StrCat("step ", state_.step, ": non-finite loss or gradients, skipped (",
                           consecutive_nonfinite_, " in a row)"));
  if (consecutive_nonfinite_ >= options_.max_consecutive_nonfinite) {
    return absl::AbortedError(
        absl::StrCat("training diverged: non-finite loss or gradients in ", consecutive_nonfinite_,
                     " consecutive steps (last at step ", state_.step,
                     "); lower optimizer.lr or raise optimizer.warmup_steps"));
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::UpdateWeights(const StepResult& step, float lr) {
  consecutive_nonfinite_ = 0;
  adamw_->Update(net_.params(), step.grads, step.grad_norm, lr, state_.step - state_.skipped_steps);
  if (zero1_) {
    // Every rank updated its shard of the weights; gather them all.
    if (adamw_->size() > 0) {
      backend_.Copy(zero_buffer_ + adamw_->shard_begin(), net_.params() + adamw_->shard_begin(),
                    adamw_->size());
    }
    MESA_RETURN_IF_ERROR(s_.comm->AllGather(zero_buffer_, shards_));
    backend_.Copy(net_.params(), zero_buffer_, net_.num_params());
  }
  const int64_t tokens_per_step = int64_t{config_.data.batch_size} * config_.data.seq_len;
  ++state_.step;
  ++steps_this_run_;
  last_loss_ = step.loss;
  state_.tokens_seen += tokens_per_step;
  window_tokens_ += tokens_per_step;
  return absl::OkStatus();
}

void TrainingRun::ReportStep(const StepResult& step, float lr, Clock::time_point step_start) {
  const int64_t total_steps = config_.training.steps;
  if (state_.step % config_.training.log_interval != 0 && state_.step != total_steps) return;
  const int64_t tokens_per_step = int64_t{config_.data.batch_size} * config_.data.seq_len;
  // MFU counts model FLOPs; the CG iterations are reported separately (mfu_with_cg).
  const double peak =
      PeakFlops(backend_.Name(), s_.threads, options_.peak_flops) * options_.world_size;
  const double elapsed = Seconds(window_start_);
  const double tps = elapsed > 0 ? window_tokens_ / elapsed : 0;
  const double eta = tps > 0 ? (total_steps - state_.step) * tokens_per_step / tps : 0;
  mesa::v1::TrainerEvent event;
  mesa::v1::StepEvent& e = *event.mutable_step();
  e.set_step(state_.step);
  e.set_total_steps(total_steps);
  e.set_loss(step.loss);
  e.set_lr(lr);
  e.set_grad_norm(step.grad_norm);
  e.set_tokens_per_second(tps);
  e.set_mfu(tps * net_.TrainFlopsPerToken(0) / peak);
  e.set_mfu_with_cg(tps * net_.TrainFlopsPerToken(config_.model.cg_steps) / peak);
  e.set_cg_steps_mean(step.cg_forward);
  e.set_cg_steps_mean_backward(step.cg_backward);
  e.set_grad_buckets(step.grad_buckets);
  e.set_step_seconds(Seconds(step_start));
  e.set_tokens(state_.tokens_seen);
  e.set_eta_seconds(eta);
  e.set_skipped_steps(state_.skipped_steps);
  events_.Emit(std::move(event));
  events_.Progress(state_.step, total_steps, step.loss, tps, eta);
  if (!isatty(STDERR_FILENO)) {
    events_.Log(absl::StrFormat("step %lld/%lld loss %.4f lr %.3g grad_norm %.3f %.0f tok/s",
                                static_cast<long long>(state_.step),
                                static_cast<long long>(total_steps), step.loss, lr, step.grad_norm,
                                tps));
  }
  window_start_ = Clock::now();
  window_tokens_ = 0;
}

absl::StatusOr<EvalResult> TrainingRun::RunEval() {
  MESA_RETURN_IF_ERROR(val_->SetPosition({}));
  absl::StatusOr<EvalResult> eval =
      Evaluate(net_, *val_, s_.micro_batch, config_.data.seq_len, config_.training.eval_batches,
               train_solve_, s_.comm.get(), /*score_accuracy=*/false, s_.slice);
  // A validation set smaller than asked for is evaluated whole, and said so once (not silently).
  if (eval.ok() && !eval_shortfall_reported_ && config_.training.eval_batches > 0 &&
      eval->batches < config_.training.eval_batches) {
    eval_shortfall_reported_ = true;
    const std::string message = absl::StrFormat(
        "training.eval_batches is %d, but the validation data holds only %d micro-batches of %d x "
        "%d tokens: each evaluation uses those %d",
        config_.training.eval_batches, eval->batches, s_.micro_batch, config_.data.seq_len,
        eval->batches);
    mesa::v1::TrainerEvent event;
    event.mutable_warning()->set_message(message);
    events_.Emit(std::move(event));
    events_.Log(message);
  }
  return eval;
}

absl::Status TrainingRun::MaybeEvaluate() {
  if (val_ == nullptr || config_.training.eval_interval <= 0 ||
      state_.step % config_.training.eval_interval != 0 || state_.step >= config_.training.steps) {
    return absl::OkStatus();
  }
  auto eval = RunEval();
  if (!eval.ok()) return eval.status();
  mesa::v1::TrainerEvent event;
  event.mutable_eval()->set_step(state_.step);
  *event.mutable_eval()->mutable_metrics() = eval->ToProto(false);
  events_.Emit(std::move(event));
  events_.Log(absl::StrFormat("step %lld: val loss %.4f, perplexity %.2f",
                              static_cast<long long>(state_.step), eval->loss, eval->perplexity));
  return absl::OkStatus();
}

absl::StatusOr<std::string> TrainingRun::Save(const char* why) {
  state_.data = train_->position();
  std::vector<float> params(net_.num_params()), m(net_.num_params()), v(net_.num_params());
  net_.GetParamsToHost(params.data());
  if (zero1_) {
    // Gathered, so a checkpoint is the same file whatever the rank count and resumes on any.
    for (auto [moment, host] : {std::pair{adamw_->m(), &m}, std::pair{adamw_->v(), &v}}) {
      if (adamw_->size() > 0) {
        backend_.Copy(zero_buffer_ + adamw_->shard_begin(), moment, adamw_->size());
      }
      MESA_RETURN_IF_ERROR(s_.comm->AllGather(zero_buffer_, shards_));
      backend_.CopyToHost(host->data(), zero_buffer_, sizeof(float) * host->size());
    }
  } else {
    backend_.CopyToHost(m.data(), adamw_->m(), sizeof(float) * m.size());
    backend_.CopyToHost(v.data(), adamw_->v(), sizeof(float) * v.size());
  }
  const auto t0 = Clock::now();
  MESA_RETURN_IF_ERROR(s_.comm->Barrier());
  if (options_.rank != 0) return std::string();
  auto dir = SaveCheckpoint(root_, config_.model, net_.layout(), params.data(), m.data(), v.data(),
                            state_, config_.checkpoint.keep_last);
  if (!dir.ok()) {
    // The directory was writable at the start: a failure now (disk full, I/O error, the storage
    // went away) is the machine's, and a retry elsewhere resumes from the last good checkpoint.
    return absl::UnavailableError(
        absl::StrCat("writing checkpoint of step ", state_.step, ": ", dir.status().message()));
  }
  mesa::v1::TrainerEvent event;
  event.mutable_checkpoint()->set_step(state_.step);
  event.mutable_checkpoint()->set_path(*dir);
  event.mutable_checkpoint()->set_reason(why);
  event.mutable_checkpoint()->set_seconds(Seconds(t0));
  events_.Emit(std::move(event));
  events_.Log(absl::StrCat("checkpoint ", *dir, " (", why, ")"));
  return dir;
}

absl::StatusOr<RunResult> TrainingRun::Loop() {
  const int64_t total_steps = config_.training.steps;
  while (state_.step < total_steps) {
    const auto step_start = Clock::now();
    const float lr = LearningRate(config_.optimizer, state_.step, total_steps);
    trace_->BeginStep(state_.step + 1);
    auto step = ComputeStep();
    if (!step.ok()) return step.status();
    if (step->finite) {
      {
        auto phase = trace_->Scope("optimizer");
        MESA_RETURN_IF_ERROR(UpdateWeights(*step, lr));
      }
      ReportStep(*step, lr, step_start);
    } else {
      MESA_RETURN_IF_ERROR(SkipStep());
    }
    if (options_.crash_after_steps >= 0 && steps_this_run_ >= options_.crash_after_steps) {
      result_.steps_done = state_.step;
      result_.final_loss = last_loss_;
      return result_;  // as if killed: no checkpoint, no events
    }
    {
      auto phase = trace_->Scope("evaluate");
      MESA_RETURN_IF_ERROR(MaybeEvaluate());
    }
    // One process stops right after the step in which the request arrived; several ranks stop
    // after the first step whose reduction saw a request (all ranks agree on it).
    const bool stop = step->stop_after || (s_.comm->world_size() == 1 && StopRequestedHere());
    if (stop ||
        (config_.checkpoint.interval_steps > 0 &&
         state_.step % config_.checkpoint.interval_steps == 0 && state_.step < total_steps)) {
      auto phase = trace_->Scope("checkpoint");
      auto dir = Save(stop ? "stop" : "interval");
      if (!dir.ok()) return dir.status();
      result_.checkpoint_dir = *dir;
    }
    if (absl::Status s = trace_->EndStep(); !s.ok()) {
      events_.Log(absl::StrCat("warning: training.profile: ", s.message()));
    } else if (trace_->done() && !trace_logged_) {
      trace_logged_ = true;
      events_.Log(
          absl::StrCat("profile of steps ", config_.training.profile_start_step, "-",
                       config_.training.profile_start_step + config_.training.profile_steps - 1,
                       " written to ", TracePath()));
    }
    if (stop) {
      mesa::v1::TrainerEvent event;
      event.mutable_stopped()->set_step(state_.step);
      event.mutable_stopped()->set_checkpoint(result_.checkpoint_dir);
      event.mutable_stopped()->set_reason("SIGTERM");
      events_.Emit(std::move(event));
      events_.Log(absl::StrCat("stopped at step ", state_.step, " on request"));
      result_.outcome = RunOutcome::kStopped;
      result_.steps_done = state_.step;
      result_.final_loss = last_loss_;
      return result_;
    }
  }
  return Finish();
}

absl::StatusOr<RunResult> TrainingRun::Finish() {
  auto dir = Save("final");
  if (!dir.ok()) return dir.status();
  result_.checkpoint_dir = *dir;
  result_.steps_done = state_.step;
  result_.final_loss = last_loss_;
  mesa::v1::ResultEvent& r = result_.result;
  r.set_final_loss(last_loss_);
  r.set_step(state_.step);
  r.set_skipped_steps(state_.skipped_steps);
  r.set_tokens(state_.tokens_seen);
  r.set_checkpoint_path(*dir);
  r.set_seconds(Seconds(start_));
  if (val_ != nullptr) {
    auto eval = RunEval();
    if (!eval.ok()) return eval.status();
    *r.mutable_eval() = eval->ToProto(false);
  }
  // Synthetic tasks: each scored on its own evaluation examples, with its accuracy.
  for (const EvalSettings::Dataset& d : config_.eval.datasets) {
    if (d.synthetic_task < 0) continue;
    auto source = OpenEvalSource(config_, d, s_.micro_batch, s_.data_rank, s_.data_ranks);
    if (!source.ok()) return source.status();
    auto eval = Evaluate(net_, **source, s_.micro_batch, d.seq_len, config_.training.eval_batches,
                         train_solve_, s_.comm.get(), /*score_accuracy=*/true, s_.slice);
    if (!eval.ok()) return eval.status();
    *r.mutable_eval()->add_datasets() = eval->ToDatasetProto(d.name, "", d.seq_len, false);
    events_.Log(absl::StrFormat("task %s: loss %.4f, accuracy %.4f", d.name, eval->loss,
                                eval->accuracy.value_or(0)));
  }
  mesa::v1::TrainerEvent event;
  *event.mutable_result() = r;
  events_.Emit(std::move(event));
  events_.Log(absl::StrFormat("done: %lld steps, final loss %.4f, checkpoint %s",
                              static_cast<long long>(state_.step), last_loss_, *dir));
  return result_;
}

}  // namespace

absl::StatusOr<RunResult> RunTraining(const JobConfig& config, const TrainerOptions& options,
                                      EventSink& events) {
  auto session = MakeSession(config, options);
  if (!session.ok()) return session.status();
  TrainingRun run(config, options, events, *std::move(session));
  MESA_RETURN_IF_ERROR(run.Open());
  MESA_RETURN_IF_ERROR(run.Restore());
  // The run's curves, beside its checkpoints (tensorboard.h).
  if (options.rank == 0)
    events.set_tensorboard_dir(CheckpointRoot(config, options) + "/tensorboard");
  run.AnnounceStart();
  return run.Loop();
}

}  // namespace mesa::model
