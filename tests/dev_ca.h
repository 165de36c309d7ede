// Certificates for tests: runs scripts/make_dev_ca.sh (docs/security.md), which needs openssl.
#ifndef MESANET_TESTS_DEV_CA_H_
#define MESANET_TESTS_DEV_CA_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace mesa::testing {

// Makes a CA in `dir` with server.pem/key (localhost, 127.0.0.1, ::1), worker.pem/key and the
// certificates `args` asks for (make_dev_ca.sh's SERVER_NAME... --workers NAME...).
absl::Status MakeDevCa(const std::string& dir, const std::vector<std::string>& args = {});

}  // namespace mesa::testing

#endif  // MESANET_TESTS_DEV_CA_H_
