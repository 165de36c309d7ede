// GPU test (part of //tests/gpu:cuda_backend_test): the whole MesaNet on the CUDA backend
// against the CPU model (cuda_backend_test.cc describes the checks), and a short bf16 training run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/mixers/attention/attention_ops_cpu.h"
#include "model/mixers/deltanet/deltanet_ops_cpu.h"
#include "model/mixers/hawk/rglru_ops_cpu.h"
#include "model/mixers/mamba2/ssd_ops_cpu.h"
#include "model/mixers/mesa/mesa_ops_cpu.h"
#include "model/mixers/mixer_ops.h"
#include "model/mixers/mlstm/mlstm_ops_cpu.h"
#include "model/net/mesanet.h"
#include "tests/gpu/cuda_backend_test_util.h"

namespace mesa::model::cuda_test {
namespace {

// ------------------------------------------------------------------------------------------------
// Whole model: same weights and batch on both backends.
//
// Bounds come from 210 seeds per variant measured on an H200 when the bf16 path went in. Gradient
// errors are heavy-tailed across seeds: in a few percent of instances the layer-0 q/k path
// (q_proj, k_proj, the convolutions, lambda and, upstream, the embedding) amplifies any input
// perturbation, be it TF32 rounding or bf16 storage. A float32 CPU model whose activations are
// rounded to bf16 deviates from the plain one exactly as much in those instances, so this is the
// model's conditioning (the Mesa solves), not the GPU. The median over tensors stays tight and
// carries the tight bound; single tensors and the whole buffer get bounds above the tail.

// Forward (logits, loss, per-position losses) and backward (every gradient) of one model.
struct ModelRun {
  ForwardStats stats;
  Vec losses, logits, grads;
};

void RunModel(MesaNet& net, const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
              int batch, ModelRun* run) {
  MesaSolve solve;
  solve.max_steps = net.config().cg_steps;
  auto f = net.Forward(tokens.data(), targets.data(), batch, solve);
  ASSERT_TRUE(f.ok()) << net.backend()->Name() << ": " << f.status();
  EXPECT_TRUE(f->finite) << net.backend()->Name();
  run->stats = *f;
  net.CopyLossesToHost(&run->losses);
  net.CopyLogitsToHost(&run->logits);
  net.ZeroGrads();
  auto bw = net.Backward(1.0f / f->loss_tokens);
  ASSERT_TRUE(bw.ok()) << net.backend()->Name() << ": " << bw.status();
  run->grads.assign(net.num_params(), 0.f);
  net.GetGradsToHost(run->grads.data());
}

constexpr double kNoBound = INFINITY;  // printed only (NaN still fails)

struct ModelTols {
  double loss;          // relative error of the loss sum
  double token_losses;  // per-position losses
  double logits;        // all logits
  double all_grads;     // the whole gradient buffer
  double median_grad;   // the median over gradient tensors of their relative errors
  double grad_tensor;   // every gradient tensor on its own, except the gates'
};

// The Mesa gates' parameters: their gradients sum d log_gamma / d beta terms over every token,
// terms that largely cancel (a_proj.bias has one element per head), so their relative error is
// unbounded in principle (0.29 seen with fp32 activations); printed, not bounded.
bool IsGateTensor(const std::string& name) {
  return name.find("attn.a_proj.") != std::string::npos ||
         name.find("attn.b_proj.") != std::string::npos;
}

// The median over gradient tensors of their relative errors (NaN counts as infinite).
double MedianTensorError(const ModelRun& run, const ModelRun& ref, const ParamLayout& layout) {
  std::vector<double> errors;
  for (const ParamTensor& pt : layout.tensors()) {
    const Vec a(run.grads.begin() + pt.offset, run.grads.begin() + pt.offset + pt.size);
    const Vec r(ref.grads.begin() + pt.offset, ref.grads.begin() + pt.offset + pt.size);
    const double e = RelErr(a, r);
    errors.push_back(std::isnan(e) ? INFINITY : e);
  }
  if (errors.empty()) return NAN;
  std::sort(errors.begin(), errors.end());
  return errors[(errors.size() - 1) / 2];
}

void CompareRuns(const std::string& name, const ModelRun& gpu, const ModelRun& ref,
                 const ParamLayout& layout, const ModelTols& tol) {
  std::printf("%s loss cpu %.6f gpu %.6f (tokens %lld), cg steps gpu %.2f cpu %.2f\n", name.c_str(),
              ref.stats.loss_sum / ref.stats.loss_tokens,
              gpu.stats.loss_sum / gpu.stats.loss_tokens,
              static_cast<long long>(gpu.stats.loss_tokens), gpu.stats.cg_steps_mean,
              ref.stats.cg_steps_mean);
  EXPECT_EQ(gpu.stats.loss_tokens, ref.stats.loss_tokens);
  Expect(name, "loss",
         std::abs(gpu.stats.loss_sum - ref.stats.loss_sum) / std::abs(ref.stats.loss_sum),
         tol.loss);
  Expect(name, "token_losses", RelErr(gpu.losses, ref.losses), tol.token_losses);
  Expect(name, "logits", RelErr(gpu.logits, ref.logits), tol.logits);
  Expect(name, "all_grads", RelErr(gpu.grads, ref.grads), tol.all_grads);
  double worst = 0, worst_gate = 0;
  std::string worst_name, worst_gate_name;
  for (const ParamTensor& pt : layout.tensors()) {
    const Vec a(gpu.grads.begin() + pt.offset, gpu.grads.begin() + pt.offset + pt.size);
    const Vec r(ref.grads.begin() + pt.offset, ref.grads.begin() + pt.offset + pt.size);
    const double e = RelErr(a, r);
    std::printf("  %-40s grad rel err %.3e\n", pt.name.c_str(), e);
    const bool gate = IsGateTensor(pt.name);
    double& w = gate ? worst_gate : worst;
    if (!(e <= w)) {  // NaN sticks
      w = e;
      (gate ? worst_gate_name : worst_name) = pt.name;
    }
  }
  const double median = MedianTensorError(gpu, ref, layout);
  std::printf("%s worst gradient tensor %s (%.3e), worst gate tensor %s (%.3e)\n", name.c_str(),
              worst_name.c_str(), worst, worst_gate_name.c_str(), worst_gate);
  Expect(name, "median_grad", median, tol.median_grad);
  Expect(name, "worst_grad", worst, tol.grad_tensor);
  Expect(name, "worst_gate_grad", worst_gate, kNoBound);
}

void RoundAct(Act a, int64_t n) {
  float* p = static_cast<float*>(a.ptr);
  for (int64_t i = 0; i < n; ++i) p[i] = RoundBf16(p[i]);
}

// The CPU mixer operators with their activation outputs rounded to bf16.
class RoundingMesaOps final : public MesaOps {
 public:
  explicit RoundingMesaOps(const CpuBackendOptions& options) : cpu_(MakeCpuMesaOps(options)) {}
  absl::StatusOr<double> Forward(const MesaActs& in, const MesaSolve& solve, Act o,
                                 float* q_star) override {
    absl::StatusOr<double> steps = cpu_->Forward(in, solve, o, q_star);
    RoundAct(o, in.dims.TokenElems());
    return steps;
  }
  absl::StatusOr<double> Backward(const MesaActs& in, const float* q_star, Act d_o,
                                  const MesaSolve& solve, const MesaActGrads& grads) override {
    absl::StatusOr<double> steps = cpu_->Backward(in, q_star, d_o, solve, grads);
    for (Act a : {grads.dq, grads.dk, grads.dv}) RoundAct(a, in.dims.TokenElems());
    return steps;
  }

