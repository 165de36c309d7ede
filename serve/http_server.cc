#include "serve/http_server.h"

#include <sys/socket.h>

#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "spec/serving.h"

namespace mesa::serve {
namespace {

using json = nlohmann::json;

void Reply(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  if (error.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(error.Json(), "application/json");
}

// One completion request's choices as the engine runs them, shared by the content provider's
// calls and its releaser.
struct Exchange {
  std::shared_ptr<const CompletionRequest> request;
  ResponseHeader header;
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<ChoiceResult> results;
  std::vector<bool> finished, echo_sent;
  std::vector<int64_t> text_bytes;  // per choice, streamed so far (the echoed prompt included)
  std::optional<ApiError> error;    // the first failure of a choice
  absl::Time last_write = absl::Now();
  void CancelAll() {
    for (auto& s : streams) s->Cancel();
  }
  bool AllFinished() const {
    for (bool f : finished) {
      if (!f) return false;
    }
    return true;
  }
};

// Waits up to `wait` for events of unfinished choices and hands each to `on_event`; true when
// there was at least one.
template <typename OnEvent>
bool PollEvents(Exchange& x, absl::Duration wait, const OnEvent& on_event) {
  bool any = false;
  for (size_t i = 0; i < x.streams.size(); ++i) {
    while (!x.finished[i]) {
      std::optional<EngineEvent> e = x.streams[i]->Next(absl::ZeroDuration());
      if (!e.has_value()) break;
      on_event(static_cast<int>(i), *e);
      any = true;
    }
  }
  if (any) return true;
  for (size_t i = 0; i < x.streams.size(); ++i) {
    if (x.finished[i]) continue;
    if (std::optional<EngineEvent> e = x.streams[i]->Next(wait); e.has_value()) {
      on_event(static_cast<int>(i), *e);
      return true;
    }
    return false;  // waited on the first unfinished one
  }
  return false;
}

constexpr absl::Duration kPollWait = absl::Milliseconds(20);
// A closed connection shows only when a write to it fails (httplib's is_writable does not see a
// peer that has gone), so a response with nothing to say writes a heartbeat this often: an SSE
// comment, or a space before the JSON body (JSON allows it). The second write after the client
// left fails, and its choices are cancelled.
constexpr absl::Duration kHeartbeat = absl::Milliseconds(500);

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(HttpServerOptions options,
                                                               Engine* engine,
                                                               const model::Tokenizer* tokenizer,
                                                               ServeMetrics* metrics) {
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (options.threads < 2) return absl::InvalidArgumentError("the server needs >= 2 threads");
  std::unique_ptr<HttpServer> s(new HttpServer(std::move(options), engine, tokenizer, metrics));
  if (!s->options_.tls_cert.empty()) {
    auto tls = std::make_unique<httplib::SSLServer>(s->options_.tls_cert.c_str(),
                                                    s->options_.tls_key.c_str());
    if (!tls->is_valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls_cert ", s->options_.tls_cert, " and --tls_key ", s->options_.tls_key,
                       ": not a readable PEM certificate and its private key"));
    }
    s->server_ = std::move(tls);
  } else {
    s->server_ = std::make_unique<httplib::Server>();
  }
  s->Routes();
  if (s->options_.metrics_port >= 0) {
    s->probe_server_ = std::make_unique<httplib::Server>();
    s->probe_server_->new_task_queue = [] { return new httplib::ThreadPool(2); };
    s->ProbeRoutes(*s->probe_server_);
  }
  return s;
}

HttpServer::HttpServer(HttpServerOptions options, Engine* engine, const model::Tokenizer* tokenizer,
                       ServeMetrics* metrics)
    : options_(std::move(options)),
      engine_(engine),
      tokenizer_(tokenizer),
      metrics_(metrics),
      created_(absl::ToUnixSeconds(absl::Now())) {}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<int> HttpServer::Bind() {
  int port = options_.port;
  if (port == 0) {
    port = server_->bind_to_any_port(options_.host);
    if (port < 0) return absl::UnavailableError(absl::StrCat("cannot bind ", options_.host));
  } else if (!server_->bind_to_port(options_.host, port)) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind ", options_.host, ":", port, " (in use? pass another --port)"));
  }
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of new connections (64 clients at once)
  // would wait a second for SYN retransmits. Listening again on the socket raises the backlog.
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
  if (probe_server_ != nullptr) {
    const int want = options_.metrics_port;
    metrics_port_ = want == 0
                        ? probe_server_->bind_to_any_port(options_.metrics_host)
                        : (probe_server_->bind_to_port(options_.metrics_host, want) ? want : -1);
    if (metrics_port_ < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot bind the metrics port ", options_.metrics_host, ":", want));
    }
  }
  return port;
}

