#include "model/trainer/evaluate.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/data/data_loader.h"
#include "model/data/document_windows.h"
#include "model/data/synthetic.h"
#include "spec/curve_bins.h"
#include "spec/mixers.h"

namespace mesa::model {

mesa::v1::EvalMetrics EvalResult::ToProto(bool per_position) const {
  mesa::v1::EvalMetrics m;
  m.set_val_loss(loss);
  m.set_val_perplexity(perplexity);
  m.set_tokens(tokens);
  m.set_batches(batches);
  m.set_cg_steps_mean(cg_steps_mean);
  m.set_cg_mode(cg_tol > 0 ? "tolerance" : "fixed");
  m.set_cg_tol(cg_tol);
  m.set_cg_max_steps(cg_max_steps);
  if (per_position && bin_first.empty()) {  // binned curves go with their bins (DatasetResult)
    m.mutable_nll_at_position()->Add(nll_at_position.begin(), nll_at_position.end());
    m.mutable_mean_nll_so_far()->Add(mean_nll_so_far.begin(), mean_nll_so_far.end());
    m.mutable_count_at_position()->Add(count_at_position.begin(), count_at_position.end());
  }
  return m;
}

void EvalResult::BinCurves(int bins_per_octave) {
  if (bins_per_octave <= 0 || !bin_first.empty() || nll_at_position.empty()) return;
  std::vector<double> nll, so_far;
  std::vector<int64_t> count;
  for (const auto& [first, last] :
       spec::CurveBins(static_cast<int>(nll_at_position.size()), bins_per_octave)) {
    double sum = 0;
    int64_t n = 0;
    for (int k = first; k <= last; ++k) {
      sum += nll_at_position[k] * static_cast<double>(count_at_position[k]);
      n += count_at_position[k];
    }
    nll.push_back(n > 0 ? sum / static_cast<double>(n) : 0.0);
    count.push_back(n);
    so_far.push_back(mean_nll_so_far[last]);
    bin_first.push_back(first);
    bin_last.push_back(last);
  }
  nll_at_position = std::move(nll);
  mean_nll_so_far = std::move(so_far);
  count_at_position = std::move(count);
}

mesa::v1::DatasetResult EvalResult::ToDatasetProto(const std::string& name,
                                                   const std::string& val_path, int seq_len,
                                                   bool per_position) const {
  mesa::v1::DatasetResult d;
  d.set_name(name);
  d.set_val_path(val_path);
  d.set_seq_len(seq_len);
  d.set_loss(loss);
  d.set_perplexity(perplexity);
  d.set_tokens(tokens);
  d.set_sequences(sequences);
  d.set_batches(batches);
  d.set_cg_steps_mean(cg_steps_mean);
  if (accuracy.has_value()) d.set_accuracy(*accuracy);
  if (per_position) {
    d.mutable_nll_at_position()->Add(nll_at_position.begin(), nll_at_position.end());
    d.mutable_mean_nll_so_far()->Add(mean_nll_so_far.begin(), mean_nll_so_far.end());
    d.mutable_count_at_position()->Add(count_at_position.begin(), count_at_position.end());
    d.mutable_bin_first_position()->Add(bin_first.begin(), bin_first.end());
    d.mutable_bin_last_position()->Add(bin_last.begin(), bin_last.end());
  }
  return d;
}

absl::StatusOr<EvalResult> Evaluate(MesaNet& net, BatchSource& loader, int batch, int seq_len,
                                    int64_t max_batches, const MesaSolve& solve, Communicator* comm,
                                    bool score_accuracy, const ContextSlice& slice,
                                    bool cg_per_position, InternalsProbe* internals) {
  EvalResult result;
  if (absl::Status s = net.KeepTokenCgSteps(cg_per_position || internals != nullptr); !s.ok()) {
    return s;
  }
  const ModelConfig& model = net.config();
  int cg_layers = 0;
  for (int l = 0; l < model.n_layers; ++l) {
    cg_layers += spec::TraitsOf(model.LayerMixer(l)).solves_with_cg;
  }
  // Per position: the CG steps summed over heads and layers, and the tokens.
  std::vector<double> cg_at_sum(cg_per_position ? seq_len : 0, 0.0),
      cg_at_tokens(cg_per_position ? seq_len : 0, 0.0);
  std::vector<int32_t> token_steps;
  result.cg_max_steps = solve.max_steps;
  result.cg_tol = solve.tolerance;
  const int32_t bos = net.config().bos_token;
  std::vector<double> nll_sum(seq_len, 0.0);
  std::vector<int64_t> count(seq_len, 0);
  double loss_sum = 0, cg_sum = 0, correct = 0;
  std::vector<int32_t> tokens, targets, part_tokens, part_targets, greedy;
  std::vector<uint64_t> part_valid;
  std::vector<float> greedy_logprobs;
  std::vector<float> losses;
  // This rank's columns of each sequence.
  const int part = seq_len / slice.count, begin = slice.index * part;
  while (max_batches == 0 || result.batches < max_batches) {
    absl::Status next = loader.Next(&tokens, &targets, /*wrap=*/false);
    if (absl::IsOutOfRange(next)) break;
    if (!next.ok()) return next;
    TakeSlice(tokens, batch, seq_len, slice, &part_tokens);
    TakeSlice(targets, batch, seq_len, slice, &part_targets);
    auto stats = net.Forward(part_tokens.data(), part_targets.data(), batch, solve);
    if (!stats.ok()) return stats.status();
    // A property of the model (weights or activations that overflow), not of the machine: a user
    // error, which retrying on another node cannot cure.
    if (!stats->finite) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the loss is not finite on evaluation batch ", result.batches + 1,
          " (the model's weights or activations overflow); this checkpoint cannot be evaluated"));
    }
    net.CopyLossesToHost(&losses);
    if (cg_per_position || internals != nullptr) net.CopyTokenCgStepsToHost(&token_steps);
    if (internals != nullptr) {
      if (absl::Status s =
              internals->Observe(net, token_steps, batch, /*whole_rows=*/slice.count == 1);
          !s.ok()) {
        return s;
      }
    }
    if (score_accuracy) {
      net.GreedyFromLogits(&greedy, &greedy_logprobs);
      // Where several next tokens are right (regbench), an argmax in the position's set counts.
      const bool sets = !loader.valid_next().empty();
      if (sets) TakeSlice(loader.valid_next(), batch, seq_len, slice, &part_valid);
      for (size_t i = 0; i < part_targets.size(); ++i) {
        if (part_targets[i] == bos) continue;
        correct += sets && part_valid[i] != 0 ? InValidSet(part_valid[i], greedy[i])
                                              : greedy[i] == part_targets[i];
      }
    }
    loss_sum += stats->loss_sum;
    result.tokens += stats->loss_tokens;
    cg_sum += stats->cg_steps_mean;
    result.layer_cg_steps.resize(stats->layer_cg_steps.size(), 0.0);
    for (size_t l = 0; l < stats->layer_cg_steps.size(); ++l) {
      result.layer_cg_steps[l] += stats->layer_cg_steps[l];
    }
    ++result.batches;
    // A sequence's slices are counted once, on the rank of its first.
    if (slice.index == 0) result.sequences += batch;
    for (int b = 0; b < batch; ++b) {
      int64_t position = -1;
      for (int t = 0; t < seq_len; ++t) {
        const int64_t i = int64_t{b} * seq_len + t;
        if (tokens[i] == bos)
          position = 0;
        else if (position >= 0)
          ++position;
        if (position < 0 || t < begin || t >= begin + part) continue;
        if (targets[i] != bos) {
          nll_sum[position] += losses[int64_t{b} * part + t - begin];
          ++count[position];
        }
        if (cg_per_position) {
          // token_steps is [layers, batch, part, H]; layers without a solve hold 0.
          const int64_t h = model.n_heads, row = int64_t{b} * part + t - begin;
          for (int l = 0; l < model.n_layers; ++l) {
            const int32_t* steps = token_steps.data() + (int64_t{l} * batch * part + row) * h;
            for (int64_t j = 0; j < h; ++j) cg_at_sum[position] += steps[j];
          }
          cg_at_tokens[position] += 1;
        }
      }
    }
  }
  if (comm != nullptr && comm->world_size() > 1) {
    // [loss_sum, tokens, cg_sum, sequences, correct, per-position sums..., counts...,
    //  per-layer CG sums...]
    std::vector<double> packed = {loss_sum, static_cast<double>(result.tokens), cg_sum,
                                  static_cast<double>(result.sequences), correct};
    packed.insert(packed.end(), nll_sum.begin(), nll_sum.end());
    for (int64_t c : count) packed.push_back(static_cast<double>(c));
    packed.insert(packed.end(), result.layer_cg_steps.begin(), result.layer_cg_steps.end());
    packed.insert(packed.end(), cg_at_sum.begin(), cg_at_sum.end());
    packed.insert(packed.end(), cg_at_tokens.begin(), cg_at_tokens.end());
    if (absl::Status s = comm->AllReduce(packed.data(), packed.size(), ReduceOp::kSum); !s.ok()) {
      return s;
    }
    loss_sum = packed[0];
    result.tokens = static_cast<int64_t>(packed[1]);
    cg_sum = packed[2] / comm->world_size();
    result.sequences = static_cast<int64_t>(packed[3]);
    correct = packed[4];
    for (int k = 0; k < seq_len; ++k) {
      nll_sum[k] = packed[5 + k];
      count[k] = static_cast<int64_t>(packed[5 + seq_len + k]);
    }
    for (size_t l = 0; l < result.layer_cg_steps.size(); ++l) {
      result.layer_cg_steps[l] = packed[5 + 2 * seq_len + l] / comm->world_size();
    }
    const size_t at = 5 + 2 * seq_len + result.layer_cg_steps.size();
    for (size_t k = 0; k < cg_at_sum.size(); ++k) {
      cg_at_sum[k] = packed[at + k];
      cg_at_tokens[k] = packed[at + cg_at_sum.size() + k];
    }
  }
  if (result.batches == 0) {
    return absl::InvalidArgumentError("the validation data holds no complete batch");
  }
  result.loss = loss_sum / std::max<int64_t>(1, result.tokens);
  result.perplexity = std::exp(result.loss);
  result.cg_steps_mean = cg_sum / result.batches;
  for (double& steps : result.layer_cg_steps) steps /= result.batches;
  if (score_accuracy) result.accuracy = correct / std::max<int64_t>(1, result.tokens);
  double pooled_sum = 0;
  int64_t pooled_count = 0;
  for (int k = 0; k < seq_len; ++k) {
    pooled_sum += nll_sum[k];
    pooled_count += count[k];
    result.nll_at_position.push_back(count[k] > 0 ? nll_sum[k] / count[k] : 0.0);
    result.mean_nll_so_far.push_back(pooled_count > 0 ? pooled_sum / pooled_count : 0.0);
    result.count_at_position.push_back(count[k]);
  }
  for (size_t k = 0; k < cg_at_sum.size(); ++k) {
    const double n = cg_at_tokens[k] * model.n_heads * cg_layers;
    result.cg_steps_at_position.push_back(n > 0 ? cg_at_sum[k] / n : 0.0);
  }
  return result;
}

