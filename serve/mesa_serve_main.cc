// mesa-serve: a checkpoint behind an OpenAI-compatible HTTP endpoint with continuous batching and a
// prefix state cache (docs/serving.md). SIGTERM or SIGINT drains: /healthz turns 503, new requests
// are refused, running ones finish (up to --drain_seconds), then it exits 0.
// Exit codes as mesa-train's: 2 for the user's mistakes, 1 for the machine's.
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/cli_flags.h"
#include "coordinator/token_table.h"
#include "kernels/common/limits.h"
#include "model/checkpoint/checkpoint.h"
#include "model/generate/from_checkpoint.h"
#include "model/trainer/trainer.h"
#include "nlohmann/json.hpp"
#include "serve/engine.h"
#include "serve/http_server.h"
#include "serve/serve_metrics.h"
#include "spec/device.h"
#include "spec/serving.h"

ABSL_FLAG(std::string, checkpoint, "", "Checkpoint root or step directory to serve.");
ABSL_FLAG(std::string, model_name, "",
          "The model's name in the API (default: the checkpoint root's directory name).");
ABSL_FLAG(std::string, host, "127.0.0.1", "Address to listen on (0.0.0.0: every interface).");
ABSL_FLAG(int, port, 8000, "Port to listen on (0: any free port, printed at start).");
ABSL_FLAG(int, metrics_port, -1,
          "Also serve /healthz and /metrics in plaintext on this port of --host (probes and "
          "Prometheus when the API is HTTPS); -1: no, 0: any free port.");
ABSL_FLAG(std::string, tls_cert, "", "Server certificate chain (PEM): HTTPS only.");
ABSL_FLAG(std::string, tls_key, "", "Its private key (PEM).");
ABSL_FLAG(std::string, tokens_file, "",
          "Bearer tokens (the coordinator's --tokens_file format): /v1/* then need one.");
ABSL_FLAG(int, slots, 16, "Requests decoded together (a decoding state row each).");
ABSL_FLAG(int, max_queue, 256, "Requests that may wait for a slot; more get 429.");
ABSL_FLAG(int, prefill_chunk, 1024,
          "Prompt tokens per prefill piece (larger: faster prefill, longer stalls of decoding).");
ABSL_FLAG(int, prefix_cache_mb, 256,
          "Memory for prefix state snapshots, MiB (0: no prefix cache).");
ABSL_FLAG(int, prefix_cache_stride, 1024,
          "Snapshot positions: multiples of this many tokens (a multiple of --prefill_chunk), and "
          "each prompt's last multiple of --prefill_chunk.");
ABSL_FLAG(float, cg_tol, 0.0f,
          "Default for requests: Mesa layers stop CG below this relative residual (0 = fixed "
          "steps).");
ABSL_FLAG(int, cg_max_steps, mesa::kernels::kDefaultCgSteps,
          "Default for requests: CG steps (fixed), or their bound with --cg_tol.");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or cuda.");
ABSL_FLAG(int, threads, 0, "CPU threads for the model (0 = all cores).");
ABSL_FLAG(int, http_threads, 0,
          "Connections served at once (0: 2 x slots + 16); a streamed request holds one.");
ABSL_FLAG(int, drain_seconds, 30, "On SIGTERM, how long running requests may take to finish.");
ABSL_FLAG(std::string, encoder_json, "", "GPT-2 encoder.json (gpt2-tokenized checkpoints).");
ABSL_FLAG(std::string, vocab_bpe, "", "GPT-2 vocab.bpe (gpt2-tokenized checkpoints).");
ABSL_FLAG(
    std::string, tokenizer_file, "",
    "tokenizer.json of hf-tokenized checkpoints (default: the path the checkpoint recorded).");

namespace {

using mesa::serve::Engine;

int g_signal_pipe[2] = {-1, -1};

void OnSignal(int signal_number) {
  const unsigned char n = static_cast<unsigned char>(signal_number);
  (void)!write(g_signal_pipe[1], &n, 1);  // async-signal-safe
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "mesa-serve: %s\n", std::string(status.message()).c_str());
  return static_cast<int>(mesa::model::ExitCodeFor(status));
}

// The training job's name, else the directory that holds the checkpoints' root.
std::string DefaultModelName(const mesa::model::CheckpointDescription& described) {
  const nlohmann::json spec =
      nlohmann::json::parse(described.spec_json, nullptr, /*allow_exceptions=*/false);
  if (spec.is_object() && spec.contains("name") && spec["name"].is_string() &&
      !spec["name"].get<std::string>().empty()) {
    return spec["name"].get<std::string>();
  }
  std::filesystem::path step(described.dir);
  std::filesystem::path root = step.parent_path();
  if (root.filename() == "checkpoints" && root.has_parent_path()) root = root.parent_path();
  const std::string name = root.filename().string();
  return name.empty() ? "mesanet" : name;
}

