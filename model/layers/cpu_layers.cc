#include "model/layers/cpu_layers.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace mesa::model::cpu {
namespace {

void Gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}
void Gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

template <typename T>
T Sigmoid(T x) {
  return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
}
template <typename T>
T Softplus(T x) {  // log(1 + e^x) without overflow.
  return std::max(x, T(0)) + std::log1p(std::exp(-std::abs(x)));
}

constexpr double kL2NormEps = 1e-6;

}  // namespace

void FillAtDocumentStarts(float* x, const int32_t* doc_start, int64_t b, int64_t t, int64_t cols,
                          float value) {
  for (int64_t r = 0; r < b * t; ++r) {
    if (doc_start[r] == r % t) std::fill(x + r * cols, x + (r + 1) * cols, value);
  }
}

template <typename T>
void LinearForwardStrided(const T* in, const T* weight, T* out, int64_t ld, int64_t m, int64_t k,
                          int64_t n, bool accumulate) {
  Gemm(CblasNoTrans, CblasTrans, m, n, k, in, k, weight, k, accumulate ? T(1) : T(0), out, ld);
}

template <typename T>
void LinearBackwardStrided(const T* in, const T* weight, const T* d_out, int64_t ld, T* d_in,
                           T* d_weight, int64_t m, int64_t k, int64_t n, bool accumulate_d_in) {
  if (d_in != nullptr) {
    Gemm(CblasNoTrans, CblasNoTrans, m, k, n, d_out, ld, weight, k, T(accumulate_d_in ? 1 : 0),
         d_in, k);
  }
  if (d_weight != nullptr) {
    Gemm(CblasTrans, CblasNoTrans, n, k, m, d_out, ld, in, k, T(1), d_weight, k);
  }
}

template <typename T>
void LinearForward(const T* in, const T* weight, T* out, int64_t m, int64_t k, int64_t n,
                   bool accumulate) {
  LinearForwardStrided(in, weight, out, n, m, k, n, accumulate);
}

template <typename T>
void LinearBackward(const T* in, const T* weight, const T* d_out, T* d_in, T* d_weight, int64_t m,
                    int64_t k, int64_t n) {
  LinearBackwardStrided(in, weight, d_out, n, d_in, d_weight, m, k, n);
}

template <typename T>
void EmbeddingForward(const int32_t* tokens, const T* table, T* out, int64_t n, int64_t c,
                      T scale) {
  for (int64_t i = 0; i < n; ++i) {
    const T* row = table + static_cast<int64_t>(tokens[i]) * c;
    for (int64_t j = 0; j < c; ++j) out[i * c + j] = row[j] * scale;
  }
}

template <typename T>
void EmbeddingBackward(const int32_t* tokens, const T* d_out, T* d_table, int64_t n, int64_t c,
                       T scale) {
  for (int64_t i = 0; i < n; ++i) {
    T* row = d_table + static_cast<int64_t>(tokens[i]) * c;
    for (int64_t j = 0; j < c; ++j) row[j] += d_out[i * c + j] * scale;
  }
}

template <typename T>
void RmsNormForward(const T* x, const T* weight, T* out, T* rstd, int64_t rows, int64_t c, T eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * c;
    double sum_sq = 0;
    for (int64_t j = 0; j < c; ++j) sum_sq += static_cast<double>(xr[j]) * xr[j];
    const T s = static_cast<T>(1.0 / std::sqrt(sum_sq / c + eps));
    rstd[r] = s;
    for (int64_t j = 0; j < c; ++j) out[r * c + j] = xr[j] * s * weight[j];
  }
}

template <typename T>
void RmsNormBackward(const T* x, const T* weight, const T* rstd, const T* d_out, T* d_x,
                     T* d_weight, int64_t rows, int64_t c) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * c;
    const T* dr = d_out + r * c;
    const T s = rstd[r];
    double dot = 0;  // sum_j d_out * weight * x
    for (int64_t j = 0; j < c; ++j) {
      dot += static_cast<double>(dr[j]) * weight[j] * xr[j];
      d_weight[j] += dr[j] * xr[j] * s;
    }
    const T coef = static_cast<T>(dot) * s * s * s / static_cast<T>(c);
    for (int64_t j = 0; j < c; ++j) d_x[r * c + j] += dr[j] * weight[j] * s - xr[j] * coef;
  }
}

