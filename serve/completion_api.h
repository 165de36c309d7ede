// The OpenAI-style completions API of mesa-serve (docs/serving.md): the request body of
// POST /v1/completions parsed and checked (every limit from spec/serving.h and
// spec/generation.h), and the response bodies — whole, streamed chunks and errors — built from the
// engine's events. No HTTP here (serve/http_server.h).
#ifndef MESANET_SERVE_COMPLETION_API_H_
#define MESANET_SERVE_COMPLETION_API_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/mixers/mixer_layer.h"
#include "model/tokenizer/tokenizer.h"
#include "serve/engine.h"

namespace mesa::serve {

// An error as the API reports it: HTTP status, OpenAI's error type, the parameter at fault.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: none
  std::string Json() const;
};

// ApiError for a Status: InvalidArgument 400, Unauthenticated 401, PermissionDenied 403,
// NotFound 404, ResourceExhausted 429, Unavailable 503, anything else 500.
ApiError ApiErrorOf(const absl::Status& status, const std::string& param = "");

struct CompletionRequest {
  std::string model;
  // One or several prompts (a string, a list of strings, a list of token ids or a list of lists),
  // as token ids without BOS; `prompt_text` holds each one's text (decoded when given as ids).
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_text;
  int max_tokens = 16;
  model::SamplingOptions sampling;  // seed: choice i of prompt p draws with seed + p * n + i
  std::vector<std::string> stop;
  std::optional<int> logprobs;  // top alternatives per token (0..5); absent: no logprobs
  bool echo = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int n = 1;
  model::MesaSolve solve;  // cg_max_steps / cg_tol, or the server's default
};

struct ParseContext {
  const model::Tokenizer* tokenizer = nullptr;
  int vocab_size = 0;
  std::string model_name;  // the served model: a request naming another gets 404
  model::MesaSolve default_solve;
};

// Parses and checks a request body. The error names the parameter at fault.
absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body,
                                                         const ParseContext& context,
                                                         ApiError* error);

// The engine requests of choice `index` (prompt index / n, choice index % n) of `request`.
EngineRequest EngineRequestFor(const CompletionRequest& request, int index);

// What one choice's events add up to, for the whole (non-streamed) response.
struct ChoiceResult {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<double> logprobs;
  std::vector<std::vector<TopLogprob>> top;
  std::vector<double> prompt_logprobs;
  std::vector<std::vector<TopLogprob>> prompt_top;
  std::string finish_reason;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  double cg_steps_mean = 0;
};
// Adds an event (kPrompt, kText or kFinished) to `result`.
void Accumulate(const EngineEvent& event, ChoiceResult* result);

struct ResponseHeader {
  std::string id;  // "cmpl-..."
  int64_t created = 0;
  std::string model;
};

// The whole response: {"id", "object": "text_completion", "created", "model", "choices": [...],
// "usage": {...}}; results in choice order (choice i of prompt p at p * n + i).
std::string CompletionJson(const ResponseHeader& header, const CompletionRequest& request,
                           const std::vector<ChoiceResult>& results,
                           const model::Tokenizer& tokenizer);
// One server-sent event's data for choice `index`: the text and tokens an event added (kPrompt
// with echo, kText), or the finish reason (kFinished). Empty when the event shows nothing.
// `text_offset`: bytes of the choice's text before this chunk (the echoed prompt included).
std::string StreamChunkJson(const ResponseHeader& header, const CompletionRequest& request,
                            int index, const EngineEvent& event, int64_t text_offset,
                            const model::Tokenizer& tokenizer);
// With echo, the first chunk of choice `index`: the prompt's text (and its tokens' logprobs, from
// the kPrompt events gathered in `prompt_part`).
std::string StreamEchoJson(const ResponseHeader& header, const CompletionRequest& request,
                           int index, const ChoiceResult& prompt_part,
                           const model::Tokenizer& tokenizer);
// The last chunk with stream_options.include_usage: usage and no choices.
std::string StreamUsageJson(const ResponseHeader& header, const CompletionRequest& request,
                            const std::vector<ChoiceResult>& results);

}  // namespace mesa::serve

#endif  // MESANET_SERVE_COMPLETION_API_H_
