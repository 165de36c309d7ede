// The evaluation driver and the exit codes; training is training_run.cc.
#include "model/trainer/trainer.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file_util.h"
#include "base/sha256.h"
#include "base/utf8.h"
#include "model/checkpoint/checkpoint.h"
#include "model/data/data_loader.h"
#include "model/generate/from_checkpoint.h"
#include "model/generate/generator.h"
#include "model/tasks/adapters.h"
#include "model/tasks/items_output.h"
#include "model/tasks/niah.h"
#include "model/tasks/task_scoring.h"
#include "model/trainer/evaluate.h"
#include "model/trainer/session.h"
#include "spec/task_results.h"
#include "spec/tasks.h"
#include "spec/validate_job_spec.h"

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

namespace {

// Rows per forward of a task-scoring net (bounds the logits buffer: rows x window x vocab).
constexpr int64_t kMaxScoringRows = 256;
// The window of the net shared contexts run in (context reuse): contexts and continuations go
// through it in pieces, so a short window leaves room for many rows (bigger waves, fewer calls).
constexpr int kWaveWindow = 64;

// eval.tasks[i].niah: the generated items, over `haystack` (the haystack file's text, if any).
absl::StatusOr<std::vector<TaskExample>> NiahItemsFor(const EvalSettings::Task& task,
                                                      std::string haystack,
                                                      const Tokenizer& tokenizer) {
  const mesa::v1::NiahGenerator& g = *task.niah;
  NiahConfig defaults;
  defaults.seed = g.seed();
  defaults.max_new_tokens = task.max_new_tokens;
  defaults.score_greedy = g.score() == "greedy";
  if (!base::IsValidUtf8(haystack)) {
    return absl::InvalidArgumentError(
        absl::StrCat(g.haystack_path(), ": the haystack text is not valid UTF-8"));
  }
  defaults.haystack_text = std::move(haystack);
  return NiahTaskItems({g.variants().begin(), g.variants().end()},
                       {g.lengths().begin(), g.lengths().end()},
                       g.items() > 0 ? g.items() : spec::kDefaultNiahItems, defaults, tokenizer);
}

// eval.tasks[i]'s result from its score (with a job shard: the settings and the item count).
void FillTaskResult(const EvalSettings::Task& task, const mesa::v1::EvalTask& spec_task,
                    const std::vector<TaskExample>& items, const std::string& sha256,
                    const TaskScore& score, int max_length, mesa::v1::TaskResult& r) {
  r = score.metrics;
  r.set_name(task.name);
  r.set_path(task.path);
  r.set_adapter(task.adapter);
  r.set_file_sha256(sha256);
  r.set_num_fewshot(task.num_fewshot);
  if (task.num_fewshot > 0) {
    r.set_fewshot_draws(task.fewshot_draws);
    r.set_fewshot_seed(task.fewshot_seed);
  }
  if (r.metrics_size() > 0) r.set_primary_metric(spec::PrimaryMetricOf(spec_task, r));
  r.set_max_length(max_length);
  r.set_truncation(task.truncation);
  r.set_add_bos(task.add_bos);
  if (std::any_of(items.begin(), items.end(), [](const TaskExample& e) {
        return e.form == TaskForm::kGeneration || e.form == TaskForm::kNeedle;
      })) {
    r.set_max_new_tokens(task.max_new_tokens);
    for (const std::string& stop : task.stop) r.add_stop(stop);
  }
}

// eval.tasks: each task file scored at its window (data.seq_len unless shorter) with the job's
// tokenizer (the checkpoint's); the ranks share each task's items.
absl::Status ScoreTasks(const JobConfig& config, const CheckpointData& ckpt, const MesaSolve& solve,
                        const std::string& items_dir, Session& s, mesa::v1::EvalMetrics& metrics,
                        EventSink& events) {
  const bool items_output = config.spec.eval().items_output();
  if (config.eval.tasks.empty()) return absl::OkStatus();
  // The loaded checkpoint already holds what DescribeCheckpoint would read again from disk; its
  // model is config.model (LoadCheckpoint refuses any other).
  const CheckpointDescription described{.dir = ckpt.dir,
                                        .step = ckpt.state.step,
                                        .model = config.model,
                                        .spec_json = ckpt.state.spec_json,
                                        .tokenizer_json = ckpt.state.tokenizer_json};
  CheckpointGenerateOptions files;
  files.tokenizer_file = config.spec.data().tokenizer_file();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = CheckpointTokenizerFor(described, files);
  if (!tokenizer.ok()) return tokenizer.status();
  // Targets are decoded greedily by the inference engine, as mesa-generate decodes: prefill of the
  // context, then one token per step from the recurrent state.
  // Shapes that do not depend on the rank count (each rank's share of the items runs in the nets
  // one rank would use), so that a row scores alike, bit for bit, however many ranks share the
  // items: one micro-batch of the job on one rank.
  const int rows_of_one_rank = config.data.MicroBatch(1);
  absl::StatusOr<std::unique_ptr<Generator>> generator = Generator::Create(
      config.model, ckpt.params, s.backend.get(), rows_of_one_rank, config.data.seq_len);
  if (!generator.ok()) return generator.status();
  // Task rows are scored in nets planned for them (docs/trainer.md "Task scoring"): the shortest
  // window that holds a task's rows, rounded up to 64 tokens, with as many rows as one rank's
  // micro-batch of data.seq_len tokens holds (at most kMaxScoringRows). One at a time, kept while
  // the next task needs the same; a net that does not fit in memory falls back to the session's
  // (correct, but no longer bit-identical across rank counts).
  std::pair<int, int> scoring_shape;
  std::unique_ptr<MesaNet> scoring_net;
  auto net_for_rows = [&](int inputs) -> absl::StatusOr<TaskScoreOptions::ScoringNet> {
    const int row_len = std::min(config.data.seq_len, (inputs + 63) / 64 * 64);
    const int rows = static_cast<int>(std::min<int64_t>(
        kMaxScoringRows, int64_t{rows_of_one_rank} * config.data.seq_len / row_len));
    const TaskScoreOptions::ScoringNet session{s.net.get(), s.micro_batch, config.data.seq_len};
    if (rows == s.micro_batch && row_len == config.data.seq_len) return session;
    if (scoring_net == nullptr || scoring_shape != std::pair{rows, row_len}) {
      scoring_net.reset();  // its memory first
      absl::StatusOr<std::unique_ptr<MesaNet>> created =
          MesaNet::Create(config.model, s.backend.get(), rows, row_len);
      if (absl::IsResourceExhausted(created.status())) {
        events.Log(absl::StrFormat("task scoring: a %d x %d net does not fit; using the job's",
                                   rows, row_len));
        return session;
      }
      if (!created.ok()) return created.status();
      scoring_net = *std::move(created);
      scoring_net->SetParamsFromHost(ckpt.params.data());
      scoring_shape = {rows, row_len};
    }
    return TaskScoreOptions::ScoringNet{scoring_net.get(), rows, row_len};
  };
  // Shared contexts run in a net of kWaveWindow tokens and as many rows as one rank's micro-batch
  // of data.seq_len tokens holds (at most kMaxScoringRows): made once, kept for every task.
  std::unique_ptr<MesaNet> wave_net;
  const int wave_window = std::min(config.data.seq_len, kWaveWindow);
  const int wave_rows = static_cast<int>(std::min<int64_t>(
      kMaxScoringRows, int64_t{rows_of_one_rank} * config.data.seq_len / wave_window));
  auto net_for_waves = [&]() -> absl::StatusOr<TaskScoreOptions::ScoringNet> {
    if (wave_net == nullptr) {
      absl::StatusOr<std::unique_ptr<MesaNet>> created =
          MesaNet::Create(config.model, s.backend.get(), wave_rows, wave_window);
      if (absl::IsResourceExhausted(created.status())) {
        events.Log(
            absl::StrFormat("task scoring: a %d x %d net for shared contexts does not fit; "
                            "using the rows' net",
                            wave_rows, wave_window));
        return TaskScoreOptions::ScoringNet{};
      }
      if (!created.ok()) return created.status();
      wave_net = *std::move(created);
      wave_net->SetParamsFromHost(ckpt.params.data());
    }
    return TaskScoreOptions::ScoringNet{wave_net.get(), wave_rows, wave_window};
  };
  const mesa::v1::EvalShard& job_shard = config.spec.eval().shard();
  for (size_t i = 0; i < config.eval.tasks.size(); ++i) {
    const EvalSettings::Task& task = config.eval.tasks[i];
    auto failed = [&](const absl::Status& status) {
      return absl::Status(
          status.code(), absl::StrCat("eval.tasks[", i, "] (", task.name, "): ", status.message()));
    };
    // The file read once: the task file, or the haystack text of generated items (maybe none);
    // the result names it by the SHA-256 of those bytes.
    const std::string read = task.niah ? task.niah->haystack_path() : task.path;
    absl::StatusOr<std::string> bytes =
        read.empty() ? std::string() : base::ReadFile(read, spec::kMaxTaskFileBytes);
    if (!bytes.ok()) return failed(bytes.status());
    const std::string sha256 = read.empty() ? std::string() : base::Sha256Hex(*bytes);
    absl::StatusOr<std::vector<TaskExample>> examples =
        task.niah ? NiahItemsFor(task, *std::move(bytes), **tokenizer)
                  : ParseTaskItems(*bytes, task.path, task.adapter);
    if (!examples.ok()) return failed(examples.status());
    // Demonstrations from their own file (fewshot_path), through the task's adapter.
    std::vector<TaskExample> demonstrations;
    if (!task.fewshot_path.empty()) {
      absl::StatusOr<std::vector<TaskExample>> loaded =
          LoadTaskItems(task.fewshot_path, task.adapter);
      if (!loaded.ok()) return failed(loaded.status());
      demonstrations = *std::move(loaded);
    }
    TaskScoreOptions options;
    options.num_fewshot = task.num_fewshot;
    if (!task.fewshot_path.empty()) options.demonstrations = &demonstrations;
    options.bleu = task.bleu;
    options.gather_text = items_output;
    options.solve = solve;
    options.generator = generator->get();
    options.max_length = task.max_length;
    options.truncation = task.truncation == "fail" ? Truncation::kFail : Truncation::kLeft;
    options.add_bos = task.add_bos;
    options.metrics = task.metrics;
    options.max_new_tokens = task.max_new_tokens;
    // Context parallelism wires the session's net to the other ranks; rows stay there.
    if (config.training.context_parallel == 1) {
      options.net_for_rows = net_for_rows;
      options.net_for_waves = net_for_waves;
    }
    options.stop = task.stop;
    options.job_shard = {job_shard.index(), job_shard.count()};
    options.reuse_context =
        !config.spec.eval().has_context_reuse() || config.spec.eval().context_reuse();
    // Items are dealt over the data-parallel ranks and their scores exchanged (the task phase
    // refuses context parallelism, so every rank is a data rank).
    if (s.data_ranks > 1) {
      options.shard.rank = s.data_rank;
      options.shard.count = s.data_ranks;
      options.shard.gather = [&s](const std::string& mine) {
        return AllGatherBytes(*s.comm, mine);
      };
    }
    const int max_length = task.max_length > 0 ? task.max_length : config.data.seq_len;
    // Few-shot draws: the task scored once per draw, draw d's demonstrations picked by seed
    // fewshot_seed + d; a shard job reports each draw's records, the merge combines them.
    std::vector<mesa::v1::TaskResult> draws;
    for (int d = 0; d < task.fewshot_draws; ++d) {
      options.seed = task.fewshot_seed + static_cast<uint64_t>(d);
      absl::StatusOr<TaskScore> score =
          ScoreTask(*s.net, **tokenizer, *examples, rows_of_one_rank, config.data.seq_len, options);
      if (!score.ok()) return failed(score.status());
      FillTaskResult(task, config.spec.eval().tasks(static_cast<int>(i)), *examples, sha256, *score,
                     max_length, draws.emplace_back());
      const std::string draw =
          task.fewshot_draws > 1 ? absl::StrFormat(" (draw %d)", d) : std::string();
      if (items_output) {
        // Rank 0 holds every item of the job (the texts gathered with the records).
        const std::string path =
            absl::StrCat(items_dir, "/", task.name,
                         task.fewshot_draws > 1 ? absl::StrCat(".draw", d) : "", ".jsonl");
        // The task's metrics: as listed, else those computed, else (a shard job computes none)
        // those its records give.
        std::vector<std::string> names = task.metrics;
        if (names.empty()) {
          for (const mesa::v1::MetricValue& v : score->metrics.metrics()) names.push_back(v.name());
        }
        if (names.empty()) {
          names = spec::DefaultTaskMetrics(
              {score->partial.records().begin(), score->partial.records().end()});
        }
        if (s.data_rank == 0) {
          if (absl::Status w = WriteItemsFile(path, *examples, *score, names); !w.ok()) {
            return failed(w);
          }
        }
        draws.back().set_items_path(path);
      }
      if (job_shard.count() > 1) {
        mesa::v1::TaskPartial& partial = *metrics.add_task_partials();
        partial = score->partial;
        partial.set_task(task.name);
        partial.set_draw(d);
        events.Log(absl::StrFormat("task %s%s: %d of %d items scored for shard %d of %d", task.name,
                                   draw, score->partial.records_size(), score->metrics.items(),
                                   job_shard.index(), job_shard.count()));
        continue;
      }
      std::string line =
          absl::StrFormat("task %s%s: %d items (%d scored, %d truncated, %d skipped)", task.name,
                          draw, score->metrics.items(), score->metrics.scored(),
                          score->metrics.truncated(), score->metrics.skipped());
      for (const mesa::v1::MetricValue& v : score->metrics.metrics()) {
        absl::StrAppendFormat(&line, ", %s %.4f", v.name(), v.value());
      }
      events.Log(line);
    }
    if (draws.size() == 1 || job_shard.count() > 1) {
      *metrics.add_tasks() = std::move(draws[0]);  // a shard's: the settings, for the merge
      continue;
    }
    absl::StatusOr<mesa::v1::TaskResult> combined = spec::CombineDraws(draws);
    if (!combined.ok()) return failed(combined.status());
    *metrics.add_tasks() = *std::move(combined);
  }
  if (job_shard.count() > 1) return absl::OkStatus();  // the shards' merge averages the groups
  absl::StatusOr<std::vector<mesa::v1::TaskGroupResult>> groups =
      spec::AverageTaskGroups(config.spec.eval(), {metrics.tasks().begin(), metrics.tasks().end()});
  if (!groups.ok()) return groups.status();
  for (mesa::v1::TaskGroupResult& g : *groups) *metrics.add_task_groups() = std::move(g);
  return absl::OkStatus();
}

}  // namespace

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
  MesaSolve solve;
  // GLA layers read out with 0 CG steps whatever this says (MesaNet::LayerSolve).
  if (config.model.MesaLayers() == 0) {
    solve = {0, 0.0f};
  } else if (config.model.cg_tol > 0) {
    solve = {config.model.cg_max_steps, config.model.cg_tol};
  } else {
    solve = {config.model.cg_steps, 0.0f};
  }
  // The session's model is planned for data.seq_len; a dataset evaluated at another length gets a
  // model of its own with the same weights (built when needed, one at a time).
  std::unique_ptr<MesaNet> other_length;
  int other_seq_len = 0;
  auto net_for = [&](int seq_len) -> absl::StatusOr<MesaNet*> {
    if (seq_len == config.data.seq_len) return s.net.get();
    if (other_length != nullptr && other_seq_len == seq_len) return other_length.get();
    other_length.reset();
    auto net = MakeNet(config, s, seq_len);
    if (!net.ok()) return net.status();
    other_length = *std::move(net);
    other_seq_len = seq_len;
    other_length->SetParamsFromHost(ckpt->params.data());
    return other_length.get();
  };
  auto evaluate = [&](const EvalSettings::Dataset& d, const MesaSolve& with,
                      bool cg_per_position = false,
                      InternalsProbe* internals = nullptr) -> absl::StatusOr<EvalResult> {
    absl::StatusOr<MesaNet*> net = net_for(d.seq_len);
    if (!net.ok()) return net.status();
    auto source = OpenEvalSource(config, d, s.micro_batch, s.data_rank, s.data_ranks);
    if (!source.ok()) return source.status();
    return Evaluate(**net, **source, s.micro_batch, d.seq_len, config.eval.max_batches, with,
                    s.comm.get(), /*score_accuracy=*/d.synthetic_task >= 0, s.slice,
                    cg_per_position, internals);
  };
  RunResult result;
  result.checkpoint_dir = ckpt->dir;
  mesa::v1::EvalMetrics& metrics = *result.result.mutable_eval();
  double loss_sum = 0, perplexity_sum = 0, cg_sum = 0;
  InternalsProbe probe(config.model);
  int64_t cg_batches = 0;
  // A shard job (eval.shard) shares the task items; its datasets and CG sweep are shard 0's alone.
  const mesa::v1::EvalShard& shard = config.spec.eval().shard();
  const int datasets_here =
      shard.count() <= 1 || shard.index() == 0 ? static_cast<int>(config.eval.datasets.size()) : 0;
  for (int i = 0; i < datasets_here; ++i) {
    const EvalSettings::Dataset& d = config.eval.datasets[i];
    const bool probe_here = i == 0 && config.eval.internals;
    auto eval = evaluate(d, solve, /*cg_per_position=*/false, probe_here ? &probe : nullptr);
    if (!eval.ok()) return eval.status();
    eval->BinCurves(config.spec.eval().curve_bins_per_octave());
    if (i == 0) {
      metrics = eval->ToProto(config.eval.per_position);
      result.final_loss = eval->loss;
      if (config.eval.internals) {
        std::vector<mesa::v1::LayerInternals> layers =
            ModelInternals(config.model, spec::LayerMixers(config.spec.model()), s.net->layout(),
                           ckpt->params.data(), eval->layer_cg_steps);
        probe.Fill(&layers);
        for (mesa::v1::LayerInternals& layer : layers) *metrics.add_internals() = std::move(layer);
      }
    }
    *metrics.add_datasets() =
        eval->ToDatasetProto(d.name, d.pattern, d.seq_len, config.eval.per_position);
    loss_sum += eval->loss;
    perplexity_sum += eval->perplexity;
    cg_sum += eval->cg_steps_mean * eval->batches;
    cg_batches += eval->batches;
    events.Log(absl::StrFormat(
        "eval %s (seq_len %d): loss %.4f, perplexity %.3f, %d tokens, "
        "mean CG steps %.2f%s",
        d.name, d.seq_len, eval->loss, eval->perplexity, eval->tokens, eval->cg_steps_mean,
        eval->accuracy.has_value() ? absl::StrFormat(", accuracy %.4f", *eval->accuracy)
                                   : std::string()));
  }
  if (datasets_here > 0) {
    const double n = static_cast<double>(datasets_here);
    metrics.set_average_loss(loss_sum / n);
    metrics.set_average_perplexity(perplexity_sum / n);
    metrics.set_cg_steps_mean(cg_batches > 0 ? cg_sum / cg_batches : 0.0);
  }
  const auto& averaged = config.spec.eval().average_curves();
  if (!averaged.empty() && datasets_here > 0) {
    absl::StatusOr<mesa::v1::AveragedCurve> curve =
        AverageCurves(metrics.datasets(), {averaged.begin(), averaged.end()});
    if (!curve.ok()) return curve.status();
    *metrics.mutable_averaged_curve() = *std::move(curve);
  }
  if (absl::Status tasks = ScoreTasks(
          config, *ckpt, solve, CheckpointRoot(config, options) + "/items", s, metrics, events);
      !tasks.ok()) {
    return tasks;
  }
  // The CG sweep: every setting on the same batches of the first dataset (read again).
  for (const EvalSettings::CgSetting& setting : config.eval.cg_sweep) {
    if (datasets_here == 0) break;
    const MesaSolve sweep_solve{setting.max_steps, setting.tolerance};
    const bool curve = config.eval.per_position && setting.tolerance > 0;
    auto point = evaluate(config.eval.datasets[0], sweep_solve, curve);
    if (!point.ok()) return point.status();
    mesa::v1::CgSweepPoint* p = metrics.add_cg_sweep();
    p->set_cg_mode(setting.tolerance > 0 ? "tolerance" : "fixed");
    p->set_cg_max_steps(setting.max_steps);
    p->set_cg_tol(setting.tolerance);
    p->set_val_loss(point->loss);
    p->set_val_perplexity(point->perplexity);
    p->set_cg_steps_mean(point->cg_steps_mean);
    p->mutable_cg_steps_at_position()->Add(point->cg_steps_at_position.begin(),
                                           point->cg_steps_at_position.end());
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
  events.Log(
      absl::StrFormat("eval of %s: average loss %.4f, average perplexity %.3f over %d "
                      "dataset(s), mean CG steps %.2f",
                      ckpt->dir, metrics.average_loss(), metrics.average_perplexity(),
                      config.eval.datasets.size(), metrics.cg_steps_mean()));
  return result;
}

}  // namespace mesa::model
