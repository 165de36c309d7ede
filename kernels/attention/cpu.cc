#include "kernels/attention/cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/dot.h"
#include "kernels/parallel_for.h"

namespace mesa::kernels::attention {
namespace {

// Softmax over the scores of one query against `n` keys at stride `stride` floats: fills p with
// the probabilities and returns the log-sum-exp of the scaled scores.
float RowSoftmax(const float* q, const float* k0, int64_t n, int64_t stride, int64_t dim,
                 float scale, float* p) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    p[j] = scale * LaneDot(q, k0 + j * stride, dim);
    m = std::max(m, p[j]);
  }
  float l = 0.f;
  for (int64_t j = 0; j < n; ++j) l += (p[j] = std::exp(p[j] - m));
  const float inv = 1.f / l;
  for (int64_t j = 0; j < n; ++j) p[j] *= inv;
  return m + std::log(l);
}

// o = sum_j p_j v_j over n values at stride `stride`.
void Mix(const float* p, const float* v0, int64_t n, int64_t stride, int64_t dim, float* o) {
  std::fill(o, o + dim, 0.f);
  for (int64_t j = 0; j < n; ++j) {
    const float* v = v0 + j * stride;
    for (int64_t e = 0; e < dim; ++e) o[e] += p[j] * v[e];
  }
}

}  // namespace

absl::Status AttnCpuForward(const AttnInputs& in, const AttnOptions& options,
                            AttnForwardOutputs* out) {
  const AttnDims d = in.dims;
  const float scale = EffectiveScale(options, d.head_dim);
  const int64_t stride = d.heads * d.head_dim, tasks = d.batch * d.heads;
  const int threads = ResolveThreads(options.num_threads, tasks);
  std::vector<std::vector<float>> buf(threads, std::vector<float>(d.seq_len));
  ParallelFor(tasks, threads, [&](int64_t task, int worker) {
    const int64_t b = task / d.heads, h = task % d.heads;
    float* p = buf[worker].data();
    for (int64_t i = 0; i < d.seq_len; ++i) {
      const int64_t lo = WindowStart(i, options.window), n = i - lo + 1;
      const int64_t oi = ((b * d.seq_len + i) * d.heads + h) * d.head_dim;
      const int64_t o0 = ((b * d.seq_len + lo) * d.heads + h) * d.head_dim;
      const float lse = RowSoftmax(&in.q[oi], &in.k[o0], n, stride, d.head_dim, scale, p);
      Mix(p, &in.v[o0], n, stride, d.head_dim, &out->o[oi]);
      if (!out->lse.empty()) out->lse[(b * d.seq_len + i) * d.heads + h] = lse;
    }
  });
  return absl::OkStatus();
}

absl::Status AttnCpuBackward(const AttnInputs& in, const AttnBackwardInputs& bwd,
                             const AttnOptions& options, AttnGradients* grads) {
  const AttnDims d = in.dims;
  std::span<const float> o = bwd.o, lse = bwd.lse;
  std::vector<float> o_buf, lse_buf;
  if (o.empty()) {  // recompute the forward's o and lse
    o_buf.resize(d.TokenElems());
    lse_buf.resize(d.RowElems());
    AttnForwardOutputs f{.o = o_buf, .lse = lse_buf};
    if (absl::Status s = AttnCpuForward(in, options, &f); !s.ok()) return s;
    o = o_buf;
    lse = lse_buf;
  }
  const float scale = EffectiveScale(options, d.head_dim);
  const int64_t dim = d.head_dim, tasks = d.batch * d.heads;
  std::fill(grads->dk.begin(), grads->dk.end(), 0.f);
  std::fill(grads->dv.begin(), grads->dv.end(), 0.f);
  const int threads = ResolveThreads(options.num_threads, tasks);
  std::vector<std::vector<float>> buf(threads, std::vector<float>(d.seq_len));
  ParallelFor(tasks, threads, [&](int64_t task, int worker) {
    const int64_t b = task / d.heads, h = task % d.heads;
    float* ds = buf[worker].data();
    for (int64_t i = 0; i < d.seq_len; ++i) {
      const int64_t lo = WindowStart(i, options.window);
      const int64_t oi = ((b * d.seq_len + i) * d.heads + h) * dim;
      const float* qi = &in.q[oi];
      const float* doi = &bwd.d_o[oi];
      const float row_lse = lse[(b * d.seq_len + i) * d.heads + h];
      const float delta = LaneDot(doi, &o[oi], dim);
      float* dqi = &grads->dq[oi];
      std::fill(dqi, dqi + dim, 0.f);
      for (int64_t j = lo; j <= i; ++j) {
        const int64_t oj = ((b * d.seq_len + j) * d.heads + h) * dim;
        const float p = std::exp(scale * LaneDot(qi, &in.k[oj], dim) - row_lse);
        ds[j - lo] = p * (LaneDot(doi, &in.v[oj], dim) - delta) * scale;
        float* dvj = &grads->dv[oj];
        for (int64_t e = 0; e < dim; ++e) dvj[e] += p * doi[e];
      }
      for (int64_t j = lo; j <= i; ++j) {
        const int64_t oj = ((b * d.seq_len + j) * d.heads + h) * dim;
        const float g = ds[j - lo];
        const float* kj = &in.k[oj];
        float* dkj = &grads->dk[oj];
        for (int64_t e = 0; e < dim; ++e) {
          dqi[e] += g * kj[e];
          dkj[e] += g * qi[e];
        }
      }
    }
  });
  return absl::OkStatus();
}

absl::Status AttnCpuDecode(const AttnDecodeInputs& in, float scale, std::span<float> o,
                           int num_threads) {
  const int64_t dim = in.head_dim, stride = in.heads * dim, tasks = in.batch * in.heads;
  if (scale == 0.f) scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  const int threads = ResolveThreads(num_threads, tasks);
  std::vector<std::vector<float>> buf(threads, std::vector<float>(in.capacity));
  ParallelFor(tasks, threads, [&](int64_t task, int worker) {
    const int64_t b = task / in.heads, h = task % in.heads;
    const int64_t n = in.lengths.empty() ? in.capacity : in.lengths[b];
    const int64_t c0 = (b * in.capacity * in.heads + h) * dim;
    float* p = buf[worker].data();
    RowSoftmax(&in.q[task * dim], &in.k_cache[c0], n, stride, dim, scale, p);
    Mix(p, &in.v_cache[c0], n, stride, dim, &o[task * dim]);
  });
  return absl::OkStatus();
}

}  // namespace mesa::kernels::attention