 private:
  std::unique_ptr<MesaOps> cpu_;
};
class RoundingDeltaNetOps final : public DeltaNetOps {
 public:
  explicit RoundingDeltaNetOps(const CpuBackendOptions& options)
      : cpu_(MakeCpuDeltaNetOps(options)) {}
  absl::Status Forward(const DeltaActs& in, Act o) override {
    absl::Status s = cpu_->Forward(in, o);
    RoundAct(o, in.dims.TokenElems());
    return s;
  }
  absl::Status Backward(const DeltaActs& in, Act d_o, const DeltaActGrads& grads) override {
    absl::Status s = cpu_->Backward(in, d_o, grads);
    for (Act a : {grads.dq, grads.dk, grads.dv}) RoundAct(a, in.dims.TokenElems());
    return s;
  }

 private:
  std::unique_ptr<DeltaNetOps> cpu_;
};
class RoundingAttentionOps final : public AttentionOps {
 public:
  explicit RoundingAttentionOps(const CpuBackendOptions& options)
      : cpu_(MakeCpuAttentionOps(options)) {}
  absl::Status Rotary(Act x, const AttnShape& shape, std::span<const int64_t> starts,
                      bool inverse) override {
    absl::Status s = cpu_->Rotary(x, shape, starts, inverse);
    RoundAct(x, shape.TokenElems());
    return s;
  }
  absl::Status Forward(const AttnActs& in, Act o) override {
    absl::Status s = cpu_->Forward(in, o);
    RoundAct(o, in.shape.TokenElems());
    return s;
  }
  absl::Status Backward(const AttnActs& in, Act o, Act d_o, Act dq, Act dk, Act dv) override {
    absl::Status s = cpu_->Backward(in, o, d_o, dq, dk, dv);
    for (Act a : {dq, dk, dv}) RoundAct(a, in.shape.TokenElems());
    return s;
  }
  absl::Status ForwardCached(const AttnActs& in, const KvCacheView& cache, int first_row,
                             Act o) override {
    return cpu_->ForwardCached(in, cache, first_row, o);
  }