std::vector<mesa::v1::LayerInternals> ModelInternals(const ModelConfig& model,
                                                     const std::vector<std::string>& mixers,
                                                     const ParamLayout& layout, const float* params,
                                                     const std::vector<double>& layer_cg_steps) {
  std::vector<mesa::v1::LayerInternals> out;
  for (int l = 0; l < model.n_layers; ++l) {
    mesa::v1::LayerInternals& layer = out.emplace_back();
    layer.set_layer(l);
    layer.set_mixer(l < static_cast<int>(mixers.size()) ? mixers[l] : "");
    if (l < static_cast<int>(layer_cg_steps.size())) layer.set_cg_steps_mean(layer_cg_steps[l]);
    const int64_t offset = layout.OffsetOf(absl::StrCat("model.layers.", l, ".attn.lambda_params"));
    if (offset < 0) continue;
    for (int h = 0; h < model.n_heads; ++h) {
      double lo = INFINITY, hi = -INFINITY, sum = 0;
      for (int d = 0; d < model.head_dim; ++d) {
        const double p = params[offset + int64_t{h} * model.head_dim + d];
        // λ = floor + softplus(p), softplus evaluated without overflow.
        const double lambda = model.lambda_floor + (p > 20 ? p : std::log1p(std::exp(p)));
        lo = std::min(lo, lambda);
        hi = std::max(hi, lambda);
        sum += lambda;
      }
      mesa::v1::HeadInternals& head = *layer.add_heads();
      head.set_head(h);
      head.set_lambda_min(lo);
      head.set_lambda_mean(sum / model.head_dim);
      head.set_lambda_max(hi);
    }
  }
  return out;
}

