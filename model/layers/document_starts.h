// Packed documents (data.reset_at_bos, docs/math.md §8.6): where each position's document starts.
#ifndef MESANET_MODEL_LAYERS_DOCUMENT_STARTS_H_
#define MESANET_MODEL_LAYERS_DOCUMENT_STARTS_H_

#include <cstdint>

namespace mesa::model {

// Per position of `b` rows of `t` tokens, the in-row index of the first token of its document: a
// document starts at every `bos` token (which belongs to it) and at each row's start. The one
// place these are computed (MixerCall::doc_start).
void DocumentStarts(const int32_t* tokens, int64_t b, int64_t t, int32_t bos, int32_t* doc_start);

}  // namespace mesa::model

#endif  // MESANET_MODEL_LAYERS_DOCUMENT_STARTS_H_