 private:
  std::unique_ptr<AttentionOps> cpu_;
};
class RoundingRgLruOps final : public RgLruOps {
 public:
  explicit RoundingRgLruOps(const CpuBackendOptions& options) : cpu_(MakeCpuRgLruOps(options)) {}
  absl::Status Forward(const RgLruActs& in, Act h) override {
    absl::Status s = cpu_->Forward(in, h);
    RoundAct(h, in.batch * in.seq_len * in.width);
    return s;
  }
  absl::Status Backward(const RgLruActs& in, Act dh, const RgLruActGrads& grads) override {
    absl::Status s = cpu_->Backward(in, dh, grads);
    for (Act a : {grads.du, grads.drho, grads.diota}) RoundAct(a, in.batch * in.seq_len * in.width);
    return s;
  }

 private:
  std::unique_ptr<RgLruOps> cpu_;
};
class RoundingMlstmOps final : public MlstmOps {
 public:
  explicit RoundingMlstmOps(const CpuBackendOptions& options) : cpu_(MakeCpuMlstmOps(options)) {}
  absl::Status Forward(const MlstmActs& in, Act h) override {
    absl::Status s = cpu_->Forward(in, h);
    RoundAct(h, in.batch * in.seq_len * in.heads * in.head_dim);
    return s;
  }
  absl::Status Backward(const MlstmActs& in, Act dh, const MlstmActGrads& grads) override {
    absl::Status s = cpu_->Backward(in, dh, grads);
    for (Act a : {grads.dq, grads.dk, grads.dv}) {
      RoundAct(a, in.batch * in.seq_len * in.heads * in.head_dim);
    }
    for (Act a : {grads.di_pre, grads.df_pre}) RoundAct(a, in.batch * in.seq_len * in.heads);
    return s;
  }

 private:
  std::unique_ptr<MlstmOps> cpu_;
};
class RoundingSsdOps final : public SsdOps {
 public:
  explicit RoundingSsdOps(const CpuBackendOptions& options) : cpu_(MakeCpuSsdOps(options)) {}
  absl::Status Forward(const SsdActs& in, Act y) override {
    absl::Status s = cpu_->Forward(in, y);
    RoundAct(y, in.batch * in.seq_len * in.heads * in.head_dim);
    return s;
  }
  absl::Status Backward(const SsdActs& in, Act dy, const SsdActGrads& grads) override {
    absl::Status s = cpu_->Backward(in, dy, grads);
    RoundAct(grads.d_xbc, in.batch * in.seq_len * (in.heads * in.head_dim + 2 * in.state));
    RoundAct(grads.d_dt_pre, in.batch * in.seq_len * in.heads);
    return s;
  }

