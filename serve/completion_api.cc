#include "serve/completion_api.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/utf8.h"
#include "nlohmann/json.hpp"
#include "spec/generation.h"
#include "spec/serving.h"

namespace mesa::serve {
namespace {

using json = nlohmann::json;

// Text that may not be valid UTF-8 (a token can hold part of a character) is written with
// U+FFFD in place of the bad bytes rather than refused.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

absl::Status Bad(ApiError* error, const std::string& param, const std::string& message) {
  error->status = 400;
  error->type = "invalid_request_error";
  error->param = param;
  error->message = message;
  return absl::InvalidArgumentError(message);
}

// The fields a request may carry. OpenAI's others are refused by name (rather than ignored):
// a client that sets presence_penalty expects it to act.
const char* const kFields[] = {"model",
                               "prompt",
                               "max_tokens",
                               "temperature",
                               "top_p",
                               "top_k",
                               "seed",
                               "stop",
                               "logprobs",
                               "echo",
                               "stream",
                               "stream_options",
                               "n",
                               "cg_max_steps",
                               "cg_tol",
                               "user",
                               "best_of",
                               "presence_penalty",
                               "frequency_penalty"};

bool IsTokenList(const json& j) {
  if (!j.is_array() || j.empty()) return false;
  for (const json& e : j) {
    if (!e.is_number_integer()) return false;
  }
  return true;
}

}  // namespace

std::string ApiError::Json() const {
  json e = {{"message", message}, {"type", type}, {"code", nullptr}};
  e["param"] = param.empty() ? json(nullptr) : json(param);
  return Dump(json{{"error", e}});
}

ApiError ApiErrorOf(const absl::Status& status, const std::string& param) {
  ApiError e;
  e.message = std::string(status.message());
  e.param = param;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      e.status = 400;
      break;
    case absl::StatusCode::kUnauthenticated:
      e.status = 401;
      e.type = "authentication_error";
      break;
    case absl::StatusCode::kPermissionDenied:
      e.status = 403;
      e.type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      e.status = 404;
      e.type = "not_found_error";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.status = 429;
      e.type = "rate_limit_error";
      break;
    case absl::StatusCode::kUnavailable:
      e.status = 503;
      e.type = "service_unavailable";
      break;
    default:
      e.status = 500;
      e.type = "server_error";
  }
  return e;
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body,
                                                         const ParseContext& context,
                                                         ApiError* error) {
  if (static_cast<int64_t>(body.size()) > spec::kMaxServeRequestBytes) {
    error->status = 413;
    error->message = absl::StrCat("the request body has ", body.size(),
                                  " bytes, over the limit of ", spec::kMaxServeRequestBytes);
    return absl::InvalidArgumentError(error->message);
  }
  if (!base::IsValidUtf8(body)) return Bad(error, "", "the request body is not valid UTF-8");
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(error, "", "the request body is not JSON");
  if (!j.is_object()) return Bad(error, "", "the request body must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* f : kFields) known = known || it.key() == f;
    if (!known) {
      return Bad(error, it.key(), absl::StrCat("unknown parameter \"", it.key(), "\""));
    }
  }
  CompletionRequest r;
  r.max_tokens = spec::kDefaultServeMaxTokens;
  r.solve = context.default_solve;

  // model
  if (j.contains("model")) {
    if (!j["model"].is_string()) return Bad(error, "model", "model must be a string");
    r.model = j["model"].get<std::string>();
    if (!r.model.empty() && r.model != context.model_name) {
      error->status = 404;
      error->type = "not_found_error";
      error->param = "model";
      error->message = absl::StrCat("the model \"", r.model, "\" is not served here; this server ",
                                    "serves \"", context.model_name, "\" (GET /v1/models)");
      return absl::NotFoundError(error->message);
    }
  }
  r.model = context.model_name;

  // prompt: a string, strings, token ids, or lists of token ids.
  if (!j.contains("prompt")) return Bad(error, "prompt", "prompt is required");
  const json& p = j["prompt"];
  std::vector<json> items;
  if (p.is_string() || IsTokenList(p)) {
    items.push_back(p);
  } else if (p.is_array() && !p.empty()) {
    for (const json& e : p) items.push_back(e);
  } else {
    return Bad(error, "prompt",
               "prompt must be a string, a list of strings, a list of token ids or a list of such "
               "lists, not empty");
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const json& item = items[i];
    std::vector<int32_t> ids;
    std::string text;
    if (item.is_string()) {
      text = item.get<std::string>();
      if (static_cast<int64_t>(text.size()) > spec::kMaxPromptBytes) {
        return Bad(error, "prompt",
                   absl::StrCat("prompt ", i, " has ", text.size(), " bytes, over the limit of ",
                                spec::kMaxPromptBytes));
      }
      ids = context.tokenizer->Encode(text);
    } else if (IsTokenList(item)) {
      if (static_cast<int64_t>(item.size()) > spec::kMaxPromptTokens) {
        return Bad(error, "prompt",
                   absl::StrCat("prompt ", i, " has ", item.size(), " tokens, over the limit of ",
                                spec::kMaxPromptTokens));
      }
      for (const json& t : item) {
        const int64_t id = t.get<int64_t>();
        if (id < 0 || id >= context.vocab_size) {
          return Bad(error, "prompt",
                     absl::StrCat("prompt ", i, ": token ", id, " is outside the vocabulary [0, ",
                                  context.vocab_size, ")"));
        }
        ids.push_back(static_cast<int32_t>(id));
      }
      text = context.tokenizer->Decode(ids);
    } else {
      return Bad(error, "prompt", absl::StrCat("prompt ", i, " is neither a string nor token ids"));
    }
    if (ids.empty()) {
      return Bad(error, "prompt", absl::StrCat("prompt ", i, " is empty (no tokens)"));
    }
    if (static_cast<int64_t>(ids.size()) > spec::kMaxPromptTokens) {
      return Bad(error, "prompt",
                 absl::StrCat("prompt ", i, " has ", ids.size(), " tokens, over the limit of ",
                              spec::kMaxPromptTokens));
    }
    r.prompts.push_back(std::move(ids));
    r.prompt_text.push_back(std::move(text));
  }

  auto integer = [&](const char* name, int64_t lo, int64_t hi, int64_t* out) -> absl::Status {
    if (!j.contains(name) || j[name].is_null()) return absl::OkStatus();
    const json& v = j[name];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      return Bad(error, name,
                 absl::StrCat(name, " must be a whole number in [", lo, ", ", hi, "]"));
    }
    *out = v.get<int64_t>();
    return absl::OkStatus();
  };
  auto number = [&](const char* name, double lo, double hi, double* out) -> absl::Status {
    if (!j.contains(name) || j[name].is_null()) return absl::OkStatus();
    const json& v = j[name];
    if (!v.is_number() || !(v.get<double>() >= lo) || !(v.get<double>() <= hi)) {
      return Bad(error, name, absl::StrCat(name, " must be a number in [", lo, ", ", hi, "]"));
    }
    *out = v.get<double>();
    return absl::OkStatus();
  };
  auto boolean = [&](const char* name, bool* out) -> absl::Status {
    if (!j.contains(name) || j[name].is_null()) return absl::OkStatus();
    if (!j[name].is_boolean())
      return Bad(error, name, absl::StrCat(name, " must be true or false"));
    *out = j[name].get<bool>();
    return absl::OkStatus();
  };

  int64_t max_tokens = r.max_tokens, n = 1, top_k = 0, cg_steps = r.solve.max_steps;
  double temperature = 1.0, top_p = 1.0, cg_tol = r.solve.tolerance;
  double presence = 0, frequency = 0;
  int64_t best_of = 0;  // absent: n
  for (absl::Status s :
       {integer("max_tokens", 0, spec::kMaxNewTokens, &max_tokens),
        integer("n", 1, spec::kMaxServeChoices, &n),
        integer("top_k", 0, std::numeric_limits<int32_t>::max(), &top_k),
        integer("cg_max_steps", 1, spec::kMaxServeCgSteps, &cg_steps),
        integer("best_of", 1, spec::kMaxServeChoices, &best_of),
        number("temperature", 0, 2, &temperature), number("top_p", 0, 1, &top_p),
        number("cg_tol", 0, 1, &cg_tol), number("presence_penalty", -2, 2, &presence),
        number("frequency_penalty", -2, 2, &frequency), boolean("echo", &r.echo),
        boolean("stream", &r.stream)}) {
    if (!s.ok()) return s;
  }
  if (presence != 0 || frequency != 0) {
    return Bad(error, presence != 0 ? "presence_penalty" : "frequency_penalty",
               "presence and frequency penalties are not supported (leave them 0)");
  }
  if (best_of != 0 && best_of != n)
    return Bad(error, "best_of", "best_of is not supported (leave it equal to n)");
  if (top_p <= 0) return Bad(error, "top_p", "top_p must be in (0, 1]");
  r.max_tokens = static_cast<int>(max_tokens);
  r.n = static_cast<int>(n);
  r.sampling.temperature = static_cast<float>(temperature);
  r.sampling.top_p = static_cast<float>(top_p);
  r.sampling.top_k = static_cast<int>(top_k);
  r.solve = {static_cast<int>(cg_steps), static_cast<float>(cg_tol)};
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) return Bad(error, "seed", "seed must be a whole number");
    r.sampling.seed = j["seed"].is_number_unsigned()
                          ? j["seed"].get<uint64_t>()
                          : static_cast<uint64_t>(j["seed"].get<int64_t>());
  }
  if (j.contains("logprobs") && !j["logprobs"].is_null()) {
    int64_t k = 0;
    if (absl::Status s = integer("logprobs", 0, spec::kMaxServeTopLogprobs, &k); !s.ok()) return s;
    r.logprobs = static_cast<int>(k);
  }
  if (r.max_tokens == 0 && !(r.echo && r.logprobs.has_value())) {
    return Bad(error, "max_tokens", "max_tokens 0 needs echo and logprobs (prompt scoring)");
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    std::vector<json> stops =
        s.is_array() ? std::vector<json>(s.begin(), s.end()) : std::vector<json>{s};
    if (static_cast<int>(stops.size()) > spec::kMaxStopSequences) {
      return Bad(error, "stop",
                 absl::StrCat("at most ", spec::kMaxStopSequences, " stop sequences"));
    }
    for (const json& e : stops) {
      if (!e.is_string() || e.get<std::string>().empty() ||
          static_cast<int>(e.get<std::string>().size()) > spec::kMaxStopSequenceBytes) {
        return Bad(error, "stop",
                   absl::StrCat("a stop sequence must be a string of 1 to ",
                                spec::kMaxStopSequenceBytes, " bytes"));
      }
      r.stop.push_back(e.get<std::string>());
    }
  }
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    const json& o = j["stream_options"];
    if (!r.stream) return Bad(error, "stream_options", "stream_options needs stream: true");
    if (!o.is_object()) return Bad(error, "stream_options", "stream_options must be an object");
    for (auto it = o.begin(); it != o.end(); ++it) {
      if (it.key() != "include_usage" || !it.value().is_boolean()) {
        return Bad(error, "stream_options",
                   "stream_options takes only include_usage (true or false)");
      }
      r.include_usage = it.value().get<bool>();
    }
  }
  if (j.contains("user") && !j["user"].is_null() && !j["user"].is_string()) {
    return Bad(error, "user", "user must be a string");
  }
  if (static_cast<int64_t>(r.prompts.size()) * r.n > spec::kMaxPrompts) {
    return Bad(error, "n",
               absl::StrCat("prompts times n is over the limit of ", spec::kMaxPrompts));
  }
  if (absl::Status s = model::ValidateSamplingOptions(r.sampling); !s.ok()) {
    return Bad(error, "temperature", std::string(s.message()));
  }
  return r;
}