template <typename T>
void CausalConvForward(const T* x, const T* weight, T* out, int64_t b, int64_t t, int64_t ch,
                       int64_t w, const int32_t* doc_start) {
  for (int64_t bi = 0; bi < b; ++bi) {
    const T* xb = x + bi * t * ch;
    T* ob = out + bi * t * ch;
    for (int64_t ti = 0; ti < t; ++ti) {
      const int64_t first = doc_start != nullptr ? doc_start[bi * t + ti] : 0;
      for (int64_t c = 0; c < ch; ++c) {
        T acc = 0;
        for (int64_t j = 0; j < w; ++j) {
          const int64_t src = ti - (w - 1) + j;
          if (src >= first) acc += weight[c * w + j] * xb[src * ch + c];
        }
        ob[ti * ch + c] = acc;
      }
    }
  }
}

template <typename T>
void CausalConvBackward(const T* x, const T* weight, const T* d_out, T* d_x, T* d_weight, int64_t b,
                        int64_t t, int64_t ch, int64_t w, const int32_t* doc_start) {
  for (int64_t bi = 0; bi < b; ++bi) {
    const T* xb = x + bi * t * ch;
    const T* db = d_out + bi * t * ch;
    T* dxb = d_x + bi * t * ch;
    for (int64_t ti = 0; ti < t; ++ti) {
      const int64_t first = doc_start != nullptr ? doc_start[bi * t + ti] : 0;
      for (int64_t j = 0; j < w; ++j) {
        const int64_t src = ti - (w - 1) + j;
        if (src < first) continue;
        for (int64_t c = 0; c < ch; ++c) {
          const T g = db[ti * ch + c];
          dxb[src * ch + c] += weight[c * w + j] * g;
          d_weight[c * w + j] += xb[src * ch + c] * g;
        }
      }
    }
  }
}

template <typename T>
void CausalConvTailBackward(const T* tail, const T* d_tail_out, const T* weight, const T* d_out,
                            T* d_x, T* d_tail, T* d_weight, int64_t b, int64_t t, int64_t ch,
                            int64_t w) {
  const int64_t tw = w - 1;
  for (int64_t bi = 0; bi < b; ++bi) {
    const T* db = d_out + bi * t * ch;
    T* dtb = d_tail != nullptr ? d_tail + bi * tw * ch : nullptr;
    if (dtb != nullptr) std::fill_n(dtb, tw * ch, T{0});
    // Output ti reads tail row ti + j for the taps j whose input precedes the slice.
    for (int64_t ti = 0; ti < std::min(tw, t); ++ti) {
      for (int64_t j = 0; ti + j < tw; ++j) {
        for (int64_t c = 0; c < ch; ++c) {
          const T g = db[ti * ch + c];
          if (dtb != nullptr) dtb[(ti + j) * ch + c] += weight[c * w + j] * g;
          if (tail != nullptr) d_weight[c * w + j] += tail[(bi * tw + ti + j) * ch + c] * g;
        }
      }
    }
    if (d_tail_out != nullptr) {
      T* dxb = d_x + (bi * t + t - tw) * ch;
      const T* dto = d_tail_out + bi * tw * ch;
      for (int64_t i = 0; i < tw * ch; ++i) dxb[i] += dto[i];
    }
  }
}

template <typename T>
void SiluL2NormForward(const T* x, T* y, int64_t groups, int64_t d) {
  for (int64_t g = 0; g < groups; ++g) {
    const T* xg = x + g * d;
    T* yg = y + g * d;
    double sum_sq = 0;
    for (int64_t j = 0; j < d; ++j) {
      const T s = xg[j] * Sigmoid(xg[j]);
      yg[j] = s;
      sum_sq += static_cast<double>(s) * s;
    }
    const T inv = static_cast<T>(1.0 / std::sqrt(sum_sq + kL2NormEps));
    for (int64_t j = 0; j < d; ++j) yg[j] *= inv;
  }
}