 private:
  std::unique_ptr<SsdOps> cpu_;
};
const bool kRoundingOpsRegistered =
    RegisterOps<SsdOps>(
        "cpu-bf16-rounding",
        [](Backend& b) -> std::unique_ptr<SsdOps> {
          return std::make_unique<RoundingSsdOps>(dynamic_cast<CpuBackend&>(b).options());
        }) &&
    RegisterOps<MlstmOps>(
        "cpu-bf16-rounding",
        [](Backend& b) -> std::unique_ptr<MlstmOps> {
          return std::make_unique<RoundingMlstmOps>(dynamic_cast<CpuBackend&>(b).options());
        }) &&
    RegisterOps<RgLruOps>(
        "cpu-bf16-rounding",
        [](Backend& b) -> std::unique_ptr<RgLruOps> {
          return std::make_unique<RoundingRgLruOps>(dynamic_cast<CpuBackend&>(b).options());
        }) &&
    RegisterOps<AttentionOps>(
        "cpu-bf16-rounding",
        [](Backend& b) -> std::unique_ptr<AttentionOps> {
          return std::make_unique<RoundingAttentionOps>(dynamic_cast<CpuBackend&>(b).options());
        }) &&
    RegisterOps<MesaOps>(
        "cpu-bf16-rounding",
        [](Backend& b) -> std::unique_ptr<MesaOps> {
          return std::make_unique<RoundingMesaOps>(dynamic_cast<CpuBackend&>(b).options());
        }) &&
    RegisterOps<DeltaNetOps>("cpu-bf16-rounding", [](Backend& b) -> std::unique_ptr<DeltaNetOps> {
      return std::make_unique<RoundingDeltaNetOps>(dynamic_cast<CpuBackend&>(b).options());
    });

// The float32 CPU backend with every activation it writes rounded to bf16, and bf16-rounded
// Linear weights: what storing activations and GEMM weights in bf16 does to a given instance,
// without the GPU. Used to tell an ill-conditioned instance (this model's gradients move as much)
// from a GPU error (they do not).
class Bf16RoundingCpuBackend : public CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  // Its mixer operators are the CPU ones with rounded outputs (registered below).
  std::string Name() const override { return "cpu-bf16-rounding"; }
  void ActivationsFromHost(Act dst, const float* src, int64_t n) override {
    CpuBackend::ActivationsFromHost(dst, src, n);
    Round(dst, n);
  }
  void LinearForwardStrided(Act in, const float* weight, Act out, int64_t ld, int64_t m, int64_t k,
                            int64_t n, bool accumulate) override {
    const Vec w = RoundedWeight(weight, n * k);
    CpuBackend::LinearForwardStrided(in, w.data(), out, ld, m, k, n, accumulate);
    RoundRows(out, m, n, ld);
  }
  void LinearBackwardStrided(Act in, const float* weight, Act d_out, int64_t ld, Act d_in,
                             float* d_weight, int64_t m, int64_t k, int64_t n,
                             bool accumulate_d_in) override {
    const Vec w = RoundedWeight(weight, n * k);
    CpuBackend::LinearBackwardStrided(in, w.data(), d_out, ld, d_in, d_weight, m, k, n,
                                      accumulate_d_in);
    if (d_in) Round(d_in, m * k);
  }
  void BiasForward(Act out, const float* bias, int64_t rows, int64_t n) override {
    CpuBackend::BiasForward(out, bias, rows, n);
    Round(out, rows * n);
  }
  void EmbeddingForward(const int32_t* tokens, const float* table, Act out, int64_t n, int64_t c,
                        float scale) override {
    CpuBackend::EmbeddingForward(tokens, table, out, n, c, scale);
    Round(out, n * c);
  }
  void RmsNormForward(Act x, const float* weight, Act out, float* rstd, int64_t rows, int64_t c,
                      float eps) override {
    CpuBackend::RmsNormForward(x, weight, out, rstd, rows, c, eps);
    Round(out, rows * c);
  }
  void RmsNormBackward(Act x, const float* weight, const float* rstd, Act d_out, Act d_x,
                       float* d_weight, int64_t rows, int64_t c) override {
    CpuBackend::RmsNormBackward(x, weight, rstd, d_out, d_x, d_weight, rows, c);
    Round(d_x, rows * c);
  }
  void CausalConvForward(Act x, const float* weight, Act out, int64_t b, int64_t t, int64_t ch,
                         int64_t w, const int32_t* doc_start) override {
    CpuBackend::CausalConvForward(x, weight, out, b, t, ch, w, doc_start);
    Round(out, b * t * ch);
  }
  void CausalConvBackward(Act x, const float* weight, Act d_out, Act d_x, float* d_weight,
                          int64_t b, int64_t t, int64_t ch, int64_t w,
                          const int32_t* doc_start) override {
    CpuBackend::CausalConvBackward(x, weight, d_out, d_x, d_weight, b, t, ch, w, doc_start);
    Round(d_x, b * t * ch);
  }
  void SiluL2NormForward(Act x, Act y, int64_t groups, int64_t d) override {
    CpuBackend::SiluL2NormForward(x, y, groups, d);
    Round(y, groups * d);
  }
  void SiluL2NormBackward(Act x, Act d_y, Act d_x, int64_t groups, int64_t d) override {
    CpuBackend::SiluL2NormBackward(x, d_y, d_x, groups, d);
    Round(d_x, groups * d);
  }
  void GatesBackward(Act a_pre, Act b_pre, const float* d_beta, const float* d_log_gamma,
                     Act d_a_pre, Act d_b_pre, int64_t n, float cap) override {
    CpuBackend::GatesBackward(a_pre, b_pre, d_beta, d_log_gamma, d_a_pre, d_b_pre, n, cap);
    Round(d_a_pre, n);
    if (d_b_pre) Round(d_b_pre, n);  // absent without an input gate (mamba2_mesa)
  }
  void SiluForward(Act x, Act y, int64_t n) override {
    CpuBackend::SiluForward(x, y, n);
    Round(y, n);
  }
  void SiluBackward(Act x, Act d_y, Act d_x, int64_t n) override {
    CpuBackend::SiluBackward(x, d_y, d_x, n);
    Round(d_x, n);
  }
  void SwiGluForward(Act gate, Act up, Act h, int64_t n) override {
    CpuBackend::SwiGluForward(gate, up, h, n);
    Round(h, n);
  }
  void SwiGluBackward(Act gate, Act up, Act d_h, Act d_gate, Act d_up, int64_t n) override {
    CpuBackend::SwiGluBackward(gate, up, d_h, d_gate, d_up, n);
    Round(d_gate, n);
    Round(d_up, n);
  }
  void AddInPlace(Act out, Act in, int64_t n) override {
    CpuBackend::AddInPlace(out, in, n);
    Round(out, n);
  }
  void SoftcapCrossEntropyBackward(Act logits, const int32_t* targets, const float* losses,
                                   int64_t rows, int64_t v, int64_t ld, float cap,
                                   int32_t ignore_token, float loss_scale) override {
    CpuBackend::SoftcapCrossEntropyBackward(logits, targets, losses, rows, v, ld, cap, ignore_token,
                                            loss_scale);
    RoundRows(logits, rows, v, ld);
  }

 private:
  static void Round(Act a, int64_t n) { RoundAct(a, n); }
  static void RoundRows(Act a, int64_t rows, int64_t n, int64_t ld) {
    float* p = static_cast<float*>(a.ptr);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) p[r * ld + j] = RoundBf16(p[r * ld + j]);
    }
  }
  static Vec RoundedWeight(const float* w, int64_t n) {
    Vec out(w, w + n);
    for (float& x : out) x = RoundBf16(x);
    return out;
  }
};

