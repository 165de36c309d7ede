// Helpers shared by the coordinator's tests.
#ifndef MESANET_COORDINATOR_TEST_UTIL_H_
#define MESANET_COORDINATOR_TEST_UTIL_H_

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "mesa/v1/job.pb.h"
#include "spec/testing.h"

namespace mesa::coordinator {

using ::mesa::spec::ValidTrainSpec;

// A fresh path under the test's temporary directory.
inline std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  static int counter = 0;
  return absl::StrCat(dir ? dir : "/tmp", "/", name, "-", ++counter, "-", ::getpid());
}

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_TEST_UTIL_H_
