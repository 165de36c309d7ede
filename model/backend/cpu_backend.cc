#include "model/backend/cpu_backend.h"

#include <cblas.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "model/layers/cpu_layers.h"

namespace mesa::model {
namespace {

// Runs fn(begin, end) over [0, n) split into `threads` static, contiguous chunks (chunk k always
// covers the same rows, so results do not depend on scheduling). Small inputs run inline.
void ParallelFor(int64_t n, int threads, int64_t min_per_thread,
                 const std::function<void(int, int64_t, int64_t)>& fn) {
  const int chunks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n / std::max<int64_t>(1, min_per_thread))));
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

void CpuBackend::LinearForward(const float* in, const float* weight, float* out, int64_t m,
                               int64_t k, int64_t n, bool accumulate) {
  cpu::LinearForward(in, weight, out, m, k, n, accumulate);
}
void CpuBackend::LinearBackward(const float* in, const float* weight, const float* d_out,
                                float* d_in, float* d_weight, int64_t m, int64_t k, int64_t n) {
  cpu::LinearBackward(in, weight, d_out, d_in, d_weight, m, k, n);
}
void CpuBackend::LinearForwardStrided(const float* in, const float* weight, float* out,
                                      int64_t ld, int64_t m, int64_t k, int64_t n,
                                      bool accumulate) {
  cpu::LinearForwardStrided(in, weight, out, ld, m, k, n, accumulate);
}
void CpuBackend::LinearBackwardStrided(const float* in, const float* weight, const float* d_out,
                                       int64_t ld, float* d_in, float* d_weight, int64_t m,
                                       int64_t k, int64_t n) {
  cpu::LinearBackwardStrided(in, weight, d_out, ld, d_in, d_weight, m, k, n);
}
void CpuBackend::BiasForward(float* out, const float* bias, int64_t rows, int64_t n) {
  cpu::BiasForward(out, bias, rows, n);
}
void CpuBackend::BiasBackward(const float* d_out, float* d_bias, int64_t rows, int64_t n) {
  cpu::BiasBackward(d_out, d_bias, rows, n);
}
void CpuBackend::EmbeddingForward(const int32_t* tokens, const float* table, float* out,
                                  int64_t n, int64_t c, float scale) {
  cpu::EmbeddingForward(tokens, table, out, n, c, scale);
}
void CpuBackend::EmbeddingBackward(const int32_t* tokens, const float* d_out, float* d_table,
                                   int64_t n, int64_t c, float scale) {
  cpu::EmbeddingBackward(tokens, d_out, d_table, n, c, scale);
}
void CpuBackend::RmsNormForward(const float* x, const float* weight, float* out, float* rstd,
                                int64_t rows, int64_t c, float eps) {
  ParallelFor(rows, options_.num_threads, kMinElementsPerThread / c + 1,
              [&](int, int64_t b, int64_t e) {
                cpu::RmsNormForward(x + b * c, weight, out + b * c, rstd + b, e - b, c, eps);
              });
}
void CpuBackend::RmsNormBackward(const float* x, const float* weight, const float* rstd,
                                 const float* d_out, float* d_x, float* d_weight, int64_t rows,
                                 int64_t c) {
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
void CpuBackend::CausalConvForward(const float* x, const float* weight, float* out, int64_t b,
                                   int64_t t, int64_t ch, int64_t w) {
  cpu::CausalConvForward(x, weight, out, b, t, ch, w);
}
void CpuBackend::CausalConvBackward(const float* x, const float* weight, const float* d_out,
                                    float* d_x, float* d_weight, int64_t b, int64_t t, int64_t ch,
                                    int64_t w) {
  cpu::CausalConvBackward(x, weight, d_out, d_x, d_weight, b, t, ch, w);
}
void CpuBackend::SiluL2NormForward(const float* x, float* y, int64_t groups, int64_t d) {
  ParallelFor(groups, options_.num_threads, kMinElementsPerThread / d + 1,
              [&](int, int64_t b, int64_t e) {
                cpu::SiluL2NormForward(x + b * d, y + b * d, e - b, d);
              });
}
void CpuBackend::SiluL2NormBackward(const float* x, const float* d_y, float* d_x, int64_t groups,
                                    int64_t d) {
  ParallelFor(groups, options_.num_threads, kMinElementsPerThread / d + 1,
              [&](int, int64_t b, int64_t e) {
                cpu::SiluL2NormBackward(x + b * d, d_y + b * d, d_x + b * d, e - b, d);
              });
}
void CpuBackend::GatesForward(const float* a_pre, const float* b_pre, float* beta,
                              float* log_gamma, int64_t n, float cap) {
  cpu::GatesForward(a_pre, b_pre, beta, log_gamma, n, cap);
}
void CpuBackend::GatesBackward(const float* a_pre, const float* b_pre, const float* d_beta,
                               const float* d_log_gamma, float* d_a_pre, float* d_b_pre,
                               int64_t n, float cap) {
  cpu::GatesBackward(a_pre, b_pre, d_beta, d_log_gamma, d_a_pre, d_b_pre, n, cap);
}
void CpuBackend::LambdaForward(const float* p, float* lambda, int64_t n, float floor) {
  cpu::LambdaForward(p, lambda, n, floor);
}
void CpuBackend::LambdaBackward(const float* p, const float* d_lambda, float* d_p, int64_t n) {
  cpu::LambdaBackward(p, d_lambda, d_p, n);
}
void CpuBackend::SwiGluForward(const float* gate, const float* up, float* h, int64_t n) {
  ParallelFor(n, options_.num_threads, kMinElementsPerThread, [&](int, int64_t b, int64_t e) {
    cpu::SwiGluForward(gate + b, up + b, h + b, e - b);
  });
}
void CpuBackend::SwiGluBackward(const float* gate, const float* up, const float* d_h,
                                float* d_gate, float* d_up, int64_t n) {
  ParallelFor(n, options_.num_threads, kMinElementsPerThread, [&](int, int64_t b, int64_t e) {
    cpu::SwiGluBackward(gate + b, up + b, d_h + b, d_gate + b, d_up + b, e - b);
  });
}
void CpuBackend::AddInPlace(float* out, const float* in, int64_t n) {
  cpu::AddInPlace(out, in, n);
}
double CpuBackend::SoftcapCrossEntropyForward(const float* logits, const int32_t* targets,
                                              float* losses, int64_t rows, int64_t v, int64_t ld,
                                              float cap, int32_t ignore_token) {
  std::vector<double> partial(options_.num_threads, 0.0);
  ParallelFor(rows, options_.num_threads, kMinElementsPerThread / v + 1,
              [&](int k, int64_t b, int64_t e) {
                partial[k] = cpu::SoftcapCrossEntropyForward(logits + b * ld, targets + b,
                                                             losses + b, e - b, v, ld, cap,
                                                             ignore_token);
              });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}
void CpuBackend::SoftcapCrossEntropyBackward(float* logits, const int32_t* targets, int64_t rows,
                                             int64_t v, int64_t ld, float cap,
                                             int32_t ignore_token, float loss_scale) {
  ParallelFor(rows, options_.num_threads, kMinElementsPerThread / v + 1,
              [&](int, int64_t b, int64_t e) {
                cpu::SoftcapCrossEntropyBackward(logits + b * ld, targets + b, e - b, v, ld, cap,
                                                 ignore_token, loss_scale);
              });
}

kernels::MesaOptions CpuBackend::MesaOptionsFor(const MesaSolve& solve) const {
  kernels::MesaOptions options;
  options.impl = options_.mesa_impl;
  options.cg.max_steps = solve.max_steps;
  options.cg.tolerance = solve.tolerance;
  options.num_threads = options_.num_threads;
  options.memory = kernels::MemorySpace::kHost;
  return options;
}

absl::StatusOr<double> CpuBackend::MesaForward(const kernels::MesaInputs& in,
                                               const MesaSolve& solve,
                                               const kernels::MesaForwardOutputs& out) {
  kernels::MesaForwardOutputs outputs = out;
  absl::Status status = kernels::MesaForward(in, MesaOptionsFor(solve), &outputs);
  if (!status.ok()) return status;
  return outputs.cg_steps_mean;
}

absl::StatusOr<double> CpuBackend::MesaBackward(const kernels::MesaInputs& in,
                                                const kernels::MesaBackwardInputs& bwd,
                                                const MesaSolve& solve,
                                                const kernels::MesaGradients& grads) {
  kernels::MesaGradients gradients = grads;
  absl::Status status = kernels::MesaBackward(in, bwd, MesaOptionsFor(solve), &gradients);
  if (!status.ok()) return status;
  return gradients.cg_steps_mean;
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