// The whole-model tests' model: d_model 256, 2 heads of 128, `layer_mixers` (empty: two Mesa
// layers), vocabulary 1001 with BOS 1000.
ModelConfig TestModelConfig(std::vector<MixerKind> layer_mixers, int attention_window,
                            bool reset_at_bos) {
  ModelConfig config;
  config.layer_mixers = std::move(layer_mixers);
  config.attention_window = attention_window;
  config.reset_at_bos = reset_at_bos;
  config.vocab_size = 1001;  // padded to 1008 unembedding rows: the padding path runs on the GPU
  config.d_model = 256;
  config.n_layers = config.layer_mixers.empty() ? 2 : static_cast<int>(config.layer_mixers.size());
  config.n_heads = 2;
  config.head_dim = 128;
  config.mlp_hidden = 768;
  config.cg_steps = config.MesaLayers() > 0 ? 30 : 0;  // only Mesa layers take CG steps
  config.bos_token = 1000;
  if (config.LayersOf(MixerKind::kHawk) > 0) config.rnn_width = 320;  // 1.25 x d_model
  if (config.LayersOf(MixerKind::kMamba2) > 0) {  // d_in = 2 d_model in SSD heads of 64, N 128
    config.ssm_inner = 512;
    config.ssm_head_dim = 64;
    config.ssm_state = 128;
  }
  return config;
}

// The CUDA model against the float32 CPU model on the same random weights and batch.
// `reset_at_bos`: packed documents, BOS tokens planted at irregular places (docs/math.md §8.6).
void CompareModels(ActivationType activations, GemmMath math, const ModelTols& tol,
                   std::vector<MixerKind> layer_mixers = {}, int attention_window = 0,
                   bool reset_at_bos = false) {
  const ModelConfig config =
      TestModelConfig(std::move(layer_mixers), attention_window, reset_at_bos);
  const int b = 2, t = 256;

  CudaBackendOptions gopt;
  gopt.activations = activations;
  gopt.gemm_math = math;
  auto gpu_or = CreateCudaBackend(gopt);
  ASSERT_TRUE(gpu_or.ok()) << gpu_or.status();
  std::unique_ptr<Backend> gpu = std::move(*gpu_or);
  ASSERT_EQ(gpu->activation_type(), activations);
  CpuBackendOptions copt;
  copt.num_threads = 8;
  CpuBackend cpu(copt);
  auto net_cpu_or = MesaNet::Create(config, &cpu, b, t);
  auto net_gpu_or = MesaNet::Create(config, gpu.get(), b, t);
  ASSERT_TRUE(net_cpu_or.ok()) << net_cpu_or.status();
  ASSERT_TRUE(net_gpu_or.ok()) << net_gpu_or.status();
  MesaNet& net_cpu = **net_cpu_or;
  MesaNet& net_gpu = **net_gpu_or;

  const uint32_t seed = FreshSeed();
  std::mt19937 rng(seed);
  net_cpu.InitializeParams(seed);
  std::vector<float> params(net_cpu.num_params());
  net_cpu.GetParamsToHost(params.data());
  std::normal_distribution<float> noise(0.f, 0.05f);
  for (float& p : params) p += noise(rng);  // no trivially structured tensors (norms all 1)
  net_cpu.SetParamsFromHost(params.data());
  net_gpu.SetParamsFromHost(params.data());

  std::vector<int32_t> tokens(b * t), targets(b * t);
  std::uniform_int_distribution<int32_t> tok(0, config.vocab_size - 1);
  for (auto& x : tokens) x = tok(rng);
  for (auto& x : targets) x = tok(rng);
  targets[7] = config.bos_token;
  if (reset_at_bos) {
    // Documents of 1, 40, 2 tokens, one across the 64-token chunks and attention tiles, ...
    for (int at : {5, 6, 46, 48, 100, 200, t + 3, t + 130}) tokens[at] = config.bos_token;
  }

  // "Model/<activations>[/<GEMM math>]"; the math only matters for float32 activations.
  std::string name = std::string("Model/") + ActivationTypeName(activations);
  for (MixerKind m : config.layer_mixers) name += std::string("/") + MixerName(m);
  if (reset_at_bos) name += "/documents";
  if (activations == ActivationType::kFloat32) name += std::string("/") + GemmMathName(math);
  std::printf("%s seed %u\n", name.c_str(), seed);
  ModelRun run_cpu, run_gpu;
  ASSERT_NO_FATAL_FAILURE(RunModel(net_cpu, tokens, targets, b, &run_cpu));
  ASSERT_NO_FATAL_FAILURE(RunModel(net_gpu, tokens, targets, b, &run_gpu));
  ModelTols bounds = tol;
  if (activations == ActivationType::kBfloat16) {
    // How far bf16 storage alone moves this instance's gradients: in the ill-conditioned tail a
    // fixed bound would flag the instance, not the GPU. The gradient bounds become the larger of
    // the fixed ones and kConditioning times this host model's deviation.
    constexpr double kConditioning = 3.0;
    Bf16RoundingCpuBackend rounding(copt);
    auto net_rounding_or = MesaNet::Create(config, &rounding, b, t);
    ASSERT_TRUE(net_rounding_or.ok()) << net_rounding_or.status();
    (*net_rounding_or)->SetParamsFromHost(params.data());
    ModelRun run_rounding;
    ASSERT_NO_FATAL_FAILURE(RunModel(**net_rounding_or, tokens, targets, b, &run_rounding));
    const double ref_all = RelErr(run_rounding.grads, run_cpu.grads);
    const double ref_median = MedianTensorError(run_rounding, run_cpu, net_cpu.layout());
    std::printf(
        "%s bf16-rounding CPU model vs float32 CPU model: all grads %.3e, median tensor "
        "%.3e\n",
        name.c_str(), ref_all, ref_median);
    bounds.all_grads = std::max(tol.all_grads, kConditioning * ref_all);
    bounds.median_grad = std::max(tol.median_grad, kConditioning * ref_median);
  }
  CompareRuns(name, run_gpu, run_cpu, net_cpu.layout(), bounds);
  CudaBackendControl* ctl = GetCudaControl(gpu.get());
  ASSERT_NE(ctl, nullptr);
  EXPECT_TRUE(ctl->Synchronize().ok()) << ctl->status();
}