EngineRequest EngineRequestFor(const CompletionRequest& request, int index) {
  EngineRequest e;
  e.prompt = request.prompts[index / request.n];
  e.max_tokens = request.max_tokens;
  e.sampling = request.sampling;
  e.sampling.seed += static_cast<uint64_t>(index);
  e.stop = request.stop;
  e.solve = request.solve;
  e.prompt_logprobs = request.echo && request.logprobs.has_value();
  e.top_logprobs = request.logprobs.value_or(0);
  return e;
}

void Accumulate(const EngineEvent& event, ChoiceResult* result) {
  switch (event.kind) {
    case EngineEvent::Kind::kPrompt:
      result->prompt_logprobs.insert(result->prompt_logprobs.end(), event.prompt_logprobs.begin(),
                                     event.prompt_logprobs.end());
      result->prompt_top.insert(result->prompt_top.end(), event.top.begin(), event.top.end());
      break;
    case EngineEvent::Kind::kText:
      result->text += event.piece.text;
      result->tokens.insert(result->tokens.end(), event.piece.tokens.begin(),
                            event.piece.tokens.end());
      result->logprobs.insert(result->logprobs.end(), event.piece.logprobs.begin(),
                              event.piece.logprobs.end());
      result->top.insert(result->top.end(), event.top.begin(), event.top.end());
      break;
    case EngineEvent::Kind::kFinished:
      result->finish_reason = event.finish_reason;
      result->completion_tokens = event.completion_tokens;
      result->cached_tokens = event.cached_tokens;
      result->cg_steps_mean = event.cg_steps_mean;
      break;
    case EngineEvent::Kind::kError:
      break;
  }
}

