// The SSD backward's per-head partial gradients (every implementation runs one task per row and
// head): B and C gradients per head [B,T,H,N] and the per-(row, head) parameter gradients [B,H],
// summed over each group's heads and over the rows in a fixed order, so that results do not
// depend on the thread count.
#ifndef MESANET_KERNELS_SSD_GRADIENT_SUMS_H_
#define MESANET_KERNELS_SSD_GRADIENT_SUMS_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/ssd/ssd_types.h"

namespace mesa::kernels::ssd {

template <typename T>
struct SsdPartialGradients {
  explicit SsdPartialGradients(const SsdDims& d)
      : db_head(d.GateElems() * d.state_dim),
        dc_head(d.GateElems() * d.state_dim),
        da_log(d.batch * d.heads),
        dt_bias(d.batch * d.heads),
        skip(d.batch * d.heads) {}

  // Writes dA_log, ddt_bias, dD [H] and dB, dC [B,T,G,N].
  void SumInto(const SsdDims& d, std::span<T> da_log_out, std::span<T> dt_bias_out,
               std::span<T> skip_out, std::span<T> db, std::span<T> dc) const {
    for (int64_t h = 0; h < d.heads; ++h) {
      T a = 0, bias = 0, s = 0;
      for (int64_t b = 0; b < d.batch; ++b) {
        a += da_log[b * d.heads + h];
        bias += dt_bias[b * d.heads + h];
        s += skip[b * d.heads + h];
      }
      da_log_out[h] = a;
      dt_bias_out[h] = bias;
      skip_out[h] = s;
    }
    const int64_t n = d.state_dim, per = d.HeadsPerGroup();
    for (int64_t bt = 0; bt < d.batch * d.seq_len; ++bt) {
      for (int64_t g = 0; g < d.groups; ++g) {
        T* db_row = &db[(bt * d.groups + g) * n];
        T* dc_row = &dc[(bt * d.groups + g) * n];
        std::fill(db_row, db_row + n, T(0));
        std::fill(dc_row, dc_row + n, T(0));
        for (int64_t h = g * per; h < (g + 1) * per; ++h) {
          const int64_t row = (bt * d.heads + h) * n;
          for (int64_t i = 0; i < n; ++i) {
            db_row[i] += db_head[row + i];
            dc_row[i] += dc_head[row + i];
          }
        }
      }
    }
  }

  std::vector<T> db_head, dc_head;       // [B,T,H,N]
  std::vector<T> da_log, dt_bias, skip;  // [B,H]
};

}  // namespace mesa::kernels::ssd

#endif  // MESANET_KERNELS_SSD_GRADIENT_SUMS_H_
