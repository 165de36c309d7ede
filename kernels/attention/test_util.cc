#include "kernels/attention/test_util.h"

#include <random>

namespace mesa::kernels::attention::testing {

Problem RandomProblem(const Config& c) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  Problem p;
  p.dims = {c.batch, c.seq_len, c.heads, c.head_dim};
  auto fill = [&](float gain) {
    std::vector<float> x(p.dims.TokenElems());
    for (float& e : x) e = gain * normal(rng);
    return x;
  };
  p.q = fill(c.q_gain);
  p.k = fill(1.f);
  p.v = fill(1.f);
  p.d_o = fill(1.f);
  return p;
}

Problem WithDocuments(Problem p, const std::vector<int64_t>& lengths) {
  p.doc_start.resize(p.dims.batch * p.dims.seq_len);
  for (int64_t b = 0; b < p.dims.batch; ++b) {
    int64_t start = 0, next = 0;
    size_t which = 0;
    for (int64_t t = 0; t < p.dims.seq_len; ++t) {
      if (t == next) {
        start = t;
        next = t + lengths[which++ % lengths.size()];
      }
      p.doc_start[b * p.dims.seq_len + t] = static_cast<int32_t>(start);
    }
  }
  return p;
}

std::vector<Document> DocumentsOf(const Problem& p) {
  std::vector<Document> docs;
  for (int64_t b = 0; b < p.dims.batch; ++b) {
    for (int64_t t = 0; t < p.dims.seq_len; ++t) {
      if (p.doc_start[b * p.dims.seq_len + t] != t) continue;
      if (!docs.empty() && docs.back().row == b) docs.back().end = t;
      docs.push_back({b, t, p.dims.seq_len});
    }
  }
  return docs;
}

std::vector<float> Tokens(const std::vector<float>& x, const AttnDims& dims, const Document& d) {
  const int64_t row = dims.heads * dims.head_dim, first = d.row * dims.seq_len;
  return std::vector<float>(x.begin() + (first + d.begin) * row, x.begin() + (first + d.end) * row);
}

Problem Alone(const Problem& p, const Document& d) {
  Problem a;
  a.dims = {1, d.end - d.begin, p.dims.heads, p.dims.head_dim};
  a.q = Tokens(p.q, p.dims, d);
  a.k = Tokens(p.k, p.dims, d);
  a.v = Tokens(p.v, p.dims, d);
  a.d_o = Tokens(p.d_o, p.dims, d);
  return a;
}

Problem ShiftKeyAndValue(const Problem& p, int64_t token) {
  Problem q = p;
  const int64_t row = p.dims.heads * p.dims.head_dim;
  for (int64_t e = 0; e < row; ++e) {
    q.k[token * row + e] += 1.f;
    q.v[token * row + e] += 1.f;
  }
  return q;
}

std::vector<float> TokenRow(const std::vector<float>& x, const AttnDims& dims, int64_t t) {
  const int64_t row = dims.heads * dims.head_dim;
  return std::vector<float>(x.begin() + t * row, x.begin() + (t + 1) * row);
}

}  // namespace mesa::kernels::attention::testing
