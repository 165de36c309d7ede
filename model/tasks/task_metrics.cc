#include "model/tasks/task_metrics.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spec/task_results.h"

namespace mesa::model {
namespace {

int64_t CodePoints(const std::string& text) {
  // Every byte that is not a UTF-8 continuation byte starts a code point.
  return std::count_if(text.begin(), text.end(),
                       [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

}  // namespace

bool ContainsAnswer(const std::string& output, const std::vector<std::string>& answers) {
  const std::string text = absl::AsciiStrToLower(output);
  return std::any_of(answers.begin(), answers.end(), [&](const std::string& answer) {
    return absl::StrContains(text, absl::AsciiStrToLower(answer));
  });
}

mesa::v1::TaskItemRecord ItemRecordOf(int64_t index, const TaskExample& item,
                                      const ItemScore& score) {
  mesa::v1::TaskItemRecord r;
  r.set_index(index);
  for (const RequestScore& q : score.requests) {
    r.add_loglikelihood(q.loglikelihood);
    r.add_tokens(q.tokens);
    r.add_greedy(q.greedy);
  }
  r.set_truncated(score.truncated);
  r.set_skipped(score.skipped);
  r.set_boundary_merge(score.boundary_merge);
  r.set_contains(score.contains);
  r.set_exact(score.exact);
  for (int64_t v : score.bleu_stats) r.add_bleu_stats(v);
  r.set_match_all(score.match_all);
  r.set_match_any(score.match_any);
  r.set_cg_steps_prefill(score.cg_steps_prefill);
  r.set_cg_tokens_prefill(score.cg_tokens_prefill);
  r.set_cg_steps_decode(score.cg_steps_decode);
  r.set_cg_tokens_decode(score.cg_tokens_decode);
  r.set_form(static_cast<int>(item.form));
  for (int g : item.gold) r.add_gold(g);
  if (item.multiple_choice()) {
    for (int c = 0; c < item.num_requests(); ++c) {
      r.add_norm_chars(CodePoints(item.NormText(c)));
      r.add_norm_bytes(static_cast<int64_t>(item.NormText(c).size()));
    }
    r.set_without_delimiter(!item.delimiter.has_value());
  }
  if (item.niah) {
    r.set_niah_variant(item.niah->variant);
    r.set_niah_length(item.niah->length);
    r.set_niah_depth(item.niah->depth);
  }
  return r;
}

ItemScore ItemScoreOf(const mesa::v1::TaskItemRecord& r) {
  ItemScore s;
  for (int k = 0; k < r.loglikelihood_size(); ++k) {
    s.requests.push_back({r.loglikelihood(k), k < r.tokens_size() ? r.tokens(k) : 0,
                          k < r.greedy_size() && r.greedy(k)});
  }
  s.truncated = r.truncated();
  s.skipped = r.skipped();
  s.boundary_merge = r.boundary_merge();
  s.contains = r.contains();
  s.exact = r.exact();
  s.bleu_stats.assign(r.bleu_stats().begin(), r.bleu_stats().end());
  s.match_all = r.match_all();
  s.match_any = r.match_any();
  s.cg_steps_prefill = r.cg_steps_prefill();
  s.cg_tokens_prefill = r.cg_tokens_prefill();
  s.cg_steps_decode = r.cg_steps_decode();
  s.cg_tokens_decode = r.cg_tokens_decode();
  return s;
}

absl::StatusOr<mesa::v1::TaskResult> ComputeTaskMetrics(const std::vector<TaskExample>& items,
                                                        const std::vector<ItemScore>& scores,
                                                        const std::vector<std::string>& metrics) {
  if (items.size() != scores.size()) {
    return absl::InternalError(
        absl::StrCat(scores.size(), " item scores for ", items.size(), " items"));
  }
  std::vector<mesa::v1::TaskItemRecord> records;
  records.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (!scores[i].skipped &&
        scores[i].requests.size() != static_cast<size_t>(items[i].num_requests())) {
      return absl::InternalError(absl::StrCat("item ", i, ": ", scores[i].requests.size(),
                                              " request scores for ", items[i].num_requests(),
                                              " requests"));
    }
    records.push_back(ItemRecordOf(static_cast<int64_t>(i), items[i], scores[i]));
  }
  mesa::v1::TaskResult out;
  if (absl::Status s = spec::ComputeTaskMetrics(records, metrics, &out); !s.ok()) return s;
  return out;
}

}  // namespace mesa::model
