// spm_train_for_test ARGS...: SentencePieceTrainer::Train with the arguments joined by spaces.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/tokenizer/spm_processor.h"

int main(int argc, char** argv) {
  std::string args;
  for (int i = 1; i < argc; ++i) args += std::string(i > 1 ? " " : "") + argv[i];
  const std::string error = mesa::model::TrainSentencePiece(args);
  if (!error.empty()) fprintf(stderr, "spm_train_for_test: %s\n", error.c_str());
  fflush(nullptr);
  // Debian's Abseil flags hang in a static destructor once the trainer ran (spm_tokenizer_test).
  std::_Exit(error.empty() ? 0 : 1);
}
