#include "model/backend/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/conv/causal_conv_step.h"
#include "model/inference/sampler.h"
#include "model/layers/cpu_layers.h"

namespace mesa::model {
namespace {

// Runs fn(begin, end) over [0, n) split into `threads` static, contiguous chunks (chunk k always
// covers the same rows, so results do not depend on scheduling). Small inputs run inline.
void ParallelFor(int64_t n, int threads, int64_t min_per_thread,
                 const std::function<void(int, int64_t, int64_t)>& fn) {
  const int chunks = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(threads, n / std::max<int64_t>(1, min_per_thread))));
  if (chunks <= 1) {
    fn(0, 0, n);
    return;
  }
  std::vector<std::thread> workers;
  for (int k = 1; k < chunks; ++k) {
    workers.emplace_back(fn, k, n * k / chunks, n * (k + 1) / chunks);
  }
  fn(0, 0, n / chunks);
  for (std::thread& w : workers) w.join();
}

constexpr int64_t kMinElementsPerThread = 1 << 15;

// CPU activations are float32: an Act is a float buffer.
float* F(Act act) { return static_cast<float*>(act.ptr); }

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options) : options_(options) {
  if (options_.num_threads <= 0) {
    options_.num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  openblas_set_num_threads(options_.num_threads);
}

float* CpuBackend::AllocateFloats(int64_t n) {
  return static_cast<float*>(std::calloc(std::max<int64_t>(n, 1), sizeof(float)));
}
int32_t* CpuBackend::AllocateInts(int64_t n) {
  return static_cast<int32_t*>(std::calloc(std::max<int64_t>(n, 1), sizeof(int32_t)));
}
Act CpuBackend::AllocateActivations(int64_t n) { return {AllocateFloats(n)}; }
void CpuBackend::Free(void* ptr) { std::free(ptr); }
void CpuBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuBackend::Zero(float* ptr, int64_t n) { std::memset(ptr, 0, sizeof(float) * n); }

void CpuBackend::Copy(float* dst, const float* src, int64_t n) {
  std::memcpy(dst, src, sizeof(float) * n);
}
void CpuBackend::ZeroActivations(Act ptr, int64_t n) { Zero(F(ptr), n); }
void CpuBackend::CopyActivations(Act dst, Act src, int64_t n) { Copy(F(dst), F(src), n); }
void CpuBackend::ActivationsToHost(float* dst, Act src, int64_t n) {
  CopyToHost(dst, F(src), sizeof(float) * n);
}
void CpuBackend::ActivationsFromHost(Act dst, const float* src, int64_t n) {
  CopyToDevice(F(dst), src, sizeof(float) * n);
}

void CpuBackend::LinearForwardStrided(Act in, const float* weight, Act out, int64_t ld, int64_t m,
                                      int64_t k, int64_t n, bool accumulate) {
  cpu::LinearForwardStrided(F(in), weight, F(out), ld, m, k, n, accumulate);
}
void CpuBackend::LinearBackwardStrided(Act in, const float* weight, Act d_out, int64_t ld, Act d_in,
                                       float* d_weight, int64_t m, int64_t k, int64_t n,
                                       bool accumulate_d_in) {
  cpu::LinearBackwardStrided(F(in), weight, F(d_out), ld, F(d_in), d_weight, m, k, n,
                             accumulate_d_in);
}
void CpuBackend::BiasForward(Act out, const float* bias, int64_t rows, int64_t n) {
  cpu::BiasForward(F(out), bias, rows, n);
}
void CpuBackend::BiasBackward(Act d_out, float* d_bias, int64_t rows, int64_t n) {
  cpu::BiasBackward(F(d_out), d_bias, rows, n);
}
void CpuBackend::EmbeddingForward(const int32_t* tokens, const float* table, Act out, int64_t n,
                                  int64_t c, float scale) {
  cpu::EmbeddingForward(tokens, table, F(out), n, c, scale);
}
void CpuBackend::EmbeddingBackward(const int32_t* tokens, Act d_out, float* d_table, int64_t n,
                                   int64_t c, float scale) {
  cpu::EmbeddingBackward(tokens, F(d_out), d_table, n, c, scale);
}
void CpuBackend::RmsNormForward(Act x_act, const float* weight, Act out_act, float* rstd,
                                int64_t rows, int64_t c, float eps) {
  const float* x = F(x_act);
  float* out = F(out_act);
  ParallelFor(rows, options_.num_threads, kMinElementsPerThread / c + 1,
              [&](int, int64_t b, int64_t e) {
                cpu::RmsNormForward(x + b * c, weight, out + b * c, rstd + b, e - b, c, eps);
              });
}
void CpuBackend::RmsNormBackward(Act x_act, const float* weight, const float* rstd, Act d_out_act,
                                 Act d_x_act, float* d_weight, int64_t rows, int64_t c) {
  const float* x = F(x_act);
  const float* d_out = F(d_out_act);
  float* d_x = F(d_x_act);
  // Each chunk accumulates its own d_weight; they are added in chunk order (deterministic).
  std::vector<std::vector<float>> partial(options_.num_threads, std::vector<float>(c, 0.0f));
  ParallelFor(rows, options_.num_threads, kMinElementsPerThread / c + 1,
              [&](int k, int64_t b, int64_t e) {
                cpu::RmsNormBackward(x + b * c, weight, rstd + b, d_out + b * c, d_x + b * c,
                                     partial[k].data(), e - b, c);
              });
  for (const std::vector<float>& p : partial) {
    for (int64_t j = 0; j < c; ++j) d_weight[j] += p[j];
  }
}
void CpuBackend::CausalConvForward(Act x, const float* weight, Act out, int64_t b, int64_t t,
                                   int64_t ch, int64_t w, const int32_t* doc_start) {
  cpu::CausalConvForward(F(x), weight, F(out), b, t, ch, w, doc_start);
}
void CpuBackend::CausalConvBackward(Act x, const float* weight, Act d_out, Act d_x, float* d_weight,
                                    int64_t b, int64_t t, int64_t ch, int64_t w,
                                    const int32_t* doc_start) {
  cpu::CausalConvBackward(F(x), weight, F(d_out), F(d_x), d_weight, b, t, ch, w, doc_start);
}
void CpuBackend::FillAtDocumentStarts(float* x, const int32_t* doc_start, int64_t b, int64_t t,
                                      int64_t cols, float value) {
  cpu::FillAtDocumentStarts(x, doc_start, b, t, cols, value);
}
absl::Status CpuBackend::CausalConvTailBackward(const float* tail, const float* d_tail_out,
                                                const float* weight, Act d_out, Act d_x,
                                                float* d_tail, float* d_weight, int64_t b,
                                                int64_t t, int64_t ch, int64_t w) {
  if (t < w - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a context-parallel slice of ", t,
                     " tokens is shorter than the convolution's tail ", w - 1));
  }
  cpu::CausalConvTailBackward(tail, d_tail_out, weight, F(d_out), F(d_x), d_tail, d_weight, b, t,
                              ch, w);
  return absl::OkStatus();
}
void CpuBackend::SiluL2NormForward(Act x_act, Act y_act, int64_t groups, int64_t d) {
  const float* x = F(x_act);
  float* y = F(y_act);
  ParallelFor(
      groups, options_.num_threads, kMinElementsPerThread / d + 1,
      [&](int, int64_t b, int64_t e) { cpu::SiluL2NormForward(x + b * d, y + b * d, e - b, d); });
}
void CpuBackend::SiluL2NormBackward(Act x_act, Act d_y_act, Act d_x_act, int64_t groups,
                                    int64_t d) {
  const float* x = F(x_act);
  const float* d_y = F(d_y_act);
  float* d_x = F(d_x_act);
  ParallelFor(groups, options_.num_threads, kMinElementsPerThread / d + 1,
              [&](int, int64_t b, int64_t e) {
                cpu::SiluL2NormBackward(x + b * d, d_y + b * d, d_x + b * d, e - b, d);
              });
}
void CpuBackend::GatesForward(Act a_pre, Act b_pre, float* beta, float* log_gamma, int64_t n,
                              float cap) {
  cpu::GatesForward(F(a_pre), b_pre ? F(b_pre) : nullptr, beta, log_gamma, n, cap);
}
void CpuBackend::GatesBackward(Act a_pre, Act b_pre, const float* d_beta, const float* d_log_gamma,
                               Act d_a_pre, Act d_b_pre, int64_t n, float cap) {
  cpu::GatesBackward(F(a_pre), b_pre ? F(b_pre) : nullptr, d_beta, d_log_gamma, F(d_a_pre),
                     d_b_pre ? F(d_b_pre) : nullptr, n, cap);
}
void CpuBackend::LambdaForward(const float* p, float* lambda, int64_t n, float floor) {
  cpu::LambdaForward(p, lambda, n, floor);
}
void CpuBackend::LambdaBackward(const float* p, const float* d_lambda, float* d_p, int64_t n) {
  cpu::LambdaBackward(p, d_lambda, d_p, n);
}
void CpuBackend::SwiGluForward(Act gate_act, Act up_act, Act h_act, int64_t n) {
  const float* gate = F(gate_act);
  const float* up = F(up_act);
  float* h = F(h_act);
  ParallelFor(n, options_.num_threads, kMinElementsPerThread, [&](int, int64_t b, int64_t e) {
    cpu::SwiGluForward(gate + b, up + b, h + b, e - b);
  });
}
void CpuBackend::SwiGluBackward(Act gate_act, Act up_act, Act d_h_act, Act d_gate_act, Act d_up_act,
                                int64_t n) {
  const float* gate = F(gate_act);
  const float* up = F(up_act);
  const float* d_h = F(d_h_act);
  float* d_gate = F(d_gate_act);
  float* d_up = F(d_up_act);
  ParallelFor(n, options_.num_threads, kMinElementsPerThread, [&](int, int64_t b, int64_t e) {
    cpu::SwiGluBackward(gate + b, up + b, d_h + b, d_gate + b, d_up + b, e - b);
  });
}
void CpuBackend::SiluForward(Act x, Act y, int64_t n) {
  ParallelFor(n, options_.num_threads, kMinElementsPerThread,
              [&](int, int64_t b, int64_t e) { cpu::SiluForward(F(x) + b, F(y) + b, e - b); });
}
void CpuBackend::SiluBackward(Act x, Act d_y, Act d_x, int64_t n) {
  ParallelFor(n, options_.num_threads, kMinElementsPerThread, [&](int, int64_t b, int64_t e) {
    cpu::SiluBackward(F(x) + b, F(d_y) + b, F(d_x) + b, e - b);
  });
}
void CpuBackend::GeluGateForward(Act y_pre, Act x, Act out, int64_t n) {
  ParallelFor(n, options_.num_threads, kMinElementsPerThread, [&](int, int64_t b, int64_t e) {
    cpu::GeluGateForward(F(y_pre) + b, F(x) + b, F(out) + b, e - b);
  });
}
void CpuBackend::GeluGateBackward(Act y_pre, Act x, Act d_out, Act d_y_pre, Act d_x, int64_t n) {
  ParallelFor(n, options_.num_threads, kMinElementsPerThread, [&](int, int64_t b, int64_t e) {
    cpu::GeluGateBackward(F(y_pre) + b, F(x) + b, F(d_out) + b, F(d_y_pre) + b, F(d_x) + b, e - b);
  });
}
void CpuBackend::BlockDiagonalLinearForward(Act in, const float* weight, Act out, int64_t m,
                                            int64_t blocks, int64_t width, bool accumulate) {
  cpu::BlockDiagonalLinearForward(F(in), weight, F(out), m, blocks, width, accumulate);
}
void CpuBackend::BlockDiagonalLinearBackward(Act in, const float* weight, Act d_out, Act d_in,
                                             float* d_weight, int64_t m, int64_t blocks,
                                             int64_t width, bool accumulate_d_in) {
  cpu::BlockDiagonalLinearBackward(F(in), weight, F(d_out), d_in.ptr == nullptr ? nullptr : F(d_in),
                                   d_weight, m, blocks, width, accumulate_d_in);
}
void CpuBackend::AddInPlace(Act out, Act in, int64_t n) { cpu::AddInPlace(F(out), F(in), n); }
void CpuBackend::SoftcapSample(Act logits, int64_t rows, int64_t v, int64_t ld, float cap,
                               const SamplingRow* params, int32_t* tokens, float* logprobs) {
  const float* base = F(logits);
  std::vector<float> capped(v);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = base + r * ld;
    std::copy(row, row + v, capped.begin());
    SoftCapLogits(cap, capped);
    const SamplingRow& p = params[r];
    absl::StatusOr<SampledToken> t = SampleToken(
        capped, {.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .seed = p.seed},
        p.draw);
    // Settings and logits are checked by the caller (the sampler's own rules); a failure here is a
    // programming error, reported as token -1.
    tokens[r] = t.ok() ? t->token : -1;
    logprobs[r] = t.ok() ? static_cast<float>(t->logprob) : NAN;
    if (!t.ok())
      std::fprintf(stderr, "SoftcapSample: %s\n", std::string(t.status().message()).c_str());
  }
}

