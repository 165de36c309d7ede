// libFuzzer target: the worker's parser of mesa-train's event lines (proto/trainer_events.h).
#include <cstddef>
#include <cstdint>
#include <string>

#include "proto/trainer_events.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  auto event = mesa::ParseEventLine(line);
  if (!event.ok()) return 0;
  // What the trainer can print, the worker must read back: a parsed event round-trips.
  auto again = mesa::ParseEventLine(mesa::FormatEventLine(*event));
  if (!again.ok() || again->SerializeAsString() != event->SerializeAsString()) __builtin_trap();
  return 0;
}
