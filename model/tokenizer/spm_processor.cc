#include "model/tokenizer/spm_processor.h"

#include <sentencepiece_processor.h>

#include <utility>

namespace mesa::model {

struct SpmProcessor::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SpmProcessor::SpmProcessor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SpmProcessor::~SpmProcessor() = default;

std::unique_ptr<SpmProcessor> SpmProcessor::Load(const std::string& path, std::string* error) {
  auto impl = std::make_unique<Impl>();
  const sentencepiece::util::Status status = impl->processor.Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return std::unique_ptr<SpmProcessor>(new SpmProcessor(std::move(impl)));
}

std::vector<int> SpmProcessor::Encode(std::string_view text) const {
  std::vector<int> ids;
  // Encoding only fails for an unloaded model, which Load rules out.
  (void)impl_->processor.Encode(text, &ids);
  return ids;
}

std::string SpmProcessor::Decode(const std::vector<int>& ids) const {
  std::string out;
  (void)impl_->processor.Decode(ids, &out);
  return out;
}

int SpmProcessor::bos_id() const { return impl_->processor.bos_id(); }
int SpmProcessor::piece_size() const { return impl_->processor.GetPieceSize(); }

}  // namespace mesa::model
