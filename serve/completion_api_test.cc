#include "serve/completion_api.h"

#include <string>

#include "gtest/gtest.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "nlohmann/json.hpp"
#include "spec/serving.h"

namespace mesa::serve {
namespace {

using json = nlohmann::json;

class CompletionApiTest : public ::testing::Test {
 protected:
  absl::StatusOr<CompletionRequest> Parse(const std::string& body) {
    error_ = ApiError();
    return ParseCompletionRequest(body, context_, &error_);
  }
  model::ByteTokenizer tokenizer_;
  ParseContext context_{&tokenizer_, 257, "tiny", {30, 0.0f}};
  ApiError error_;
};

TEST_F(CompletionApiTest, ParsesEveryPromptForm) {
  auto r = Parse(R"({"model": "tiny", "prompt": "ab", "max_tokens": 5, "temperature": 0,
                     "stop": "\n", "logprobs": 2, "echo": true, "n": 2, "seed": 7,
                     "cg_max_steps": 12, "cg_tol": 0.001})");
  ASSERT_TRUE(r.ok()) << error_.message;
  EXPECT_EQ(r->prompts, (std::vector<std::vector<int32_t>>{{'a', 'b'}}));
  EXPECT_EQ(r->max_tokens, 5);
  EXPECT_EQ(r->stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(r->logprobs, 2);
  EXPECT_EQ(r->n, 2);
  EXPECT_EQ(r->solve.max_steps, 12);
  EXPECT_FLOAT_EQ(r->solve.tolerance, 0.001f);
  // Choice i of prompt p draws with seed + p * n + i.
  EXPECT_EQ(EngineRequestFor(*r, 1).sampling.seed, 8u);
  EXPECT_TRUE(EngineRequestFor(*r, 1).prompt_logprobs);

  r = Parse(R"({"prompt": [["x"], "y"]})");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(error_.param, "prompt");
  r = Parse(R"({"prompt": [[1, 2], [3]]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompts.size(), 2u);
  EXPECT_EQ(r->prompt_text[0], "\x01\x02");
  r = Parse(R"({"prompt": [104, 105]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompt_text, std::vector<std::string>{"hi"});
  EXPECT_EQ(r->max_tokens, spec::kDefaultServeMaxTokens);
  EXPECT_EQ(r->solve.max_steps, 30);  // the server's default
}

TEST_F(CompletionApiTest, RefusesBadRequestsNamingTheParameter) {
  struct Case {
    const char* body;
    int status;
    const char* param;
  };
  const Case cases[] = {
      {"not json", 400, ""},
      {"[1]", 400, ""},
      {R"({"max_tokens": 3})", 400, "prompt"},
      {R"({"prompt": ""})", 400, "prompt"},
      {R"({"prompt": []})", 400, "prompt"},
      {R"({"prompt": [300]})", 400, "prompt"},
      {R"({"prompt": "a", "max_tokens": -1})", 400, "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 1e9})", 400, "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 0})", 400, "max_tokens"},
      {R"({"prompt": "a", "temperature": "hot"})", 400, "temperature"},
      {R"({"prompt": "a", "top_p": 0})", 400, "top_p"},
      {R"({"prompt": "a", "n": 17})", 400, "n"},
      {R"({"prompt": "a", "logprobs": 6})", 400, "logprobs"},
      {R"({"prompt": "a", "stop": ["", "x"]})", 400, "stop"},
      {R"({"prompt": "a", "presence_penalty": 0.5})", 400, "presence_penalty"},
      {R"({"prompt": "a", "frobnicate": 1})", 400, "frobnicate"},
      {R"({"prompt": "a", "stream_options": {"include_usage": true}})", 400, "stream_options"},
      {R"({"prompt": "a", "cg_max_steps": 0})", 400, "cg_max_steps"},
      {R"({"prompt": "a", "model": "gpt-4"})", 404, "model"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(Parse(c.body).ok()) << c.body;
    EXPECT_EQ(error_.status, c.status) << c.body;
    EXPECT_EQ(error_.param, c.param) << c.body;
    EXPECT_FALSE(error_.message.empty());
    const json j = json::parse(error_.Json());
    EXPECT_EQ(j["error"]["message"], error_.message);
  }
  // Invalid UTF-8 and oversized bodies.
  EXPECT_FALSE(Parse("{\"prompt\": \"\xff\"}").ok());
  EXPECT_EQ(error_.status, 400);
  EXPECT_FALSE(Parse(std::string(spec::kMaxServeRequestBytes + 1, ' ')).ok());
  EXPECT_EQ(error_.status, 413);
}

TEST_F(CompletionApiTest, StatusCodesOfEngineErrors) {
  EXPECT_EQ(ApiErrorOf(absl::ResourceExhaustedError("full")).status, 429);
  EXPECT_EQ(ApiErrorOf(absl::UnavailableError("stop")).status, 503);
  EXPECT_EQ(ApiErrorOf(absl::UnauthenticatedError("who")).status, 401);
  EXPECT_EQ(ApiErrorOf(absl::InternalError("bad")).status, 500);
}

TEST_F(CompletionApiTest, ResponsesInOpenAiShape) {
  auto r = Parse(R"({"prompt": "ab", "logprobs": 1, "echo": true, "max_tokens": 2})");
  ASSERT_TRUE(r.ok());
  ChoiceResult result;
  EngineEvent prompt;
  prompt.kind = EngineEvent::Kind::kPrompt;
  prompt.prompt_logprobs = {-1.5, -2.5};
  prompt.top = {{{'a', -1.5}}, {{'c', -0.5}}};
  Accumulate(prompt, &result);
  EngineEvent text;
  text.kind = EngineEvent::Kind::kText;
  text.piece = {"cd", {'c', 'd'}, {-0.25, -0.75}};
  text.top = {{{'c', -0.25}}, {{'d', -0.75}}};
  Accumulate(text, &result);
  EngineEvent done;
  done.kind = EngineEvent::Kind::kFinished;
  done.finish_reason = "length";
  done.completion_tokens = 2;
  Accumulate(done, &result);
  const json j = json::parse(CompletionJson({"cmpl-1", 5, "tiny"}, *r, {result}, tokenizer_));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "abcd");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"a", "b", "c", "d"}));
  EXPECT_EQ(lp["token_logprobs"], json({-1.5, -2.5, -0.25, -0.75}));
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2, 3}));
  EXPECT_EQ(lp["top_logprobs"][1], json({{"c", -0.5}}));
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_EQ(j["usage"]["total_tokens"], 4);

  const json chunk =
      json::parse(StreamChunkJson({"cmpl-1", 5, "tiny"}, *r, 0, text, 2, tokenizer_));
  EXPECT_EQ(chunk["choices"][0]["text"], "cd");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["text_offset"], json({2, 3}));  // after the echo
  const json echo = json::parse(StreamEchoJson({"cmpl-1", 5, "tiny"}, *r, 0, result, tokenizer_));
  EXPECT_EQ(echo["choices"][0]["text"], "ab");
  EXPECT_EQ(echo["choices"][0]["logprobs"]["token_logprobs"], json({-1.5, -2.5}));
}

}  // namespace
}  // namespace mesa::serve