// Measured maxima over 210 seeds in the comments (loss / token losses / logits / all grads /
// median tensor / worst non-gate tensor).
TEST(CudaModel, MatchesCpuFp32Gemms) {
  // 1.1e-5 / 1.1e-4 / 6.2e-4 / 1.3e-2 / 4.5e-3 / 3.6e-2
  CompareModels(ActivationType::kFloat32, GemmMath::kFp32, {2e-3, 2e-3, 1e-2, 5e-2, 2e-2, 1e-1});
}
TEST(CudaModel, MatchesCpuTf32Gemms) {
  // 2.2e-5 / 2.6e-4 / 1.3e-3 / 4.9e-2 / 6.9e-3 / 6.4e-2
  CompareModels(ActivationType::kFloat32, GemmMath::kTf32, {3e-3, 3e-3, 1e-2, 1.5e-1, 3e-2, 2e-1});
}
// bf16 activations and bf16 weight copies against the float32 CPU model: the difference is that
// of a bf16 forward and backward (every activation rounded to 8 significant bits). Medians over
// seeds: loss 5.7e-5, token losses 2.1e-3, logits 1.1e-2, all grads 1.7e-2, median tensor 1.7e-2;
// single tensors reach 0.55 in the ill-conditioned instances (printed, not bounded). Rarer
// instances go further (seed 944301639: all grads 1.35, median 0.38), and a host model rounding to
// bf16 (Bf16RoundingCpuBackend) moves just as far there (1.20 / 0.33), so the gradient bounds
// below are raised to 3x that host model's deviation on each instance (CompareModels).
TEST(CudaModel, MatchesCpuBf16Activations) {
  // 2.5e-4 / 2.7e-3 / 2.0e-2 / 3.3e-1 / 8.0e-2 / 5.9e-1
  CompareModels(ActivationType::kBfloat16, GemmMath::kTf32,
                {2e-2, 5e-2, 1e-1, 7.5e-1, 2.5e-1, kNoBound});
}

// The bounds of the bf16 model above, for hybrids whose other mixer's CUDA operator multiplies
// bf16 tensor-core operands even with fp32 activations.
constexpr ModelTols kBf16OperandTols = {2e-2, 5e-2, 1e-1, 7.5e-1, 2.5e-1, kNoBound};

// A [gated_deltanet, mesa] hybrid: the DeltaNet layer's CUDA op inside the whole model.
TEST(CudaModel, DeltaNetHybridMatchesCpu) {
  CompareModels(ActivationType::kFloat32, GemmMath::kFp32, kBf16OperandTols,
                {MixerKind::kGatedDeltaNet, MixerKind::kMesa});
  CompareModels(ActivationType::kBfloat16, GemmMath::kTf32, kBf16OperandTols,
                {MixerKind::kDeltaNet, MixerKind::kMesa});
}

// Packed documents (data.reset_at_bos) through every kind of mixer: the reset gates, the
// convolutions' and attention's document starts on the GPU against the CPU.
TEST(CudaModel, DocumentResetsMatchCpu) {
  CompareModels(ActivationType::kFloat32, GemmMath::kFp32, kBf16OperandTols,
                {MixerKind::kMesa, MixerKind::kDeltaNet, MixerKind::kGatedDeltaNet, MixerKind::kSwa,
                 MixerKind::kAttention},
                /*attention_window=*/64, /*reset_at_bos=*/true);
}

// A few AdamW steps of a tiny MesaNet with bf16 activations on one repeated, learnable batch
// (each sequence walks x -> (37 x + 11) mod 500; the target is the next token): the loss must drop.
// Attention hybrids: the CUDA attention operator, the rotary kernel and the rest of the model
// against the CPU. [swa, attention] with a window of 64 in sequences of 256.
TEST(CudaModel, AttentionHybridsMatchCpu) {
  CompareModels(ActivationType::kFloat32, GemmMath::kFp32, kBf16OperandTols,
                {MixerKind::kMesa, MixerKind::kAttention});
  CompareModels(ActivationType::kBfloat16, GemmMath::kTf32, kBf16OperandTols,
                {MixerKind::kSwa, MixerKind::kAttention}, /*attention_window=*/64);
}

