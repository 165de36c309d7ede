#include "kernels/attention/cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/common/blas_util.h"
#include "kernels/common/dot.h"
#include "kernels/common/parallel_for.h"

namespace mesa::kernels::attention {
namespace {

// Replaces x[0..n) by softmax(x) and returns log sum exp(x).
float SoftmaxInPlace(float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  float l = 0.f;
  for (int64_t j = 0; j < n; ++j) l += (x[j] = std::exp(x[j] - m));
  const float inv = 1.f / l;
  for (int64_t j = 0; j < n; ++j) x[j] *= inv;
  return m + std::log(l);
}

// Softmax over the scores of one query against `n` keys at stride `stride` floats: fills p with
// the probabilities and returns the log-sum-exp of the scaled scores.
float RowSoftmax(const float* q, const float* k0, int64_t n, int64_t stride, int64_t dim,
                 float scale, float* p) {
  for (int64_t j = 0; j < n; ++j) p[j] = scale * LaneDot(q, k0 + j * stride, dim);
  return SoftmaxInPlace(p, n);
}

// o = sum_j p_j v_j over n values at stride `stride`.
void Mix(const float* p, const float* v0, int64_t n, int64_t stride, int64_t dim, float* o) {
  std::fill(o, o + dim, 0.f);
  for (int64_t j = 0; j < n; ++j) {
    const float* v = v0 + j * stride;
    for (int64_t e = 0; e < dim; ++e) o[e] += p[j] * v[e];
  }
}

// Queries per block: one GEMM of scores per block instead of one dot product per (query, key).
constexpr int64_t kBlock = 64;

// One (b, h) slice of the [B,T,H,D] tensors and the block loop over its queries.
struct Slice {
  AttnDims d;
  int64_t b, h, window;
  int64_t Off(int64_t t) const { return ((b * d.seq_len + t) * d.heads + h) * d.head_dim; }
  int Ld() const { return static_cast<int>(d.heads * d.head_dim); }
};

// Scores of the query block [i0, i1) against keys [j0, i1) into s (row stride n = i1 - j0):
// s = scale Q K^T, then per row the visible keys exponentiated against `lse` (when given) or
// softmax-normalised (lse written out); invisible entries are 0.
void BlockProbs(const Slice& sl, const AttnInputs& in, float scale, int64_t i0, int64_t i1,
                int64_t j0, const float* lse_in, float* lse_out, float* s) {
  const int64_t m = i1 - i0, n = i1 - j0;
  RowMajorGemm(false, true, static_cast<int>(m), static_cast<int>(n),
               static_cast<int>(sl.d.head_dim), scale, &in.q[sl.Off(i0)], sl.Ld(),
               &in.k[sl.Off(j0)], sl.Ld(), 0.f, s, static_cast<int>(n));
  for (int64_t r = 0; r < m; ++r) {
    // Visible [lo, hi]; j0 <= the window's start <= lo(i).
    const int64_t i = i0 + r, lo = FirstKey(in.doc_start, sl.d.seq_len, sl.window, sl.b, i) - j0,
                  hi = i - j0;
    float* row = s + r * n;
    std::fill(row, row + lo, 0.f);
    std::fill(row + hi + 1, row + n, 0.f);
    const int64_t lse_index = (sl.b * sl.d.seq_len + i) * sl.d.heads + sl.h;
    if (lse_in != nullptr) {
      const float l = lse_in[lse_index];
      for (int64_t j = lo; j <= hi; ++j) row[j] = std::exp(row[j] - l);
      continue;
    }
    const float lse = SoftmaxInPlace(row + lo, hi - lo + 1);
    if (lse_out != nullptr) lse_out[lse_index] = lse;
  }
}

}  // namespace

absl::Status AttnCpuForward(const AttnInputs& in, const AttnOptions& options,
                            AttnForwardOutputs* out) {
  const AttnDims d = in.dims;
  const float scale = EffectiveScale(options, d.head_dim);
  const int64_t tasks = d.batch * d.heads;
  const int threads = ResolveThreads(options.num_threads, tasks);
  BlasSingleThreaded blas_guard;
  std::vector<std::vector<float>> buf(threads, std::vector<float>(kBlock * d.seq_len));
  ParallelFor(tasks, threads, [&](int64_t task, int worker) {
    const Slice sl{d, task / d.heads, task % d.heads, options.window};
    float* p = buf[worker].data();
    for (int64_t i0 = 0; i0 < d.seq_len; i0 += kBlock) {
      const int64_t i1 = std::min(i0 + kBlock, d.seq_len), j0 = WindowStart(i0, options.window);
      BlockProbs(sl, in, scale, i0, i1, j0, nullptr, out->lse.empty() ? nullptr : out->lse.data(),
                 p);
      RowMajorGemm(false, false, static_cast<int>(i1 - i0), static_cast<int>(d.head_dim),
                   static_cast<int>(i1 - j0), 1.f, p, static_cast<int>(i1 - j0), &in.v[sl.Off(j0)],
                   sl.Ld(), 0.f, &out->o[sl.Off(i0)], sl.Ld());
    }
  });
  return absl::OkStatus();
}

absl::Status AttnCpuBackward(const AttnInputs& in, const AttnBackwardInputs& bwd,
                             const AttnOptions& options, AttnGradients* grads) {
  const AttnDims d = in.dims;
  // Only lse is needed (delta comes from P and dP below): recompute it when absent.
  std::span<const float> lse = bwd.lse;
  std::vector<float> lse_buf;
  if (lse.empty()) {
    std::vector<float> o_buf(d.TokenElems());
    lse_buf.resize(d.RowElems());
    AttnForwardOutputs f{.o = o_buf, .lse = lse_buf};
    if (absl::Status s = AttnCpuForward(in, options, &f); !s.ok()) return s;
    lse = lse_buf;
  }
  const float scale = EffectiveScale(options, d.head_dim);
  const int64_t dim = d.head_dim, tasks = d.batch * d.heads;
  std::fill(grads->dk.begin(), grads->dk.end(), 0.f);
  std::fill(grads->dv.begin(), grads->dv.end(), 0.f);
  const int threads = ResolveThreads(options.num_threads, tasks);
  BlasSingleThreaded blas_guard;
  std::vector<std::vector<float>> p_buf(threads, std::vector<float>(kBlock * d.seq_len));
  std::vector<std::vector<float>> ds_buf(threads, std::vector<float>(kBlock * d.seq_len));
  ParallelFor(tasks, threads, [&](int64_t task, int worker) {
    const Slice sl{d, task / d.heads, task % d.heads, options.window};
    const int ld = sl.Ld(), idim = static_cast<int>(dim);
    float* p = p_buf[worker].data();
    float* ds = ds_buf[worker].data();
    for (int64_t i0 = 0; i0 < d.seq_len; i0 += kBlock) {
      const int64_t i1 = std::min(i0 + kBlock, d.seq_len), j0 = WindowStart(i0, options.window);
      const int m = static_cast<int>(i1 - i0), n = static_cast<int>(i1 - j0);
      BlockProbs(sl, in, scale, i0, i1, j0, lse.data(), nullptr, p);
      // dP = dO V^T, then dS = scale P (dP - delta) (0 where P is), with delta_i = do_i . o_i
      // taken as sum_j P_ij dP_ij: the same value, from the same rounded P and dP (a row with one
      // visible key gets dS = 0 exactly, as the exact gradient has).
      RowMajorGemm(false, true, m, n, idim, 1.f, &bwd.d_o[sl.Off(i0)], ld, &in.v[sl.Off(j0)], ld,
                   0.f, ds, n);
      for (int r = 0; r < m; ++r) {
        float* ds_row = ds + r * n;
        const float* p_row = p + r * n;
        const float delta = LaneDot(p_row, ds_row, n);
        for (int j = 0; j < n; ++j) ds_row[j] = p_row[j] * (ds_row[j] - delta) * scale;
      }
      RowMajorGemm(true, false, n, idim, m, 1.f, p, n, &bwd.d_o[sl.Off(i0)], ld, 1.f,
                   &grads->dv[sl.Off(j0)], ld);
      RowMajorGemm(true, false, n, idim, m, 1.f, ds, n, &in.q[sl.Off(i0)], ld, 1.f,
                   &grads->dk[sl.Off(j0)], ld);
      RowMajorGemm(false, false, m, idim, n, 1.f, ds, n, &in.k[sl.Off(j0)], ld, 0.f,
                   &grads->dq[sl.Off(i0)], ld);
    }
  });
  return absl::OkStatus();
}

absl::Status AttnCpuDecode(const AttnDecodeInputs& in, float scale, std::span<float> o,
                           int num_threads) {
  const int64_t dim = in.head_dim, stride = in.heads * dim, tasks = in.batch * in.heads;
  scale = EffectiveScale({.scale = scale}, dim);
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
