// libFuzzer target: the safetensors reader (checkpoints, the op-check tool's inputs).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>(data[i]);
  auto file = mesa::safetensors::SafetensorsFile::Parse(std::move(bytes));
  if (!file.ok()) return 0;
  for (const auto& tensor : file->tensors()) (void)file->GetAsFloat32(tensor.name);
  return 0;
}
