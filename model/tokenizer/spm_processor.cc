#include "model/tokenizer/spm_processor.h"

#include <dlfcn.h>
#include <sentencepiece_processor.h>

#include <cstring>

#include <utility>

namespace mesa::model {

struct SpmProcessor::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SpmProcessor::SpmProcessor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SpmProcessor::~SpmProcessor() = default;

namespace {

// Debian's libsentencepiece bundles protobuf-lite 3.14; in a process that also links the system
// libprotobuf (3.21), the bundled model proto's version check resolves to the system library and
// aborts the process on the first Load. True when that would happen.
bool SystemProtobufInterposes() {
  void* verify = dlsym(RTLD_DEFAULT, "_ZN6google8protobuf8internal13VerifyVersionEiiPKc");
  Dl_info info;
  return verify != nullptr && dladdr(verify, &info) != 0 && info.dli_fname != nullptr &&
         std::strstr(info.dli_fname, "libprotobuf.so") != nullptr;
}

}  // namespace

std::unique_ptr<SpmProcessor> SpmProcessor::Load(const std::string& path, std::string* error) {
  if (SystemProtobufInterposes()) {
    *error =
        "this program links the system libprotobuf, which clashes with the protobuf-lite bundled "
        "in Debian's libsentencepiece (it would abort); SentencePiece works only in programs "
        "without protobuf for now";
    return nullptr;
  }
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
