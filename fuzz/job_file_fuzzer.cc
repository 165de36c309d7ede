// libFuzzer target: job files (YAML → mesa.v1.JobSpec) and the job-spec validator behind them.
// Any input must give a JobSpec or a clean error, never a crash. Run by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "proto/spec_yaml.h"
#include "spec/validate_job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = mesa::ParseJobSpecYaml(text);
  if (spec.ok()) {
    (void)mesa::spec::ValidateJobSpec(*spec);
    (void)mesa::spec::ValidateJobSpec(*spec, {.require_absolute_paths = true});
  }
  return 0;
}