template <typename T>
void SiluL2NormBackward(const T* x, const T* d_y, T* d_x, int64_t groups, int64_t d) {
  std::vector<T> sig(d);
  for (int64_t g = 0; g < groups; ++g) {
    const T* xg = x + g * d;
    const T* dg = d_y + g * d;
    double sum_sq = 0, dot = 0;
    for (int64_t j = 0; j < d; ++j) {
      sig[j] = Sigmoid(xg[j]);
      const double s = static_cast<double>(xg[j]) * sig[j];
      sum_sq += s * s;
      dot += s * dg[j];
    }
    const double inv = 1.0 / std::sqrt(sum_sq + kL2NormEps);
    const T a = static_cast<T>(inv), b = static_cast<T>(inv * inv * inv * dot);
    // y = s * inv  =>  ds = inv * dy - s * inv^3 * (s . dy).
    for (int64_t j = 0; j < d; ++j) {
      const T s = xg[j] * sig[j];
      const T ds = a * dg[j] - s * b;
      d_x[g * d + j] += ds * sig[j] * (T(1) + xg[j] * (T(1) - sig[j]));
    }
  }
}

template <typename T>
void GatesForward(const T* a_pre, const T* b_pre, T* beta, T* log_gamma, int64_t n, T cap) {
  for (int64_t i = 0; i < n; ++i) {
    const T b = b_pre != nullptr ? Sigmoid(b_pre[i]) : T(1);  // no input gate: beta = 1
    beta[i] = b;
    log_gamma[i] = -Softplus(-a_pre[i]) + std::log1p(-cap * b * b);
  }
}

template <typename T>
void GatesBackward(const T* a_pre, const T* b_pre, const T* d_beta, const T* d_log_gamma,
                   T* d_a_pre, T* d_b_pre, int64_t n, T cap) {
  for (int64_t i = 0; i < n; ++i) {
    d_a_pre[i] = d_log_gamma[i] * (T(1) - Sigmoid(a_pre[i]));
    if (b_pre == nullptr) continue;  // no input gate: beta is the constant 1
    const T b = Sigmoid(b_pre[i]);
    // d/dbeta log1p(-cap beta^2) = -2 cap beta / (1 - cap beta^2): the γ cap sends gradient to β.
    const T d_b = d_beta[i] + d_log_gamma[i] * (-T(2) * cap * b / (T(1) - cap * b * b));
    d_b_pre[i] = d_b * b * (T(1) - b);
  }
}

template <typename T>
void LambdaForward(const T* p, T* lambda, int64_t n, T floor) {
  for (int64_t i = 0; i < n; ++i) lambda[i] = floor + Softplus(p[i]);
}

template <typename T>
void LambdaBackward(const T* p, const T* d_lambda, T* d_p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d_p[i] += d_lambda[i] * Sigmoid(p[i]);
}

template <typename T>
void SwiGluForward(const T* gate, const T* up, T* h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) h[i] = gate[i] * Sigmoid(gate[i]) * up[i];
}

template <typename T>
void SwiGluBackward(const T* gate, const T* up, const T* d_h, T* d_gate, T* d_up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T sig = Sigmoid(gate[i]);
    const T silu = gate[i] * sig;
    d_up[i] = d_h[i] * silu;
    d_gate[i] = d_h[i] * up[i] * sig * (T(1) + gate[i] * (T(1) - sig));
  }
}

template <typename T>
void SiluForward(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * Sigmoid(x[i]);
}

template <typename T>
void SiluBackward(const T* x, const T* d_y, T* d_x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T sig = Sigmoid(x[i]);
    d_x[i] = d_y[i] * sig * (T(1) + x[i] * (T(1) - sig));
  }
}

template <typename T>
void GeluGateForward(const T* y_pre, const T* x, T* out, int64_t n) {
  const T k = T(0.7978845608028654), c = T(0.044715);
  for (int64_t i = 0; i < n; ++i) {
    const T z = y_pre[i];
    out[i] = T(0.5) * z * (T(1) + std::tanh(k * (z + c * z * z * z))) * x[i];
  }
}

