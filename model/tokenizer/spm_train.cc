// TrainSentencePiece (declared in spm_processor.h), in its own library so that only tests and
// tools that train link libsentencepiece_train.
#include <sentencepiece_trainer.h>

#include "model/tokenizer/spm_processor.h"

namespace mesa::model {

std::string TrainSentencePiece(const std::string& args) {
  const sentencepiece::util::Status status = sentencepiece::SentencePieceTrainer::Train(args);
  return status.ok() ? "" : status.ToString();
}

}  // namespace mesa::model
