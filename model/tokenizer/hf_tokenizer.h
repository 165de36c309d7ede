// Hugging Face `tokenizer.json` with a byte-level BPE model (GPT-2, Llama-3, Qwen style), built on
// the byte-level BPE core of gpt2_tokenizer.h.
//
// Read: model.vocab, model.merges ("a b" strings or [a, b] pairs), model.ignore_merges,
// added_tokens (matched verbatim before pre-tokenisation, longest first; decode to their content),
// and the pre_tokenizer: ByteLevel (use_regex: GPT-2's regex; add_prefix_space), Split with a
// Regex pattern and behavior Isolated, or a Sequence of those. The normalizer must be null or NFC
// (applied with utf8proc to the text between added tokens, as Hugging Face's tokenizers does).
// Refused with an error naming the file and the field: other model types (WordPiece, Unigram,
// WordLevel), byte_fallback, continuing_subword_prefix / end_of_word_suffix, other pre-tokenizers
// and normalizers, and regexes RE2 cannot run.
// BOS (the document separator) is the first of <|begin_of_text|>, <|endoftext|>, <s>, <bos> found.
#ifndef MESANET_MODEL_TOKENIZER_HF_TOKENIZER_H_
#define MESANET_MODEL_TOKENIZER_HF_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/gpt2_tokenizer.h"

namespace mesa::model {

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> LoadHfTokenizer(const std::string& path);
// `source` names the file in errors.
absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> HfTokenizerFromString(absl::string_view json,
                                                                     absl::string_view source);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TOKENIZER_HF_TOKENIZER_H_
