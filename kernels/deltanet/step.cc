// Float32 recurrent step of the DeltaNet family operator (kernels/deltanet/step.h).
#include "kernels/deltanet/step.h"

#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/dot.h"
#include "kernels/common/parallel_for.h"
#include "kernels/common/tensor_checks.h"

namespace mesa::kernels::deltanet {

absl::Status ValidateDeltaStep(const DeltaStepInputs& in, std::span<const float> s,
                               std::span<const float> o) {
  const DeltaStepDims& d = in.dims;
  if (d.batch < 1 || d.heads < 1 || d.head_dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch, heads and head_dim must be >= 1, got B=",
                                                   d.batch, " H=", d.heads, " D=", d.head_dim));
  }
  for (auto [name, size, expected] : {std::tuple{"q", in.q.size(), d.TokenElems()},
                                      {"k", in.k.size(), d.TokenElems()},
                                      {"v", in.v.size(), d.TokenElems()},
                                      {"beta", in.beta.size(), d.GateElems()},
                                      {"s", s.size(), d.StateElems()},
                                      {"o", o.size(), d.TokenElems()}}) {
    if (auto status = CheckSize(name, size, expected); !status.ok()) return status;
  }
  if (auto status = CheckOptionalSize("log_gamma", in.log_gamma.size(), d.GateElems());
      !status.ok()) {
    return status;
  }
  for (auto [name, data] : {std::pair{"q", in.q},
                            {"k", in.k},
                            {"v", in.v},
                            {"beta", in.beta},
                            {"log_gamma", in.log_gamma}}) {
    if (auto status = CheckFinite(name, data); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status DeltaNetStep(const DeltaStepInputs& in, std::span<float> s, std::span<float> o,
                          int num_threads) {
  if (auto status = ValidateDeltaStep(in, s, o); !status.ok()) return status;
  if (num_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_threads must be >= 0, got ", num_threads));
  }
  const int64_t n = in.dims.head_dim, dd = n * n, rows = in.dims.GateElems();
  const int threads = ResolveThreads(num_threads, rows);
  std::vector<std::vector<float>> deltas(threads, std::vector<float>(n));
  ParallelFor(rows, threads, [&](int64_t row, int worker) {  // row = b * H + head
    const float* q = &in.q[row * n];
    const float* k = &in.k[row * n];
    const float* v = &in.v[row * n];
    const float beta = in.beta[row];
    const float g =
        in.log_gamma.empty() ? 1.f : static_cast<float>(std::exp(double(in.log_gamma[row])));
    float* state = &s[row * dd];
    float* delta = deltas[worker].data();
    // delta = beta (v - g S k), then S <- g S + delta k^T, then o = S q.
    for (int64_t i = 0; i < n; ++i) delta[i] = beta * (v[i] - g * LaneDot(state + i * n, k, n));
    float* out = &o[row * n];
    for (int64_t i = 0; i < n; ++i) {
      float* srow = state + i * n;
      for (int64_t j = 0; j < n; ++j) srow[j] = g * srow[j] + delta[i] * k[j];
      out[i] = LaneDot(srow, q, n);
    }
  });
  return absl::OkStatus();
}

}  // namespace mesa::kernels::deltanet
