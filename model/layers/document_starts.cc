#include "model/layers/document_starts.h"

namespace mesa::model {

void DocumentStarts(const int32_t* tokens, int64_t b, int64_t t, int32_t bos, int32_t* doc_start) {
  for (int64_t bi = 0; bi < b; ++bi) {
    int32_t start = 0;
    for (int64_t ti = 0; ti < t; ++ti) {
      if (tokens[bi * t + ti] == bos) start = static_cast<int32_t>(ti);
      doc_start[bi * t + ti] = start;
    }
  }
}

}  // namespace mesa::model