template <typename T>
void GeluGateBackward(const T* y_pre, const T* x, const T* d_out, T* d_y_pre, T* d_x, int64_t n) {
  const T k = T(0.7978845608028654), c = T(0.044715);
  for (int64_t i = 0; i < n; ++i) {
    const T z = y_pre[i];
    const T th = std::tanh(k * (z + c * z * z * z));
    const T gelu = T(0.5) * z * (T(1) + th);
    const T d_gelu =
        T(0.5) * (T(1) + th) + T(0.5) * z * (T(1) - th * th) * k * (T(1) + T(3) * c * z * z);
    d_x[i] = d_out[i] * gelu;
    d_y_pre[i] = d_out[i] * x[i] * d_gelu;
  }
}

template <typename T>
void BlockDiagonalLinearForward(const T* in, const T* weight, T* out, int64_t m, int64_t blocks,
                                int64_t width, bool accumulate) {
  const int64_t ld = blocks * width;
  for (int64_t j = 0; j < blocks; ++j) {
    Gemm(CblasNoTrans, CblasTrans, m, width, width, in + j * width, ld, weight + j * width * width,
         width, accumulate ? T(1) : T(0), out + j * width, ld);
  }
}

template <typename T>
void BlockDiagonalLinearBackward(const T* in, const T* weight, const T* d_out, T* d_in, T* d_weight,
                                 int64_t m, int64_t blocks, int64_t width, bool accumulate_d_in) {
  const int64_t ld = blocks * width;
  for (int64_t j = 0; j < blocks; ++j) {
    if (d_in != nullptr) {
      Gemm(CblasNoTrans, CblasNoTrans, m, width, width, d_out + j * width, ld,
           weight + j * width * width, width, T(accumulate_d_in ? 1 : 0), d_in + j * width, ld);
    }
    Gemm(CblasTrans, CblasNoTrans, width, width, m, d_out + j * width, ld, in + j * width, ld, T(1),
         d_weight + j * width * width, width);
  }
}

// The soft-capped logit cap·tanh(x/cap); cap 0 means no soft-cap (FLA's MesaNet).
template <typename T>
T Capped(T x, T cap) {
  return cap > T(0) ? cap * std::tanh(x / cap) : x;
}

template <typename T>
void SoftcapArgmax(const T* logits, int64_t rows, int64_t v, int64_t ld, T cap, int32_t* tokens,
                   T* logprobs) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* lr = logits + r * ld;
    T max_z = -std::numeric_limits<T>::infinity();
    int64_t best = 0;
    for (int64_t j = 0; j < v; ++j) {
      const T z = Capped(lr[j], cap);
      if (z > max_z) {
        max_z = z;
        best = j;
      }
    }
    double sum = 0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(Capped(lr[j], cap) - max_z);
    tokens[r] = static_cast<int32_t>(best);
    logprobs[r] = static_cast<T>(-std::log(sum));
  }
}

template <typename T>
double SoftcapCrossEntropyForward(const T* logits, const int32_t* targets, T* losses, int64_t rows,
                                  int64_t v, int64_t ld, T cap, int32_t ignore_token) {
  double total = 0;
  std::vector<T> z(v);
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == ignore_token) {
      losses[r] = 0;
      continue;
    }
    const T* lr = logits + r * ld;
    T max_z = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < v; ++j) {
      z[j] = Capped(lr[j], cap);
      max_z = std::max(max_z, z[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(z[j] - max_z);
    const double loss = std::log(sum) + max_z - z[targets[r]];
    losses[r] = static_cast<T>(loss);
    total += loss;
  }
  return total;
}

template <typename T>
void SoftcapCrossEntropyBackward(T* logits, const int32_t* targets, int64_t rows, int64_t v,
                                 int64_t ld, T cap, int32_t ignore_token, T loss_scale) {
  // z = cap·th with th = tanh(x/cap) and dz/dx = 1 - th²; without a cap z = x, th = 0, slope 1.
  const bool capped = cap > T(0);
  std::vector<T> th(v);
  for (int64_t r = 0; r < rows; ++r) {
    T* lr = logits + r * ld;
    if (targets[r] == ignore_token) {
      std::memset(lr, 0, sizeof(T) * v);
      continue;
    }
    auto z = [&](int64_t j) { return capped ? cap * th[j] : lr[j]; };
    T max_z = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < v; ++j) {
      th[j] = capped ? std::tanh(lr[j] / cap) : T(0);
      max_z = std::max(max_z, z(j));
    }
    double sum = 0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(z(j) - max_z);
    const T inv_sum = static_cast<T>(1.0 / sum);
    for (int64_t j = 0; j < v; ++j) {
      const T p = std::exp(z(j) - max_z) * inv_sum;
      const T dz = (p - (j == targets[r] ? T(1) : T(0))) * loss_scale;
      lr[j] = dz * (T(1) - th[j] * th[j]);
    }
  }
}

