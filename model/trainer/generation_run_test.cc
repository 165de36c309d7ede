// A GENERATE result's completions as the trainer's result event carries them to the agent.
#include <string>

#include "base/utf8.h"
#include "gtest/gtest.h"
#include "model/generate/generator.h"
#include "model/trainer/trainer.h"
#include "proto/trainer_events.h"
#include "spec/generation.h"

namespace mesa::model {
namespace {

// The event line the trainer writes, read back as the agent reads it.
mesa::v1::Completion ThroughEventLine(const mesa::v1::Completion& c) {
  mesa::v1::TrainerEvent event;
  *event.mutable_result()->add_completions() = c;
  absl::StatusOr<mesa::v1::TrainerEvent> read = ParseEventLine(FormatEventLine(event));
  EXPECT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->result().completions_size(), 1) << "the result event was lost";
  return read->result().completions_size() == 1 ? read->result().completions(0)
                                                : mesa::v1::Completion();
}

TEST(CompletionResultTest, CarriesEveryField) {
  Completion c;
  c.prompt = "Once";
  c.completion = " upon a time";
  c.tokens = {5, 6, 7};
  c.logprobs = {-0.5, -1.0, -2.0};
  c.cg_steps = {3.0, 4.0, 5.0};
  c.cg_steps_mean = 4.0;
  c.finish_reason = "length";
  c.cg_layers = 1;
  c.cg_heads = 2;
  c.cg_steps_by_layer_head = {{3, 3}, {4, 4}, {5, 5}};
  const mesa::v1::Completion p = ThroughEventLine(CompletionResult(c));
  EXPECT_EQ(p.prompt(), "Once");
  EXPECT_EQ(p.completion(), " upon a time");
  EXPECT_EQ(p.tokens_size(), 3);
  EXPECT_EQ(p.logprobs(2), -2.0);
  EXPECT_EQ(p.cg_steps(1), 4.0);
  EXPECT_EQ(p.cg_steps_mean(), 4.0);
  EXPECT_EQ(p.finish_reason(), "length");
  EXPECT_EQ(p.cg_layers(), 1);
  EXPECT_EQ(p.cg_heads(), 2);
  EXPECT_EQ(p.cg_steps_by_layer_head_size(), 6);
  EXPECT_EQ(p.cg_steps_by_layer_head(5), 5);
}

// A byte-level tokenizer's text may hold a Latin-1 byte or end inside a character (max_new_tokens
// reached): the text arrives whole, each invalid sequence as U+FFFD, never cut at the bad byte.
TEST(CompletionResultTest, TextThatIsNotUtf8ArrivesWithReplacementCharacters) {
  Completion c;
  c.completion = "caf\xe9 au lait \xe2\x82";  // Latin-1 é; the first two bytes of €
  c.tokens = {1, 2};
  const mesa::v1::Completion p = ThroughEventLine(CompletionResult(c));
  EXPECT_TRUE(base::IsValidUtf8(p.completion()));
  EXPECT_EQ(p.completion(), base::SanitizeUtf8(c.completion));
  EXPECT_EQ(p.completion().substr(0, 3), "caf");
  EXPECT_NE(p.completion().find(" au lait "), std::string::npos) << p.completion();
  EXPECT_EQ(p.tokens_size(), 2);
}

// Text past the coordinator's bound is cut on a character boundary, at most the bound.
TEST(CompletionResultTest, TextIsCutAtTheBoundOnACharacterBoundary) {
  Completion at;
  at.completion = std::string(spec::kMaxCompletionBytes, 'x');
  EXPECT_EQ(CompletionResult(at).completion(), at.completion);
  Completion over;
  over.completion = std::string(spec::kMaxCompletionBytes - 1, 'x') + "\xc3\xa9";  // é: 2 bytes
  const std::string text = CompletionResult(over).completion();
  EXPECT_EQ(text, std::string(spec::kMaxCompletionBytes - 1, 'x'));
  EXPECT_TRUE(base::IsValidUtf8(text));
}

}  // namespace
}  // namespace mesa::model
