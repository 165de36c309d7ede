// A real PostgreSQL server for tests (Debian's postgresql package): initdb + pg_ctl in a fresh
// directory, listening on a Unix socket there only (no TCP port to collide with), fsync off.
// PostgreSQL refuses to run as root, so under root (CI) its programs run as the `postgres` user
// the package creates (runuser); tests that start one are tagged "no-sandbox" (Bazel's sandbox
// maps root alone and cannot switch users). Stopped and removed when destroyed.
#ifndef MESANET_COORDINATOR_POSTGRES_TEST_SERVER_H_
#define MESANET_COORDINATOR_POSTGRES_TEST_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace mesa::coordinator {

class PostgresTestServer {
 public:
  // Initializes and starts a server; the error names what is missing (the package, the user).
  static absl::StatusOr<std::unique_ptr<PostgresTestServer>> Start();
  ~PostgresTestServer();
  PostgresTestServer(const PostgresTestServer&) = delete;
  PostgresTestServer& operator=(const PostgresTestServer&) = delete;

  // Creates an empty database `name` and returns its URI (Store::Options::path).
  absl::StatusOr<std::string> NewDatabase(const std::string& name);
  // The URI of database `name` (created or not).
  std::string Uri(const std::string& name) const;
  // Runs `sql` as the superuser on database `database` (a test's fault: sessions cut, writes
  // refused).
  absl::Status Execute(const std::string& database, const std::string& sql);
  // A store that refuses writes, as a full disk would: every session of `database` is cut and new
  // ones are read-only (`refuse` false: writable again, sessions cut once more).
  absl::Status RefuseWrites(const std::string& database, bool refuse);

  // Stops the server (fast shutdown: connections are cut) and starts it again on the same data.
  absl::Status Restart();
  // Stops it (fast shutdown); Restart() starts it again.
  absl::Status Stop();

 private:
  PostgresTestServer() = default;
  // Runs a PostgreSQL program from the server's bin directory as the server's user.
  absl::Status Run(const std::string& program, const std::string& args) const;

  std::string bin_;  // /usr/lib/postgresql/<version>/bin
  std::string dir_;  // data in dir_/data, socket and logs in dir_
  bool as_postgres_user_ = false;
  bool running_ = false;
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_POSTGRES_TEST_SERVER_H_