// Hawk: the RG-LRU's CUDA scan, the GeLU gate and the block-diagonal gate GEMMs inside the whole
// model, alone and in the Hawk-MesaNet hybrid, float32 and bf16, with packed documents.
TEST(CudaModel, HawkMatchesCpu) {
  CompareModels(ActivationType::kFloat32, GemmMath::kFp32, kBf16OperandTols,
                {MixerKind::kHawk, MixerKind::kHawk});
  CompareModels(ActivationType::kBfloat16, GemmMath::kTf32, kBf16OperandTols,
                {MixerKind::kHawk, MixerKind::kMesa});
  CompareModels(ActivationType::kFloat32, GemmMath::kFp32, kBf16OperandTols,
                {MixerKind::kHawk, MixerKind::kMesa}, 0, /*reset_at_bos=*/true);
}

// mLSTM: the chunked CUDA kernels (stabiliser, normaliser, exact document resets) inside the
// whole model, alone and beside Mesa, float32 and bf16, with packed documents.
TEST(CudaModel, MlstmMatchesCpu) {
  CompareModels(ActivationType::kFloat32, GemmMath::kFp32, kBf16OperandTols,
                {MixerKind::kMlstm, MixerKind::kMlstm});
  CompareModels(ActivationType::kBfloat16, GemmMath::kTf32, kBf16OperandTols,
                {MixerKind::kMlstm, MixerKind::kMesa});
  CompareModels(ActivationType::kFloat32, GemmMath::kFp32, kBf16OperandTols,
                {MixerKind::kMlstm, MixerKind::kMesa}, 0, /*reset_at_bos=*/true);
}

// Mamba-2's SSD block: the gated scan with the plain readout, the packed per-head B and C and
// their head sums inside the whole model, alone and beside Mesa, float32 and bf16, with packed
// documents.
TEST(CudaModel, Mamba2MatchesCpu) {
  CompareModels(ActivationType::kFloat32, GemmMath::kFp32, kBf16OperandTols,
                {MixerKind::kMamba2, MixerKind::kMamba2});
  CompareModels(ActivationType::kBfloat16, GemmMath::kTf32, kBf16OperandTols,
                {MixerKind::kMamba2, MixerKind::kMesa});
  CompareModels(ActivationType::kFloat32, GemmMath::kFp32, kBf16OperandTols,
                {MixerKind::kMamba2, MixerKind::kMesa}, 0, /*reset_at_bos=*/true);
}

// The paper's "Mamba2" (mamba2_mesa): the gate kernels without an input gate (beta = 1).
TEST(CudaModel, Mamba2MesaMatchesCpu) {
  CompareModels(ActivationType::kFloat32, GemmMath::kFp32, kBf16OperandTols,
                {MixerKind::kMamba2Mesa, MixerKind::kMesa});
  CompareModels(ActivationType::kBfloat16, GemmMath::kTf32, kBf16OperandTols,
                {MixerKind::kMamba2Mesa, MixerKind::kMamba2Mesa});
}