void HttpServer::Serve() {
  std::thread probes;
  if (probe_server_ != nullptr)
    probes = std::thread([this] { probe_server_->listen_after_bind(); });
  server_->listen_after_bind();
  if (probe_server_ != nullptr) probe_server_->stop();
  if (probes.joinable()) probes.join();
}

void HttpServer::Stop() {
  if (server_ != nullptr) server_->stop();
  if (probe_server_ != nullptr) probe_server_->stop();
}

void HttpServer::ProbeRoutes(httplib::Server& s) {
  s.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_) {
      res.status = 503;
      res.set_content("{\"status\":\"draining\"}", "application/json");
      return;
    }
    const Engine::Load load = engine_->load();
    res.set_content(absl::StrFormat(R"({"status":"ok","queued":%d,"running":%d,"slots":%d})",
                                    load.queued, load.running, load.slots),
                    "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_ != nullptr ? metrics_->Text() : "", "text/plain; version=0.0.4");
  });
}

void HttpServer::Routes() {
  httplib::Server& s = *server_;
  const int threads = options_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(spec::kMaxServeRequestBytes);
  // httplib's own options (address reuse), and the listening socket kept for Bind's backlog.
  s.set_socket_options([this](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = sock;
  });
  s.set_logger([this](const httplib::Request&, const httplib::Response& res) {
    if (metrics_ != nullptr) metrics_->Responses(res.status).Increment();
  });
  // Errors httplib raises itself (no route, body too large, unreadable request) in OpenAI's form.
  s.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                              httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      e.type = "not_found_error";
      e.message = absl::StrCat("no route ", req.method, " ", req.path,
                               ": see POST /v1/completions, GET /v1/models, /healthz, /metrics");
    } else if (res.status == 413) {
      e.message = absl::StrCat("the request body is over the limit of ",
                               spec::kMaxServeRequestBytes, " bytes");
    } else {
      e.message = absl::StrCat("HTTP ", res.status);
    }
    res.set_content(e.Json(), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));

  auto authorized = [this](const httplib::Request& req, httplib::Response& res) {
    if (!options_.tokens.has_value()) return true;
    const std::string value = req.get_header_value("Authorization");
    constexpr absl::string_view kScheme = "bearer ";
    if (value.size() > kScheme.size() &&
        absl::EqualsIgnoreCase(absl::string_view(value).substr(0, kScheme.size()), kScheme) &&
        options_.tokens->Find(absl::string_view(value).substr(kScheme.size())).has_value()) {
      return true;
    }
    Reply(res, ApiErrorOf(absl::UnauthenticatedError(
                   "this server requires a bearer token (header \"Authorization: Bearer "
                   "<token>\", the OpenAI clients' api_key); the token given, if any, is not "
                   "valid")));
    return false;
  };

  ProbeRoutes(s);
  s.Get("/v1/models", [this, authorized](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    json model = {{"id", options_.model_name},
                  {"object", "model"},
                  {"created", created_},
                  {"owned_by", "mesanet"}};
    res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(),
                    "application/json");
  });
  s.Post("/v1/completions", [this, authorized](const httplib::Request& req,
                                               httplib::Response& res) {
    if (!authorized(req, res)) return;
    if (draining_) {
      Reply(res, ApiErrorOf(absl::UnavailableError("the server is draining; retry elsewhere")));
      return;
    }
    ApiError error;
    const ParseContext context{.tokenizer = tokenizer_,
                               .vocab_size = tokenizer_->vocab_size(),
                               .model_name = options_.model_name,
                               .default_solve = options_.default_solve};
    absl::StatusOr<CompletionRequest> parsed = ParseCompletionRequest(req.body, context, &error);
    if (!parsed.ok()) {
      Reply(res, error);
      return;
    }
    auto x = std::make_shared<Exchange>();
    x->request = std::make_shared<const CompletionRequest>(*std::move(parsed));
    const CompletionRequest& request = *x->request;
    x->header = {absl::StrFormat("cmpl-%x%08x", created_, next_id_.fetch_add(1)),
                 absl::ToUnixSeconds(absl::Now()), options_.model_name};
    const int choices = static_cast<int>(request.prompts.size()) * request.n;
    for (int i = 0; i < choices; ++i) {
      absl::StatusOr<std::shared_ptr<RequestStream>> stream =
          engine_->Submit(EngineRequestFor(request, i));
      if (!stream.ok()) {
        x->CancelAll();
        Reply(res, ApiErrorOf(stream.status()));
        return;
      }
      x->streams.push_back(*std::move(stream));
    }
    x->results.resize(choices);
    x->finished.assign(choices, false);
    x->echo_sent.assign(choices, false);
    x->text_bytes.assign(choices, 0);
    // A client that goes away (a write fails, or the connection is found closed) cancels its
    // choices: the engine drops them and frees their slots before its next step.
    auto release = [x](bool success) {
      if (!success) x->CancelAll();
    };
    if (request.stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, x](size_t, httplib::DataSink& sink) {
            const CompletionRequest& r = *x->request;
            bool write_ok = true;
            auto send = [&](const std::string& data) {
              if (!data.empty() && write_ok) {
                const std::string event = absl::StrCat("data: ", data, "\n\n");
                write_ok = sink.write(event.data(), event.size());
                x->last_write = absl::Now();
              }
            };
            const bool got = PollEvents(*x, kPollWait, [&](int i, const EngineEvent& e) {
              if (e.kind == EngineEvent::Kind::kError) {
                x->finished[i] = true;
                send(ApiErrorOf(e.error).Json());
                return;
              }
              Accumulate(e, &x->results[i]);
              if (e.kind == EngineEvent::Kind::kPrompt) return;
              if (r.echo && !x->echo_sent[i]) {
                x->echo_sent[i] = true;
                send(StreamEchoJson(x->header, r, i, x->results[i], *tokenizer_));
                x->text_bytes[i] += static_cast<int64_t>(r.prompt_text[i / r.n].size());
              }
              send(StreamChunkJson(x->header, r, i, e, x->text_bytes[i], *tokenizer_));
              x->text_bytes[i] += static_cast<int64_t>(e.piece.text.size());
              if (e.kind == EngineEvent::Kind::kFinished) x->finished[i] = true;
            });
            if (!got && absl::Now() - x->last_write > kHeartbeat) {
              write_ok = sink.write(":\n\n", 3);
              x->last_write = absl::Now();
            }
            if (!write_ok || (!got && !sink.is_writable())) {
              x->CancelAll();
              return false;
            }
            if (x->AllFinished()) {
              if (r.include_usage) send(StreamUsageJson(x->header, r, x->results));
              send("[DONE]");
              sink.done();
            }
            return write_ok;
          },
          release);
      return;
    }
    res.set_chunked_content_provider(
        "application/json",
        [this, x](size_t, httplib::DataSink& sink) {
          const bool got = PollEvents(*x, kPollWait, [&](int i, const EngineEvent& e) {
            if (e.kind == EngineEvent::Kind::kError) {
              x->finished[i] = true;
              if (!x->error.has_value()) x->error = ApiErrorOf(e.error);
              return;
            }
            Accumulate(e, &x->results[i]);
            if (e.kind == EngineEvent::Kind::kFinished) x->finished[i] = true;
          });
          if (absl::Now() - x->last_write > kHeartbeat) {
            x->last_write = absl::Now();
            if (!sink.write(" ", 1)) {
              x->CancelAll();
              return false;
            }
          }
          if (!got && !sink.is_writable()) {
            x->CancelAll();
            return false;
          }
          if (!x->AllFinished()) return true;
          // A failure after the request was accepted (the status line is out): the body is
          // OpenAI's error object.
          const std::string body = x->error.has_value() ? x->error->Json()
                                                        : CompletionJson(x->header, *x->request,
                                                                         x->results, *tokenizer_);
          const bool ok = sink.write(body.data(), body.size());
          sink.done();
          return ok;
        },
        release);
  });
}

}  // namespace mesa::serve
