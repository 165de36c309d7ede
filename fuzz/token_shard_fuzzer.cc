// libFuzzer target: the token-shard reader (model/data/token_shard.h). Any file must open with
// every token inside it, or give an error; never a crash or a read past the mapping.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "model/data/token_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/mesa-fuzz-shard-" + std::to_string(getpid()) + ".bin";
  FILE* file = fopen(path.c_str(), "wb");
  if (file == nullptr) return 0;
  fwrite(data, 1, size, file);
  fclose(file);
  auto shard = mesa::model::TokenShard::Open(path);
  if (!shard.ok()) return 0;
  const size_t width = (*shard)->version() == mesa::model::kShardVersionU16 ? 2 : 4;
  const size_t header = mesa::model::kShardHeaderInts * 4;
  if (header + static_cast<size_t>((*shard)->size()) * width > size) __builtin_trap();
  std::vector<uint32_t> tokens;
  if (!(*shard)->Read(0, (*shard)->size(), &tokens).ok()) __builtin_trap();  // the file is intact
  (void)(*shard)->Read((*shard)->size() - 1, 2, &tokens);  // past the end: an error, not a read
  return 0;
}