// Runs a two-layer `mixer` model twice on the same weights and batch (bf16 activations, the
// training setup, document resets) with training.deterministic as given; whether the loss,
// logits and gradients repeat bit for bit is printed, and asserted when `assert_repeats`.
void CheckRepeats(MixerKind mixer, bool deterministic, bool assert_repeats) {
  const ModelConfig config = TestModelConfig({mixer, mixer}, mixer == MixerKind::kSwa ? 128 : 0,
                                             /*reset_at_bos=*/true);
  const int b = 4, t = 1024;
  CudaBackendOptions gopt;
  gopt.activations = ActivationType::kBfloat16;
  gopt.deterministic = deterministic;
  auto gpu_or = CreateCudaBackend(gopt);
  ASSERT_TRUE(gpu_or.ok()) << gpu_or.status();
  std::unique_ptr<Backend> gpu = std::move(*gpu_or);
  auto net_or = MesaNet::Create(config, gpu.get(), b, t);
  ASSERT_TRUE(net_or.ok()) << net_or.status();
  MesaNet& net = **net_or;
  const uint32_t seed = FreshSeed();
  net.InitializeParams(seed);
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(b * t), targets(b * t);
  std::uniform_int_distribution<int32_t> tok(0, config.vocab_size - 1);
  for (auto& x : tokens) x = tok(rng);
  for (auto& x : targets) x = tok(rng);
  for (int at : {5, 300, 1500, 3000}) tokens[at] = config.bos_token;
  ModelRun first, second;
  ASSERT_NO_FATAL_FAILURE(RunModel(net, tokens, targets, b, &first));
  ASSERT_NO_FATAL_FAILURE(RunModel(net, tokens, targets, b, &second));
  auto same = [](const Vec& x, const Vec& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  const bool repeats = first.stats.loss_sum == second.stats.loss_sum &&
                       same(first.losses, second.losses) && same(first.logits, second.logits) &&
                       same(first.grads, second.grads);
  std::printf("Repeat/%s%s seed %u: loss %s, gradients %s%s\n", MixerName(mixer),
              deterministic ? " (deterministic)" : "", seed,
              first.stats.loss_sum == second.stats.loss_sum ? "same" : "differ",
              same(first.grads, second.grads) ? "same bits" : "differ",
              assert_repeats ? "" : " (float atomics: not asserted)");
  if (assert_repeats) {
    EXPECT_TRUE(repeats) << MixerName(mixer) << " seed " << seed;
  }
}

// Run to run on one GPU, one single-mixer model per mixer. The attention mixers accumulate dQ
// with float atomics unless training.deterministic is on (docs/trainer.md, "Determinism on the
// GPU"): without the switch they are printed, with it asserted like every other mixer.
TEST(CudaModel, RepeatsBitForBit) {
  for (MixerKind mixer :
       {MixerKind::kMesa, MixerKind::kGla, MixerKind::kHawk, MixerKind::kMlstm, MixerKind::kMamba2,
        MixerKind::kMamba2Mesa, MixerKind::kDeltaNet, MixerKind::kGatedDeltaNet}) {
    CheckRepeats(mixer, /*deterministic=*/false, /*assert_repeats=*/true);
  }
  for (MixerKind mixer : {MixerKind::kAttention, MixerKind::kSwa}) {
    CheckRepeats(mixer, /*deterministic=*/false, /*assert_repeats=*/false);
    CheckRepeats(mixer, /*deterministic=*/true, /*assert_repeats=*/true);
  }
}

TEST(CudaModel, Bf16TrainingLossDrops) {
  ModelConfig config;
  config.vocab_size = 512;
  config.d_model = 128;
  config.n_layers = 2;
  config.n_heads = 2;
  config.head_dim = 64;
  config.mlp_hidden = 384;
  config.cg_steps = 10;
  config.bos_token = 511;
  const int b = 4, t = 128;
  // The float32 CPU model goes from ~7.2 to ~0.03 in these 20 steps (0.005 of the first loss).
  const int kSteps = 20;
  const float kLr = 3e-3f;

  CudaBackendOptions gopt;
  gopt.activations = ActivationType::kBfloat16;
  gopt.exact_cg_steps = false;
  auto gpu_or = CreateCudaBackend(gopt);
  ASSERT_TRUE(gpu_or.ok()) << gpu_or.status();
  std::unique_ptr<Backend> gpu = std::move(*gpu_or);
  auto net_or = MesaNet::Create(config, gpu.get(), b, t);
  ASSERT_TRUE(net_or.ok()) << net_or.status();
  MesaNet& net = **net_or;
  const uint32_t seed = FreshSeed();
  net.InitializeParams(seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> start(0, 499);
  std::vector<int32_t> tokens(b * t), targets(b * t);
  for (int s = 0; s < b; ++s) {
    int32_t x = start(rng);
    for (int i = 0; i < t; ++i) {
      tokens[s * t + i] = x;
      x = (37 * x + 11) % 500;
      targets[s * t + i] = x;
    }
  }
  const int64_t n = net.num_params();
  float* m = gpu->AllocateFloats(n);
  float* v = gpu->AllocateFloats(n);
  ASSERT_NE(m, nullptr);
  ASSERT_NE(v, nullptr);
  MesaSolve solve;
  solve.max_steps = config.cg_steps;
  double first = NAN, last = NAN;
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 1; step <= kSteps; ++step) {
    auto f = net.Forward(tokens.data(), targets.data(), b, solve);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(f->finite) << "step " << step;
    const double loss = f->loss_sum / f->loss_tokens;
    if (step == 1) first = loss;
    last = loss;
    if (step == 1 || step % 10 == 0) std::printf("Train/bf16 step %d loss %.4f\n", step, loss);
    net.ZeroGrads();
    auto bw = net.Backward(1.0f / f->loss_tokens);
    ASSERT_TRUE(bw.ok()) << bw.status();
    gpu->AdamWUpdate(net.params(), net.grads(), m, v, n, kLr, 0.9f, 0.98f, 1e-8f, 0.0f,
                     1.0f - std::pow(0.9f, static_cast<float>(step)),
                     1.0f - std::pow(0.98f, static_cast<float>(step)));
  }
  CudaBackendControl* ctl = GetCudaControl(gpu.get());
  ASSERT_NE(ctl, nullptr);
  EXPECT_TRUE(ctl->Synchronize().ok()) << ctl->status();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("Train/bf16 loss %.4f -> %.4f in %d AdamW steps (%.2f s)\n", first, last, kSteps,
              seconds);
  Expect("Train/bf16", "loss_ratio", last / first, 0.2);
  gpu->Free(m);
  gpu->Free(v);
}

}  // namespace
}  // namespace mesa::model::cuda_test
