#include "kernels/conv/causal_conv_step.h"

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/limits.h"
#include "kernels/common/tensor_checks.h"

namespace mesa::kernels::cpu {

absl::Status ValidateConvDims(const ConvDims& d) {
  if (d.batch < 1 || d.seq_len < 1 || d.channels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch, seq_len and channels must be >= 1, got B=", d.batch, " T=", d.seq_len,
                     " C=", d.channels));
  }
  if (d.width < 1 || d.width > kMaxConvWidth) {
    return absl::InvalidArgumentError(
        absl::StrCat("conv width must be in [1, ", kMaxConvWidth, "], got ", d.width));
  }
  return absl::OkStatus();
}

absl::Status ValidateCausalConvAppend(const ConvDims& d, std::span<const float> x,
                                      std::span<const float> weight, std::span<const float> tail,
                                      std::span<const float> out) {
  if (auto s = ValidateConvDims(d); !s.ok()) return s;
  for (auto [name, size, expected] : {std::tuple{"x", x.size(), d.InputElems()},
                                      {"weight", weight.size(), d.WeightElems()},
                                      {"tail", tail.size(), d.TailElems()},
                                      {"out", out.size(), d.InputElems()}}) {
    if (auto s = CheckSize(name, size, expected); !s.ok()) return s;
  }
  for (auto [name, data] : {std::pair{"x", x}, {"weight", weight}}) {
    if (auto s = CheckFinite(name, data); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CausalConvAppend(const ConvDims& d, std::span<const float> x,
                              std::span<const float> weight, std::span<float> tail,
                              std::span<float> out) {
  if (auto s = ValidateCausalConvAppend(d, x, weight, tail, out); !s.ok()) return s;
  const int64_t c_n = d.channels, w_n = d.width, t_n = d.seq_len, keep = w_n - 1;
  // Per batch row: the rows (tail ++ x), of which output t reads rows t .. t + W - 1.
  std::vector<float> rows((keep + t_n) * c_n);
  for (int64_t b = 0; b < d.batch; ++b) {
    float* tail_b = tail.data() + b * keep * c_n;
    std::copy_n(tail_b, keep * c_n, rows.begin());
    std::copy_n(x.data() + b * t_n * c_n, t_n * c_n, rows.begin() + keep * c_n);
    float* out_b = out.data() + b * t_n * c_n;
    for (int64_t t = 0; t < t_n; ++t) {
      for (int64_t c = 0; c < c_n; ++c) {
        float acc = 0.f;
        for (int64_t j = 0; j < w_n; ++j) acc += weight[c * w_n + j] * rows[(t + j) * c_n + c];
        out_b[t * c_n + c] = acc;
      }
    }
    std::copy_n(rows.begin() + t_n * c_n, keep * c_n, tail_b);
  }
  return absl::OkStatus();
}

}  // namespace mesa::kernels::cpu
