// One row's sampling settings for Backend::SoftcapSample: plain data, shared by the C++ backends
// and the CUDA kernel (model/backend/cuda/sampling.cu). The meaning is model::SampleToken's
// (model/inference/sampler.h): temperature 0 or top_k 1 is greedy; the draw's uniform number is
// CounterUniform(seed, draw).
#ifndef MESANET_MODEL_BACKEND_SAMPLING_ROW_H_
#define MESANET_MODEL_BACKEND_SAMPLING_ROW_H_

#include <cstdint>

namespace mesa::model {

struct SamplingRow {
  float temperature = 0.f;  // >= 0
  int32_t top_k = 0;        // >= 0; 0: no cut
  float top_p = 1.f;        // in (0, 1]
  uint32_t unused = 0;
  uint64_t seed = 0;
  uint64_t draw = 0;  // the request's draw index
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_BACKEND_SAMPLING_ROW_H_