namespace {

// OpenAI's logprobs object for tokens with their log-probabilities (null where unknown), top
// alternatives and text offsets starting at `offset`.
json LogprobsJson(const std::vector<int32_t>& tokens, const std::vector<json>& logprobs,
                  const std::vector<std::vector<TopLogprob>>& top, bool with_top, int64_t offset,
                  const model::Tokenizer& tokenizer) {
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string text = tokenizer.Decode({tokens[i]});
    out["tokens"].push_back(text);
    out["token_logprobs"].push_back(i < logprobs.size() ? logprobs[i] : json(nullptr));
    if (with_top) {
      json alternatives = json::object();
      if (i < top.size()) {
        for (const TopLogprob& t : top[i]) alternatives[tokenizer.Decode({t.token})] = t.logprob;
      }
      out["top_logprobs"].push_back(i < top.size() ? alternatives : json(nullptr));
    }
    out["text_offset"].push_back(offset);
    offset += static_cast<int64_t>(text.size());
  }
  if (!with_top) out["top_logprobs"] = nullptr;
  return out;
}

std::vector<json> Numbers(const std::vector<double>& v) {
  std::vector<json> out;
  for (double x : v) out.push_back(std::isfinite(x) ? json(x) : json(-9999.0));
  return out;
}

json Usage(const CompletionRequest& request, const std::vector<ChoiceResult>& results) {
  int64_t prompt = 0, completion = 0, cached = 0;
  double cg = 0;
  for (const std::vector<int32_t>& p : request.prompts) prompt += static_cast<int64_t>(p.size());
  for (const ChoiceResult& r : results) {
    completion += r.completion_tokens;
    cached += r.cached_tokens;
    cg += r.cg_steps_mean * static_cast<double>(r.completion_tokens);
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}},
          {"cg_steps_mean", completion > 0 ? cg / static_cast<double>(completion) : 0.0}};
}

