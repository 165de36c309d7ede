// Test-only helpers that cut token ranges out of token-major [B, T, ...] tensors and put them
// back: the step tests feed one token at a time, and prefill pieces, from one long problem.
#ifndef MESANET_KERNELS_TOKEN_SLICES_H_
#define MESANET_KERNELS_TOKEN_SLICES_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace mesa::kernels::testing {

// Tokens [t0, t1) of a [B, T, ...] tensor with `per_token` elements per (b, t): [B, t1 - t0, ...].
inline std::vector<float> TokenRange(const std::vector<float>& x, int64_t batch, int64_t seq_len,
                                     int64_t per_token, int64_t t0, int64_t t1) {
  std::vector<float> out;
  out.reserve(batch * (t1 - t0) * per_token);
  for (int64_t b = 0; b < batch; ++b) {
    const auto first = x.begin() + (b * seq_len + t0) * per_token;
    out.insert(out.end(), first, first + (t1 - t0) * per_token);
  }
  return out;
}

// Writes `piece` ([B, t1 - t0, ...]) into tokens [t0, t1) of `x` ([B, T, ...]).
inline void PutTokenRange(const std::vector<float>& piece, int64_t batch, int64_t seq_len,
                          int64_t per_token, int64_t t0, int64_t t1, std::vector<float>& x) {
  const int64_t len = (t1 - t0) * per_token;
  for (int64_t b = 0; b < batch; ++b) {
    std::copy_n(piece.begin() + b * len, len, x.begin() + (b * seq_len + t0) * per_token);
  }
}

// Rows [b, b + 1) of a [B, ...] tensor with `per_row` elements per batch row.
inline std::vector<float> BatchRow(const std::vector<float>& x, int64_t per_row, int64_t b) {
  return std::vector<float>(x.begin() + b * per_row, x.begin() + (b + 1) * per_row);
}

// Appends the tokens of `piece` to `packed` (both batch 1) along T: every per-token tensor named
// by a member pointer in `fields`, and dims.seq_len.
template <typename Problem, typename... Field>
void AppendTokens(const Problem& piece, Problem& packed, Field... fields) {
  ((packed.*fields).insert((packed.*fields).end(), (piece.*fields).begin(), (piece.*fields).end()),
   ...);
  packed.dims.seq_len += piece.dims.seq_len;
}

}  // namespace mesa::kernels::testing

#endif  // MESANET_KERNELS_TOKEN_SLICES_H_
