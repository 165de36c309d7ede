// A thin, Abseil-free wrapper of sentencepiece::SentencePieceProcessor. Debian's
// sentencepiece_processor.h declares `absl::string_view` as std::string_view, which clashes with
// Debian's Abseil (its own string_view class), so only this file's .cc includes it.
#ifndef MESANET_MODEL_TOKENIZER_SPM_PROCESSOR_H_
#define MESANET_MODEL_TOKENIZER_SPM_PROCESSOR_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mesa::model {

class SpmProcessor {
 public:
  // Null with `*error` set when the file is not a loadable model.
  static std::unique_ptr<SpmProcessor> Load(const std::string& path, std::string* error);
  ~SpmProcessor();

  std::vector<int> Encode(std::string_view text) const;
  std::string Decode(const std::vector<int>& ids) const;
  int bos_id() const;
  int piece_size() const;

 private:
  struct Impl;
  explicit SpmProcessor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Runs SentencePieceTrainer::Train with command-line style `args`; "" on success, else the error.
std::string TrainSentencePiece(const std::string& args);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TOKENIZER_SPM_PROCESSOR_H_