json Header(const ResponseHeader& header) {
  return {{"id", header.id},
          {"object", "text_completion"},
          {"created", header.created},
          {"model", header.model}};
}

}  // namespace

std::string CompletionJson(const ResponseHeader& header, const CompletionRequest& request,
                           const std::vector<ChoiceResult>& results,
                           const model::Tokenizer& tokenizer) {
  json out = Header(header);
  out["choices"] = json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const ChoiceResult& r = results[i];
    const int prompt_index = static_cast<int>(i) / request.n;
    std::string text = r.text;
    json logprobs = nullptr;
    if (request.logprobs.has_value()) {
      std::vector<int32_t> tokens;
      std::vector<json> lps;
      std::vector<std::vector<TopLogprob>> top;
      if (request.echo) {
        tokens = request.prompts[prompt_index];
        lps = Numbers(r.prompt_logprobs);
        top = r.prompt_top;
      }
      tokens.insert(tokens.end(), r.tokens.begin(), r.tokens.end());
      for (json& v : Numbers(r.logprobs)) lps.push_back(std::move(v));
      top.insert(top.end(), r.top.begin(), r.top.end());
      logprobs = LogprobsJson(tokens, lps, top, *request.logprobs > 0, 0, tokenizer);
    }
    if (request.echo) text = request.prompt_text[prompt_index] + text;
    out["choices"].push_back(
        {{"index", i}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", r.finish_reason}});
  }
  out["usage"] = Usage(request, results);
  return Dump(out);
}

std::string StreamChunkJson(const ResponseHeader& header, const CompletionRequest& request,
                            int index, const EngineEvent& event, int64_t text_offset,
                            const model::Tokenizer& tokenizer) {
  json choice = {{"index", index}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  const bool with_top = request.logprobs.value_or(0) > 0;
  switch (event.kind) {
    case EngineEvent::Kind::kPrompt:  // sent whole by StreamEchoJson
      return "";
    case EngineEvent::Kind::kText:
      choice["text"] = event.piece.text;
      if (request.logprobs.has_value()) {
        choice["logprobs"] = LogprobsJson(event.piece.tokens, Numbers(event.piece.logprobs),
                                          event.top, with_top, text_offset, tokenizer);
      }
      break;
    case EngineEvent::Kind::kFinished:
      choice["finish_reason"] = event.finish_reason;
      break;
    case EngineEvent::Kind::kError:
      return "";
  }
  json out = Header(header);
  out["choices"] = json::array({choice});
  return Dump(out);
}

std::string StreamEchoJson(const ResponseHeader& header, const CompletionRequest& request,
                           int index, const ChoiceResult& prompt_part,
                           const model::Tokenizer& tokenizer) {
  const int prompt_index = index / request.n;
  json choice = {{"index", index},
                 {"text", request.prompt_text[prompt_index]},
                 {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
  if (request.logprobs.has_value()) {
    choice["logprobs"] =
        LogprobsJson(request.prompts[prompt_index], Numbers(prompt_part.prompt_logprobs),
                     prompt_part.prompt_top, *request.logprobs > 0, 0, tokenizer);
  }
  json out = Header(header);
  out["choices"] = json::array({choice});
  return Dump(out);
}

std::string StreamUsageJson(const ResponseHeader& header, const CompletionRequest& request,
                            const std::vector<ChoiceResult>& results) {
  json out = Header(header);
  out["choices"] = json::array();
  out["usage"] = Usage(request, results);
  return Dump(out);
}

}  // namespace mesa::serve
