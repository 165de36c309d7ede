// Helpers shared by the coordinator's tests.
#ifndef MESANET_COORDINATOR_TEST_UTIL_H_
#define MESANET_COORDINATOR_TEST_UTIL_H_

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"
#include "gtest/gtest.h"
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

// Opens the store at `path` (no fsync per commit) and a coordinator on it with `options`, its
// background threads off: the test drives the scheduling passes and lease checks itself.
inline void OpenTestCoordinator(const std::string& path, const Clock* clock, Metrics* metrics,
                                CoordinatorOptions options, std::unique_ptr<Store>* store,
                                std::unique_ptr<Coordinator>* coordinator) {
  Store::Options so;
  so.path = path;
  so.synchronous_full = false;
  auto s = Store::Open(so);
  ASSERT_TRUE(s.ok()) << s.status();
  *store = std::move(*s);
  options.background_threads = false;
  auto c = Coordinator::Create(store->get(), clock, metrics, options);
  ASSERT_TRUE(c.ok()) << c.status();
  *coordinator = std::move(*c);
}

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_TEST_UTIL_H_