void CpuBackend::SoftcapArgmax(Act logits, int64_t rows, int64_t v, int64_t ld, float cap,
                               int32_t* tokens, float* logprobs) {
  cpu::SoftcapArgmax(F(logits), rows, v, ld, cap, tokens, logprobs);
}

void CpuBackend::CausalConvAppend(Act x, const float* weight, float* tail, Act out, int64_t b,
                                  int64_t t, int64_t ch, int64_t w) {
  const kernels::cpu::ConvDims dims{b, t, ch, w};
  const size_t n = static_cast<size_t>(dims.InputElems());
  // Shapes come from the model's plan; a failure here is a programming error.
  absl::Status s = kernels::cpu::CausalConvAppend(
      dims, {F(x), n}, {weight, static_cast<size_t>(dims.WeightElems())},
      {tail, static_cast<size_t>(dims.TailElems())}, {F(out), n});
  if (!s.ok()) std::fprintf(stderr, "CausalConvAppend: %s\n", std::string(s.message()).c_str());
}

double CpuBackend::SoftcapCrossEntropyForward(Act logits_act, const int32_t* targets, float* losses,
                                              int64_t rows, int64_t v, int64_t ld, float cap,
                                              int32_t ignore_token) {
  const float* logits = F(logits_act);
  std::vector<double> partial(options_.num_threads, 0.0);
  ParallelFor(rows, options_.num_threads, kMinElementsPerThread / v + 1,
              [&](int k, int64_t b, int64_t e) {
                partial[k] = cpu::SoftcapCrossEntropyForward(
                    logits + b * ld, targets + b, losses + b, e - b, v, ld, cap, ignore_token);
              });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}
void CpuBackend::SoftcapCrossEntropyBackward(Act logits_act, const int32_t* targets,
                                             const float* /*losses*/, int64_t rows, int64_t v,
                                             int64_t ld, float cap, int32_t ignore_token,
                                             float loss_scale) {
  float* logits = F(logits_act);
  ParallelFor(rows, options_.num_threads, kMinElementsPerThread / v + 1,
              [&](int, int64_t b, int64_t e) {
                cpu::SoftcapCrossEntropyBackward(logits + b * ld, targets + b, e - b, v, ld, cap,
                                                 ignore_token, loss_scale);
              });
}

double CpuBackend::SumOfSquares(const float* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

void CpuBackend::Scale(float* x, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

void CpuBackend::AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             float bias_correction1, float bias_correction2) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i];
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float m_hat = m[i] / bias_correction1;
    const float v_hat = v[i] / bias_correction2;
    // Decoupled weight decay (AdamW).
    params[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + weight_decay * params[i]);
  }
}

}  // namespace mesa::model
