#include "serve/serve_metrics.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/exponential_buckets.h"
#include "prometheus/text_serializer.h"

namespace mesa::serve {
namespace {

// Quarter-octave buckets (within 19% of the true quantile) from `start` up.
std::vector<double> Exponential(double start, int n) {
  return base::ExponentialBuckets(start, std::pow(2.0, 0.25), n);
}

prometheus::Counter& NewCounter(prometheus::Registry& r, const std::string& name,
                                const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}

prometheus::Gauge& NewGauge(prometheus::Registry& r, const std::string& name,
                            const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

}  // namespace

ServeMetrics::ServeMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      // 100 us .. ~100 s
      time_to_first_token(prometheus::BuildHistogram()
                              .Name("mesa_serve_time_to_first_token_seconds")
                              .Help("From a request's arrival to its first generated token.")
                              .Register(*registry_)
                              .Add({}, Exponential(1e-4, 80))),
      inter_token_latency(prometheus::BuildHistogram()
                              .Name("mesa_serve_inter_token_latency_seconds")
                              .Help("Between consecutive generated tokens of one request.")
                              .Register(*registry_)
                              .Add({}, Exponential(1e-5, 80))),
      decode_step(prometheus::BuildHistogram()
                      .Name("mesa_serve_decode_step_seconds")
                      .Help("One decoding step of every slot.")
                      .Register(*registry_)
                      .Add({}, Exponential(1e-5, 80))),
      decode_rows(prometheus::BuildHistogram()
                      .Name("mesa_serve_decode_rows")
                      .Help("Requests advanced by one decoding step.")
                      .Register(*registry_)
                      .Add({}, base::ExponentialBuckets(1, 2, 13))),
      prompt_tokens(NewCounter(*registry_, "mesa_serve_prompt_tokens_total",
                               "Prompt tokens of admitted requests.")),
      generated_tokens(NewCounter(*registry_, "mesa_serve_generated_tokens_total",
                                  "Tokens generated (completion tokens).")),
      cache_hits(NewCounter(*registry_, "mesa_serve_prefix_cache_hits_total",
                            "Prompts resumed from a prefix state snapshot.")),
      cache_misses(NewCounter(*registry_, "mesa_serve_prefix_cache_misses_total",
                              "Prompts that found no prefix state snapshot.")),
      cached_prompt_tokens(NewCounter(*registry_, "mesa_serve_prefix_cache_tokens_total",
                                      "Prompt positions served from prefix state snapshots.")),
      queue_depth(NewGauge(*registry_, "mesa_serve_queue_depth", "Requests waiting for a slot.")),
      slots_in_use(NewGauge(*registry_, "mesa_serve_slots_in_use",
                            "Slots holding a request (prefilling or decoding).")),
      slots(NewGauge(*registry_, "mesa_serve_slots", "Decoding slots.")),
      cache_entries(
          NewGauge(*registry_, "mesa_serve_prefix_cache_entries", "Prefix state snapshots held.")),
      finished_(prometheus::BuildCounter()
                    .Name("mesa_serve_requests_total")
                    .Help("Completion requests (choices) by how they ended.")
                    .Register(*registry_)),
      responses_(prometheus::BuildCounter()
                     .Name("mesa_serve_http_responses_total")
                     .Help("HTTP responses by status code.")
                     .Register(*registry_)),
      engine_seconds_(prometheus::BuildCounter()
                          .Name("mesa_serve_engine_seconds_total")
                          .Help("The engine thread's time by phase: admit, prefill, decode, emit, "
                                "idle.")
                          .Register(*registry_)) {}

prometheus::Counter& ServeMetrics::Finished(const std::string& reason) {
  return finished_.Add({{"reason", reason}});
}

prometheus::Counter& ServeMetrics::Responses(int status) {
  return responses_.Add({{"code", absl::StrCat(status)}});
}

prometheus::Counter& ServeMetrics::EngineSeconds(const std::string& phase) {
  return engine_seconds_.Add({{"phase", phase}});
}

std::string ServeMetrics::Text() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace mesa::serve