absl::Status CheckFlags() {
  if (absl::GetFlag(FLAGS_checkpoint).empty()) {
    return absl::InvalidArgumentError("--checkpoint is required: the checkpoint to serve");
  }
  if (absl::GetFlag(FLAGS_slots) < 1 || absl::GetFlag(FLAGS_slots) > 1024) {
    return absl::InvalidArgumentError("--slots must be in [1, 1024]");
  }
  if (absl::GetFlag(FLAGS_max_queue) < 0) {
    return absl::InvalidArgumentError("--max_queue must be >= 0");
  }
  const int chunk = absl::GetFlag(FLAGS_prefill_chunk);
  if (chunk < 1 || chunk > 8192) {
    return absl::InvalidArgumentError("--prefill_chunk must be in [1, 8192]");
  }
  const int stride = absl::GetFlag(FLAGS_prefix_cache_stride);
  if (stride < chunk || stride % chunk != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prefix_cache_stride ", stride, " must be a multiple of --prefill_chunk ", chunk));
  }
  if (absl::GetFlag(FLAGS_prefix_cache_mb) < 0) {
    return absl::InvalidArgumentError("--prefix_cache_mb must be >= 0");
  }
  if (absl::GetFlag(FLAGS_port) < 0 || absl::GetFlag(FLAGS_port) > 65535) {
    return absl::InvalidArgumentError("--port must be in [0, 65535]");
  }
  if (absl::GetFlag(FLAGS_metrics_port) < -1 || absl::GetFlag(FLAGS_metrics_port) > 65535) {
    return absl::InvalidArgumentError("--metrics_port must be -1 (none) or in [0, 65535]");
  }
  const int steps = absl::GetFlag(FLAGS_cg_max_steps);
  const float tol = absl::GetFlag(FLAGS_cg_tol);
  if (steps < 1 || steps > mesa::spec::kMaxServeCgSteps || !(tol >= 0 && tol <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("--cg_max_steps must be in [1, ",
                                                   mesa::spec::kMaxServeCgSteps,
                                                   "] and --cg_tol in [0, 1]"));
  }
  if (absl::GetFlag(FLAGS_http_threads) < 0 || absl::GetFlag(FLAGS_drain_seconds) < 0) {
    return absl::InvalidArgumentError("--http_threads and --drain_seconds must be >= 0");
  }
  if (auto device = mesa::spec::ParseDevice(absl::GetFlag(FLAGS_device)); !device.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--device: ", device.status().message()));
  }
  return mesa::base::CheckThreadsFlag(absl::GetFlag(FLAGS_threads));
}

}  // namespace

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(
      argc, argv,
      "mesa-serve --checkpoint DIR [--port 8000] [--host 127.0.0.1] [--slots 16] "
      "[--prefix_cache_mb 256] [--tls_cert F --tls_key F] [--tokens_file F] "
      "[--device cpu|cuda|auto]\n"
      "Serves POST /v1/completions (OpenAI style), GET /v1/models, /healthz and /metrics.");
  if (absl::Status s = CheckFlags(); !s.ok()) return Fail(s);

  // SIGTERM and SIGINT write their number to a pipe that the drain thread reads: a handler works
  // whichever thread the signal lands on (threads made before main, OpenBLAS's, cannot block it).
  if (pipe(g_signal_pipe) != 0) return Fail(absl::InternalError("pipe() failed"));
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a death

  std::optional<mesa::coordinator::TokenTable> tokens;
  if (!absl::GetFlag(FLAGS_tokens_file).empty()) {
    absl::StatusOr<mesa::coordinator::TokenTable> table =
        mesa::coordinator::TokenTable::Load(absl::GetFlag(FLAGS_tokens_file));
    if (!table.ok()) return Fail(table.status());
    tokens = *std::move(table);
  } else if (absl::GetFlag(FLAGS_host) != "127.0.0.1" && absl::GetFlag(FLAGS_host) != "localhost" &&
             absl::GetFlag(FLAGS_host) != "::1") {
    std::fprintf(stderr,
                 "mesa-serve: warning: listening on %s without --tokens_file: anyone who can "
                 "reach it may use the model\n",
                 absl::GetFlag(FLAGS_host).c_str());
  }

  absl::StatusOr<mesa::model::OpenedCheckpoint> opened =
      mesa::model::OpenCheckpoint(absl::GetFlag(FLAGS_checkpoint));
  if (!opened.ok()) return Fail(opened.status());
  mesa::model::WarnSkippedCheckpoints("mesa-serve", opened->data.skipped);
  mesa::model::CheckpointGenerateOptions tokenizer_options;
  tokenizer_options.encoder_json = absl::GetFlag(FLAGS_encoder_json);
  tokenizer_options.vocab_bpe = absl::GetFlag(FLAGS_vocab_bpe);
  tokenizer_options.tokenizer_file = absl::GetFlag(FLAGS_tokenizer_file);
  absl::StatusOr<std::unique_ptr<mesa::model::Tokenizer>> tokenizer =
      mesa::model::CheckpointTokenizerFor(opened->description, tokenizer_options);
  if (!tokenizer.ok()) return Fail(tokenizer.status());
  std::string device;
  absl::StatusOr<std::unique_ptr<mesa::model::Backend>> backend = mesa::model::DecodingBackend(
      absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_threads), &device);
  if (!backend.ok()) return Fail(backend.status());

  mesa::serve::ServeMetrics metrics;
  const mesa::serve::EngineOptions engine_options{
      .slots = absl::GetFlag(FLAGS_slots),
      .chunk = absl::GetFlag(FLAGS_prefill_chunk),
      .max_queue = absl::GetFlag(FLAGS_max_queue),
      .cache_bytes = int64_t{absl::GetFlag(FLAGS_prefix_cache_mb)} << 20,
      .cache_stride = absl::GetFlag(FLAGS_prefix_cache_stride)};
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(opened->model, opened->data.params, backend->get(), tokenizer->get(),
                     engine_options, &metrics);
  if (!engine.ok()) return Fail(engine.status());

  mesa::serve::HttpServerOptions http;
  http.host = absl::GetFlag(FLAGS_host);
  http.port = absl::GetFlag(FLAGS_port);
  http.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  http.metrics_host = http.host;
  http.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  http.tls_key = absl::GetFlag(FLAGS_tls_key);
  http.tokens = std::move(tokens);
  http.model_name = absl::GetFlag(FLAGS_model_name);
  if (http.model_name.empty()) http.model_name = DefaultModelName(opened->description);
  http.default_solve = {absl::GetFlag(FLAGS_cg_max_steps), absl::GetFlag(FLAGS_cg_tol)};
  http.threads = absl::GetFlag(FLAGS_http_threads) > 0 ? absl::GetFlag(FLAGS_http_threads)
                                                       : 2 * engine_options.slots + 16;
  absl::StatusOr<std::unique_ptr<mesa::serve::HttpServer>> server =
      mesa::serve::HttpServer::Create(http, engine->get(), tokenizer->get(), &metrics);
  if (!server.ok()) return Fail(server.status());
  absl::StatusOr<int> port = (*server)->Bind();
  if (!port.ok()) return Fail(port.status());

  std::thread drain([&] {
    unsigned char signal_number = 0;
    while (read(g_signal_pipe[0], &signal_number, 1) < 0 && errno == EINTR) {
    }
    std::fprintf(stderr, "mesa-serve: signal %d: draining\n", signal_number);
    (*server)->set_draining(true);
    const absl::Time deadline = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_drain_seconds));
    while (absl::Now() < deadline) {
      const Engine::Load load = (*engine)->load();
      if (load.queued == 0 && load.running == 0) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    (*server)->Stop();
  });
  std::fprintf(stderr,
               "mesa-serve: serving %s (step %lld, model \"%s\") on %s://%s:%d with %s, %d slots, "
               "prefix cache %d snapshots of %.1f MiB\n",
               opened->description.dir.c_str(), static_cast<long long>(opened->description.step),
               http.model_name.c_str(), http.tls_cert.empty() ? "http" : "https", http.host.c_str(),
               *port, device.c_str(), engine_options.slots, (*engine)->cache_rows(),
               static_cast<double>((*engine)->state_row_bytes()) / (1 << 20));
  if ((*server)->metrics_port() >= 0) {
    std::printf("metrics on port %d\n", (*server)->metrics_port());
  }
  std::printf("listening on port %d\n", *port);
  std::fflush(stdout);
  (*server)->Serve();
  (*engine)->Stop();
  drain.detach();  // it has stopped the server, or the process ends here anyway
  std::fprintf(stderr, "mesa-serve: stopped\n");
  return 0;
}