template <typename T>
void BiasForward(T* out, const T* bias, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) out[r * n + j] += bias[j];
  }
}

template <typename T>
void BiasBackward(const T* d_out, T* d_bias, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) d_bias[j] += d_out[r * n + j];
  }
}

template <typename T>
void AddInPlace(T* out, const T* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += in[i];
}

#define MESA_INSTANTIATE(T)                                                                      \
  template void LinearForward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t, bool);       \
  template void LinearBackward<T>(const T*, const T*, const T*, T*, T*, int64_t, int64_t,        \
                                  int64_t);                                                      \
  template void LinearForwardStrided<T>(const T*, const T*, T*, int64_t, int64_t, int64_t,       \
                                        int64_t, bool);                                          \
  template void LinearBackwardStrided<T>(const T*, const T*, const T*, int64_t, T*, T*, int64_t, \
                                         int64_t, int64_t, bool);                                \
  template void EmbeddingForward<T>(const int32_t*, const T*, T*, int64_t, int64_t, T);          \
  template void EmbeddingBackward<T>(const int32_t*, const T*, T*, int64_t, int64_t, T);         \
  template void RmsNormForward<T>(const T*, const T*, T*, T*, int64_t, int64_t, T);              \
  template void RmsNormBackward<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t,      \
                                   int64_t);                                                     \
  template void CausalConvForward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t, int64_t, \
                                     const int32_t*);                                            \
  template void CausalConvBackward<T>(const T*, const T*, const T*, T*, T*, int64_t, int64_t,    \
                                      int64_t, int64_t, const int32_t*);                         \
  template void CausalConvTailBackward<T>(const T*, const T*, const T*, const T*, T*, T*, T*,    \
                                          int64_t, int64_t, int64_t, int64_t);                   \
  template void SiluL2NormForward<T>(const T*, T*, int64_t, int64_t);                            \
  template void SiluL2NormBackward<T>(const T*, const T*, T*, int64_t, int64_t);                 \
  template void GatesForward<T>(const T*, const T*, T*, T*, int64_t, T);                         \
  template void GatesBackward<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t, T);    \
  template void LambdaForward<T>(const T*, T*, int64_t, T);                                      \
  template void LambdaBackward<T>(const T*, const T*, T*, int64_t);                              \
  template void SwiGluForward<T>(const T*, const T*, T*, int64_t);                               \
  template void SwiGluBackward<T>(const T*, const T*, const T*, T*, T*, int64_t);                \
  template void SiluForward<T>(const T*, T*, int64_t);                                           \
  template void SiluBackward<T>(const T*, const T*, T*, int64_t);                                \
  template void GeluGateForward<T>(const T*, const T*, T*, int64_t);                             \
  template void GeluGateBackward<T>(const T*, const T*, const T*, T*, T*, int64_t);              \
  template void BlockDiagonalLinearForward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t, \
                                              bool);                                             \
  template void BlockDiagonalLinearBackward<T>(const T*, const T*, const T*, T*, T*, int64_t,    \
                                               int64_t, int64_t, bool);                          \
  template void SoftcapArgmax<T>(const T*, int64_t, int64_t, int64_t, T, int32_t*, T*);          \
  template double SoftcapCrossEntropyForward<T>(const T*, const int32_t*, T*, int64_t, int64_t,  \
                                                int64_t, T, int32_t);                            \
  template void SoftcapCrossEntropyBackward<T>(T*, const int32_t*, int64_t, int64_t, int64_t, T, \
                                               int32_t, T);                                      \
  template void BiasForward<T>(T*, const T*, int64_t, int64_t);                                  \
  template void BiasBackward<T>(const T*, T*, int64_t, int64_t);                                 \
  template void AddInPlace<T>(T*, const T*, int64_t);

MESA_INSTANTIATE(float)
MESA_INSTANTIATE(double)

}  // namespace mesa::model::cpu