namespace {

SyntheticSourceOptions SyntheticOptions(const JobConfig& config, bool eval, int batch,
                                        int data_rank, int data_ranks) {
  const SyntheticSettings& syn = *config.data.synthetic;
  SyntheticSourceOptions o;
  o.tasks = syn.tasks;
  o.seed = syn.seed;
  o.examples = eval ? syn.eval_examples : syn.train_examples;
  o.split = eval ? SyntheticSplit::kEval : SyntheticSplit::kTrain;
  o.batch = batch;
  o.window = config.data.seq_len;
  o.no_target = config.model.bos_token;
  o.rank = data_rank;
  o.world_size = data_ranks;
  return o;
}

}  // namespace

std::unique_ptr<BatchSource> SyntheticStream(const JobConfig& config, bool eval, int batch,
                                             int data_rank, int data_ranks) {
  return std::make_unique<SyntheticSource>(
      SyntheticOptions(config, eval, batch, data_rank, data_ranks));
}

absl::StatusOr<std::unique_ptr<BatchSource>> OpenEvalSource(const JobConfig& config,
                                                            const EvalSettings::Dataset& d,
                                                            int batch, int data_rank,
                                                            int data_ranks) {
  if (d.synthetic_task >= 0) {
    SyntheticSourceOptions o =
        SyntheticOptions(config, /*eval=*/true, batch, data_rank, data_ranks);
    o.only_task = d.synthetic_task;
    o.window = d.seq_len;
    if (o.examples < int64_t{batch} * data_ranks) {
      return absl::InvalidArgumentError(absl::StrCat("data.synthetic.eval_examples: ", o.examples,
                                                     " examples do not fill one batch of ", batch,
                                                     " x ", data_ranks, " data ranks"));
    }
    return std::unique_ptr<BatchSource>(std::make_unique<SyntheticSource>(std::move(o)));
  }
  if (d.document_windows) {
    auto documents = DocumentWindows::Open(d.paths, batch, d.seq_len, data_rank, data_ranks,
                                           config.model.bos_token);
    if (!documents.ok()) {
      return absl::Status(
          documents.status().code(),
          absl::StrCat("eval dataset \"", d.name, "\": ", documents.status().message()));
    }
    return std::unique_ptr<BatchSource>(*std::move(documents));
  }
  auto loader = DataLoader::Open(d.paths, batch, d.seq_len, data_rank, data_ranks);
  if (!loader.ok()) {
    return absl::Status(loader.status().code(),
                        absl::StrCat("eval dataset \"", d.name, "\": ", loader.status().message()));
  }
  return std::unique_ptr<BatchSource>(*std::move(loader));
}

