#include "kernels/attention/attention_types.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/tensor_checks.h"

namespace mesa::kernels::attention {

float EffectiveScale(const AttnOptions& options, int64_t head_dim) {
  return options.scale != 0.f ? options.scale
                              : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

namespace {
// The softmax scale and thread count, as the forward, backward and decoding take them.
absl::Status CheckScaleAndThreads(float scale, int num_threads) {
  if (!std::isfinite(scale)) {
    return absl::InvalidArgumentError("attention scale must be finite (0 => 1/sqrt(D))");
  }
  if (num_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_threads must be >= 0, got ", num_threads));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status ValidateAttnInputs(const AttnInputs& in, const AttnOptions& options) {
  const AttnDims& d = in.dims;
  if (d.batch < 1 || d.seq_len < 1 || d.heads < 1 || d.head_dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch, seq_len, heads and head_dim must be >= 1, got B=", d.batch,
                     " T=", d.seq_len, " H=", d.heads, " D=", d.head_dim));
  }
  if (options.window < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention window must be >= 0 (0 = global causal), got ", options.window));
  }
  if (auto s = CheckScaleAndThreads(options.scale, options.num_threads); !s.ok()) return s;
  for (auto [name, data] : {std::pair{"q", in.q}, {"k", in.k}, {"v", in.v}}) {
    if (auto s = CheckSize(name, data.size(), d.TokenElems()); !s.ok()) return s;
  }
  for (auto [name, data] : {std::pair{"q", in.q}, {"k", in.k}, {"v", in.v}}) {
    if (auto s = CheckFinite(name, data); !s.ok()) return s;
  }
  if (auto s = CheckOptionalSize("doc_start", in.doc_start.size(), d.batch * d.seq_len); !s.ok()) {
    return s;
  }
  for (size_t r = 0; r < in.doc_start.size(); ++r) {
    const int64_t t = static_cast<int64_t>(r) % d.seq_len, v = in.doc_start[r];
    const int64_t prev = t == 0 ? 0 : in.doc_start[r - 1];
    if (v < prev || v > t) {
      return absl::InvalidArgumentError(absl::StrCat("doc_start[", r, "] = ", v, " outside [", prev,
                                                     ", ", t, "] (its token's index in the row)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateAttnForwardOutputs(const AttnInputs& in, const AttnForwardOutputs& out) {
  if (auto s = CheckSize("o", out.o.size(), in.dims.TokenElems()); !s.ok()) return s;
  return CheckOptionalSize("lse", out.lse.size(), in.dims.RowElems());
}

absl::Status ValidateAttnBackward(const AttnInputs& in, const AttnBackwardInputs& bwd,
                                  const AttnGradients& grads) {
  const AttnDims& d = in.dims;
  if (auto s = CheckSize("do", bwd.d_o.size(), d.TokenElems()); !s.ok()) return s;
  if (bwd.o.empty() != bwd.lse.empty()) {
    return absl::InvalidArgumentError(
        "attention backward: give both the forward's 'o' and 'lse', or neither");
  }
  if (auto s = CheckOptionalSize("o", bwd.o.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("lse", bwd.lse.size(), d.RowElems()); !s.ok()) return s;
  for (auto [name, data] : {std::pair{"dq", grads.dq}, {"dk", grads.dk}, {"dv", grads.dv}}) {
    if (auto s = CheckSize(name, data.size(), d.TokenElems()); !s.ok()) return s;
  }
  for (auto [name, data] : {std::pair{"do", bwd.d_o}, {"o", bwd.o}, {"lse", bwd.lse}}) {
    if (auto s = CheckFinite(name, data); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ValidateAttnDecode(const AttnDecodeInputs& in, float scale, int num_threads,
                                std::span<const float> o) {
  if (auto s = CheckScaleAndThreads(scale, num_threads); !s.ok()) return s;
  if (in.batch < 1 || in.heads < 1 || in.head_dim < 1 || in.capacity < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention decode: batch, heads, head_dim and capacity must be >= 1, got B=", in.batch,
        " H=", in.heads, " D=", in.head_dim, " C=", in.capacity));
  }
  const int64_t row = in.batch * in.heads * in.head_dim;
  const int64_t cache = row * in.capacity;
  if (auto s = CheckSize("q", in.q.size(), row); !s.ok()) return s;
  if (auto s = CheckSize("k_cache", in.k_cache.size(), cache); !s.ok()) return s;
  if (auto s = CheckSize("v_cache", in.v_cache.size(), cache); !s.ok()) return s;
  if (auto s = CheckSize("o", o.size(), row); !s.ok()) return s;
  if (auto s = CheckOptionalSize("lengths", in.lengths.size(), in.batch); !s.ok()) return s;
  for (size_t b = 0; b < in.lengths.size(); ++b) {
    if (in.lengths[b] < 1 || in.lengths[b] > in.capacity) {
      return absl::InvalidArgumentError(absl::StrCat("attention decode: lengths[", b,
                                                     "] = ", in.lengths[b],
                                                     " is not in [1, capacity=", in.capacity, "]"));
    }
  }
  if (auto s = CheckFinite("q", in.q); !s.ok()) return s;
  // Only the valid slots must be finite (the rest of a cache may be uninitialised).
  for (int64_t b = 0; b < in.batch; ++b) {
    const int64_t len = in.lengths.empty() ? in.capacity : in.lengths[b];
    const size_t off = b * in.capacity * in.heads * in.head_dim;
    const size_t n = len * in.heads * in.head_dim;
    if (auto s = CheckFinite("k_cache", in.k_cache.subspan(off, n)); !s.ok()) return s;
    if (auto s = CheckFinite("v_cache", in.v_cache.subspan(off, n)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

namespace {
AttnCudaBackend& CudaBackendSlot() {
  static AttnCudaBackend backend;
  return backend;
}
}  // namespace

void RegisterAttnCudaBackend(const AttnCudaBackend& backend) { CudaBackendSlot() = backend; }

const AttnCudaBackend* GetAttnCudaBackend() {
  const AttnCudaBackend& b = CudaBackendSlot();
  return b.forward != nullptr ? &b : nullptr;
}

namespace {
// Visible (query, key) pairs summed over the sequence, per (b, h).
double VisiblePairs(int64_t t, int64_t window) {
  const double n = static_cast<double>(t);
  if (window <= 0 || window >= t) return n * (n + 1) / 2;
  const double w = static_cast<double>(window);
  return w * (w + 1) / 2 + (n - w) * w;
}
}  // namespace

double ForwardFlops(const AttnDims& d, int64_t window) {
  return 4.0 * d.batch * d.heads * d.head_dim * VisiblePairs(d.seq_len, window);
}
double BackwardFlops(const AttnDims& d, int64_t window) {
  return 10.0 * d.batch * d.heads * d.head_dim * VisiblePairs(d.seq_len, window);
}

}  // namespace mesa::kernels::attention
