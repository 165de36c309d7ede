// serve_load_bench: a load generator for mesa-serve's HTTP endpoint (docs/serving.md,
// docs/PERFORMANCE.md "Serving"). `concurrency` clients each send streamed completions of random
// token-id prompts one after another until `requests` have been sent, and the run reports
// aggregate generated tokens/s, per-stream tokens/s, time to first token and inter-token latency
// (p50/p90), measured at the client from the server-sent events.
//   serve_load_bench --url http://127.0.0.1:8000 --concurrency 64 --requests 128
//                    --prompt_tokens 1024 --max_tokens 128 [--shared_prefix 4096] [--vocab 50000]
// With --shared_prefix, every prompt starts with the same that-many tokens (a system prompt) and
// ends with its own prompt_tokens - shared_prefix tokens.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/cli_flags.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, url, "http://127.0.0.1:8000", "mesa-serve's base URL (http only).");
ABSL_FLAG(int, concurrency, 1, "Clients sending at once (streams).");
ABSL_FLAG(int, requests, 8, "Requests in all.");
ABSL_FLAG(int, prompt_tokens, 1024, "Tokens per prompt.");
ABSL_FLAG(int, shared_prefix, 0, "Tokens every prompt starts with (0: none).");
ABSL_FLAG(int, max_tokens, 128, "Tokens to generate per request.");
ABSL_FLAG(int, vocab, 50000, "Prompt token ids are drawn from [0, vocab).");
ABSL_FLAG(std::string, extra, "",
          "Extra JSON fields merged into each request, e.g. {\"cg_tol\":1e-3}.");
ABSL_FLAG(std::string, label, "", "A label printed with the result line.");

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

struct RequestTiming {
  double ttft = 0;           // seconds to the first token's event
  std::vector<double> gaps;  // seconds between token events
  int64_t tokens = 0;        // usage.completion_tokens
  double seconds = 0;        // the whole request
  bool ok = false;
  std::string error;
};

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

std::vector<int> Prompt(int index) {
  const int n = absl::GetFlag(FLAGS_prompt_tokens), shared = absl::GetFlag(FLAGS_shared_prefix);
  std::mt19937 shared_rng(12345), own_rng(1000 + index);
  std::uniform_int_distribution<int> id(0, absl::GetFlag(FLAGS_vocab) - 1);
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(i < shared ? id(shared_rng) : id(own_rng));
  return out;
}

RequestTiming Send(httplib::Client& client, int index) {
  json body = {{"prompt", Prompt(index)},
               {"max_tokens", absl::GetFlag(FLAGS_max_tokens)},
               {"temperature", 0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (!absl::GetFlag(FLAGS_extra).empty()) body.update(json::parse(absl::GetFlag(FLAGS_extra)));
  RequestTiming t;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  bool first = true;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buffer.append(data, len);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;  // a heartbeat comment
      const std::string data_text = event.substr(6);
      if (data_text == "[DONE]") continue;
      const json e = json::parse(data_text, nullptr, false);
      if (e.is_discarded()) continue;
      if (e.contains("error")) {
        t.error = e["error"].dump();
        continue;
      }
      if (e.contains("usage") && e["usage"].is_object()) {
        t.tokens = e["usage"]["completion_tokens"].get<int64_t>();
      }
      if (!e["choices"].empty() && e["choices"][0]["finish_reason"].is_null()) {
        const Clock::time_point now = Clock::now();
        if (first) {
          t.ttft = std::chrono::duration<double>(now - start).count();
          first = false;
        } else {
          t.gaps.push_back(std::chrono::duration<double>(now - last).count());
        }
        last = now;
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error;
  const bool sent = client.send(req, res, error);
  t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  t.ok = sent && res.status == 200 && t.error.empty();
  if (!sent) t.error = httplib::to_string(error);
  if (sent && res.status != 200) t.error = absl::StrCat("HTTP ", res.status, " ", res.body);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(
      argc, argv,
      "serve_load_bench --url http://HOST:PORT [--concurrency N] [--requests N] "
      "[--prompt_tokens N] [--shared_prefix N] [--max_tokens N]");
  const int concurrency = absl::GetFlag(FLAGS_concurrency);
  const int requests = absl::GetFlag(FLAGS_requests);
  if (concurrency < 1 || requests < 1 || absl::GetFlag(FLAGS_prompt_tokens) < 1 ||
      absl::GetFlag(FLAGS_shared_prefix) > absl::GetFlag(FLAGS_prompt_tokens)) {
    std::fprintf(stderr,
                 "serve_load_bench: --concurrency, --requests and --prompt_tokens must be "
                 ">= 1 and --shared_prefix <= --prompt_tokens\n");
    return 2;
  }
  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<RequestTiming> timings;
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c) {
    clients.emplace_back([&] {
      httplib::Client client(absl::GetFlag(FLAGS_url));
      client.set_read_timeout(600, 0);
      for (int i; (i = next.fetch_add(1)) < requests;) {
        RequestTiming t = Send(client, i);
        std::lock_guard<std::mutex> lock(mu);
        timings.push_back(std::move(t));
      }
    });
  }
  for (std::thread& t : clients) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  int64_t tokens = 0;
  int failed = 0;
  std::vector<double> ttft, gaps, stream_rate;
  for (const RequestTiming& t : timings) {
    if (!t.ok) {
      if (failed++ == 0)
        std::fprintf(stderr, "serve_load_bench: a request failed: %s\n", t.error.c_str());
      continue;
    }
    tokens += t.tokens;
    ttft.push_back(t.ttft);
    gaps.insert(gaps.end(), t.gaps.begin(), t.gaps.end());
    if (t.seconds > t.ttft && t.tokens > 1) {
      stream_rate.push_back(static_cast<double>(t.tokens - 1) / (t.seconds - t.ttft));
    }
  }
  const json out = {{"label", absl::GetFlag(FLAGS_label)},
                    {"concurrency", concurrency},
                    {"requests", requests},
                    {"failed", failed},
                    {"prompt_tokens", absl::GetFlag(FLAGS_prompt_tokens)},
                    {"shared_prefix", absl::GetFlag(FLAGS_shared_prefix)},
                    {"max_tokens", absl::GetFlag(FLAGS_max_tokens)},
                    {"generated_tokens", tokens},
                    {"wall_s", wall},
                    {"tokens_per_s", static_cast<double>(tokens) / wall},
                    {"stream_tokens_per_s_p50", Quantile(stream_rate, 0.5)},
                    {"ttft_ms_p50", 1e3 * Quantile(ttft, 0.5)},
                    {"ttft_ms_p90", 1e3 * Quantile(ttft, 0.9)},
                    {"itl_ms_p50", 1e3 * Quantile(gaps, 0.5)},
                    {"itl_ms_p90", 1e3 * Quantile(gaps, 0.9)}};
  std::printf("BENCH serve %s\n", out.dump().c_str());
  return failed == 0 ? 0 : 1;
}