absl::StatusOr<mesa::v1::AveragedCurve> AverageCurves(
    const google::protobuf::RepeatedPtrField<mesa::v1::DatasetResult>& datasets,
    const std::vector<std::string>& names) {
  mesa::v1::AveragedCurve out;
  std::vector<const mesa::v1::DatasetResult*> curves;
  size_t positions = SIZE_MAX;
  for (const std::string& name : names) {
    const auto d = std::find_if(datasets.begin(), datasets.end(),
                                [&](const mesa::v1::DatasetResult& r) { return r.name() == name; });
    if (d == datasets.end() || d->mean_nll_so_far().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("eval.average_curves: dataset ", name, " has no per-position curve"));
    }
    curves.push_back(&*d);
    out.add_datasets(name);
    positions = std::min<size_t>(positions, d->mean_nll_so_far_size());
  }
  if (curves.empty()) return out;
  // A binned curve's entry i stands for its bin, labelled by the bin's last position; curves are
  // averaged while their entries stand for the same positions (binned curves of different
  // lengths share their bins up to the shorter one's last, which may end early).
  auto same = [](const mesa::v1::DatasetResult& a, const mesa::v1::DatasetResult& b, size_t i) {
    auto first = [](const mesa::v1::DatasetResult& d, size_t i) {
      return d.bin_first_position().empty() ? static_cast<int32_t>(i) : d.bin_first_position(i);
    };
    auto last = [](const mesa::v1::DatasetResult& d, size_t i) {
      return d.bin_last_position().empty() ? static_cast<int32_t>(i) : d.bin_last_position(i);
    };
    return first(a, i) == first(b, i) && last(a, i) == last(b, i);
  };
  for (size_t i = 0; i < positions; ++i) {
    double sum = 0;
    bool everywhere = true;
    if (!std::all_of(curves.begin(), curves.end(),
                     [&](const mesa::v1::DatasetResult* d) { return same(*d, *curves[0], i); })) {
      break;
    }
    for (const mesa::v1::DatasetResult* d : curves) {
      everywhere = everywhere && d->count_at_position(static_cast<int>(i)) > 0;
      sum += std::exp(d->mean_nll_so_far(static_cast<int>(i)));
    }
    if (!everywhere) continue;
    out.add_positions(curves[0]->bin_last_position().empty() ? static_cast<int32_t>(i)
                                                             : curves[0]->bin_last_position(i));
    out.add_mean_so_far_perplexity(sum / static_cast<double>(curves.size()));
  }
  return out;
}

}  // namespace mesa::model
