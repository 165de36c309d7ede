#include "coordinator/postgres_test_server.h"

#include <postgresql/libpq-fe.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mesa::coordinator {
namespace {

// The newest /usr/lib/postgresql/<version>/bin that has initdb (MESA_PG_BIN overrides).
std::string FindBin() {
  if (const char* env = std::getenv("MESA_PG_BIN")) return env;
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
    const std::string bin = e.path().string() + "/bin";
    if (std::filesystem::exists(bin + "/initdb")) found.push_back(bin);
  }
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return found.empty() ? std::string() : found.back();
}

std::string Tail(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostgresTestServer>> PostgresTestServer::Start() {
  std::unique_ptr<PostgresTestServer> s(new PostgresTestServer());
  s->bin_ = FindBin();
  if (s->bin_.empty()) {
    return absl::FailedPreconditionError(
        "no PostgreSQL server programs (/usr/lib/postgresql/*/bin/initdb): install Debian's "
        "postgresql package (scripts/setup.sh does)");
  }
  char tmpl[] = "/tmp/mesa-pg-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  s->dir_ = tmpl;
  if (geteuid() == 0) {
    const passwd* pw = getpwnam("postgres");
    if (pw == nullptr) {
      return absl::FailedPreconditionError(
          "running as root, and there is no 'postgres' user to run the server as (PostgreSQL "
          "refuses root): install Debian's postgresql package");
    }
    if (chown(s->dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      return absl::InternalError(absl::StrCat("chown ", s->dir_, " failed"));
    }
    s->as_postgres_user_ = true;
  }
  if (absl::Status st = s->Run("initdb", absl::StrCat("-D ", s->dir_,
                                                      "/data -A trust -U mesa "
                                                      "-E UTF8 --no-sync --locale=C"));
      !st.ok()) {
    return st;
  }
  if (absl::Status st = s->Restart(); !st.ok()) return st;
  return s;
}

PostgresTestServer::~PostgresTestServer() {
  if (running_) {
    Run("pg_ctl", absl::StrCat("-D ", dir_, "/data -m immediate stop")).IgnoreError();
  }
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

absl::Status PostgresTestServer::Run(const std::string& program, const std::string& args) const {
  const std::string log = absl::StrCat(dir_, "/", program, ".log");
  // cd to the directory: the server's user may not enter the test's working directory.
  const std::string command = absl::StrCat(
      "cd ", dir_, " && ", as_postgres_user_ ? "/usr/sbin/runuser -u postgres -- " : "", bin_, "/",
      program, " ", args, " > ", log, " 2>&1");
  const int rc = std::system(command.c_str());
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("PostgreSQL's ", program, " failed (", command, "):\n", Tail(log)));
  }
  return absl::OkStatus();
}

absl::Status PostgresTestServer::Stop() {
  if (!running_) return absl::OkStatus();
  if (absl::Status s = Run("pg_ctl", absl::StrCat("-D ", dir_, "/data -m fast -w stop")); !s.ok()) {
    return s;
  }
  running_ = false;
  return absl::OkStatus();
}

absl::Status PostgresTestServer::Restart() {
  if (absl::Status s = Stop(); !s.ok()) return s;
  const std::string options =
      absl::StrCat("-k ", dir_, " -c listen_addresses='' -c fsync=off -c max_connections=200");
  if (absl::Status s = Run("pg_ctl", absl::StrCat("-D ", dir_, "/data -w -t 60 -l ", dir_,
                                                  "/server.log -o \"", options, "\" start"));
      !s.ok()) {
    return absl::InternalError(absl::StrCat(s.message(), "\n", Tail(dir_ + "/server.log")));
  }
  running_ = true;
  return absl::OkStatus();
}

std::string PostgresTestServer::Uri(const std::string& name) const {
  return absl::StrCat("postgresql://mesa@/", name, "?host=", dir_);
}

absl::Status PostgresTestServer::Execute(const std::string& database, const std::string& sql) {
  PGconn* c = PQconnectdb(Uri(database).c_str());
  absl::Status status;
  if (PQstatus(c) != CONNECTION_OK) {
    status = absl::UnavailableError(absl::StrCat("test server: ", PQerrorMessage(c)));
  } else {
    PGresult* r = PQexec(c, sql.c_str());
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
      status = absl::InternalError(absl::StrCat(sql, ": ", PQerrorMessage(c)));
    }
    PQclear(r);
  }
  PQfinish(c);
  return status;
}

absl::StatusOr<std::string> PostgresTestServer::NewDatabase(const std::string& name) {
  if (absl::Status s = Execute("postgres", absl::StrCat("CREATE DATABASE \"", name, "\""));
      !s.ok()) {
    return s;
  }
  return Uri(name);
}

absl::Status PostgresTestServer::RefuseWrites(const std::string& database, bool refuse) {
  if (absl::Status s = Execute("postgres", absl::StrCat("ALTER DATABASE \"", database,
                                                        "\" SET default_transaction_read_only = ",
                                                        refuse ? "on" : "off"));
      !s.ok()) {
    return s;
  }
  return Execute("postgres", absl::StrCat("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                          "WHERE datname = '",
                                          database, "' AND pid <> pg_backend_pid()"));
}

}  // namespace mesa::coordinator
