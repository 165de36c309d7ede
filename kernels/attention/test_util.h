// Random attention problems for the tests (CPU and CUDA). Test-only.
#ifndef MESANET_KERNELS_ATTENTION_TEST_UTIL_H_
#define MESANET_KERNELS_ATTENTION_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "kernels/attention/attention_types.h"

namespace mesa::kernels::attention::testing {

struct Config {
  int64_t batch = 1, seq_len = 16, heads = 1, head_dim = 16;
  // Multiplies q: larger values make each row's softmax peakier (the model's trained regime).
  float q_gain = 1.f;
  uint64_t seed = 1;
};

struct Problem {
  AttnDims dims;
  std::vector<float> q, k, v, d_o;
  std::vector<int32_t> doc_start;  // empty: none
  AttnInputs Inputs() const {
    return {.dims = dims, .q = q, .k = k, .v = v, .doc_start = doc_start};
  }
};

// q, k, v, do: N(0, 1) entries (q times q_gain).
Problem RandomProblem(const Config& c);

// p with packed documents in every row: documents of `lengths` tokens in turn (cycled, the last cut
// at the row's end).
Problem WithDocuments(Problem p, const std::vector<int64_t>& lengths);
// The documents of p as [begin, end) in row b.
struct Document {
  int64_t row, begin, end;
};
std::vector<Document> DocumentsOf(const Problem& p);
// Tokens [begin, end) of row `row` of a [B,T,H,D] tensor of `dims`.
std::vector<float> Tokens(const std::vector<float>& x, const AttnDims& dims, const Document& d);
// The document as a problem of its own (one row, no documents).
Problem Alone(const Problem& p, const Document& d);

// A copy of p with 1 added to k and v of `token` (batch row 0, every head): the window tests.
Problem ShiftKeyAndValue(const Problem& p, int64_t token);
// The H x D entries of token t of batch row 0 of a [B,T,H,D] tensor.
std::vector<float> TokenRow(const std::vector<float>& x, const AttnDims& dims, int64_t t);

}  // namespace mesa::kernels::attention::testing

#endif  // MESANET_KERNELS_ATTENTION_TEST_UTIL_H_
