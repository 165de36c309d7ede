// mesa-serve's HTTP endpoint (docs/serving.md), on cpp-httplib (Debian's libcpp-httplib):
//   POST /v1/completions   OpenAI's completions API (serve/completion_api.h), whole or streamed as
//                          server-sent events; a client that disconnects frees its slot
//   GET  /v1/models        the served model
//   GET  /healthz          200 while serving, 503 while draining (readiness)
//   GET  /metrics          Prometheus text (serve/serve_metrics.h)
// With TLS (certificate and key files) it speaks HTTPS only; with a token table, /v1/* need
// "Authorization: Bearer <token>" (the coordinator's --tokens_file format).
#ifndef MESANET_SERVE_HTTP_SERVER_H_
#define MESANET_SERVE_HTTP_SERVER_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/token_table.h"
#include "model/tokenizer/tokenizer.h"
#include "serve/completion_api.h"
#include "serve/engine.h"
#include "serve/serve_metrics.h"

namespace httplib {
class Server;
}

namespace mesa::serve {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                // 0: any free port (Bind returns it)
  std::string tls_cert, tls_key;  // both or neither
  std::optional<coordinator::TokenTable> tokens;
  std::string model_name;
  model::MesaSolve default_solve;
  int threads = 32;  // connections served at once (a streamed request holds one)
  // A second, plaintext listener for /healthz and /metrics only (probes and Prometheus when the
  // API is HTTPS): -1 none, 0 any free port.
  int metrics_port = -1;
  std::string metrics_host = "0.0.0.0";
};

class HttpServer {
 public:
  // `engine`, `tokenizer` and `metrics` must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(HttpServerOptions options,
                                                            Engine* engine,
                                                            const model::Tokenizer* tokenizer,
                                                            ServeMetrics* metrics);
  ~HttpServer();

  // Binds the listening sockets; returns the API's port.
  absl::StatusOr<int> Bind();
  // The probes' port after Bind (-1: none).
  int metrics_port() const { return metrics_port_; }
  // Serves until Stop (from another thread or a signal handler's thread).
  void Serve();
  void Stop();
  // Draining: /healthz answers 503 and new completions are refused with 503.
  void set_draining(bool on) { draining_ = on; }

 private:
  HttpServer(HttpServerOptions options, Engine* engine, const model::Tokenizer* tokenizer,
             ServeMetrics* metrics);
  void Routes();
  void ProbeRoutes(httplib::Server& s);  // /healthz and /metrics

  HttpServerOptions options_;
  Engine* engine_;
  const model::Tokenizer* tokenizer_;
  ServeMetrics* metrics_;
  std::unique_ptr<httplib::Server> server_;
  std::atomic<bool> draining_{false};
  int listen_fd_ = -1;
  std::unique_ptr<httplib::Server> probe_server_;
  int metrics_port_ = -1;
  std::atomic<uint64_t> next_id_{1};
  const int64_t created_;
};

}  // namespace mesa::serve

#endif  // MESANET_SERVE_HTTP_SERVER_H_
