// Prometheus metrics of mesa-serve (docs/serving.md, "Metrics"): names carry the mesa_serve_
// prefix and base units. The engine and the HTTP layer update them; /metrics exposes them.
#ifndef MESANET_SERVE_SERVE_METRICS_H_
#define MESANET_SERVE_SERVE_METRICS_H_

#include <memory>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace mesa::serve {

class ServeMetrics {
  // First: every member below is registered in it.
  std::shared_ptr<prometheus::Registry> registry_;

 public:
  ServeMetrics();
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  // The text exposition format, for GET /metrics.
  std::string Text() const;

  prometheus::Histogram& time_to_first_token;  // seconds, from arrival to the first token
  prometheus::Histogram& inter_token_latency;  // seconds between a request's tokens
  prometheus::Histogram& decode_step;          // seconds of one decoding step (every slot)
  prometheus::Histogram& decode_rows;          // requests advanced by one decoding step
  prometheus::Counter& prompt_tokens;
  prometheus::Counter& generated_tokens;
  prometheus::Counter& cache_hits;
  prometheus::Counter& cache_misses;
  prometheus::Counter& cached_prompt_tokens;  // prompt positions served from snapshots
  prometheus::Gauge& queue_depth;
  prometheus::Gauge& slots_in_use;
  prometheus::Gauge& slots;
  prometheus::Gauge& cache_entries;
  // Requests by outcome: stop, length, eos, cancelled, error; and HTTP responses by status code.
  prometheus::Counter& Finished(const std::string& reason);
  prometheus::Counter& Responses(int status);
  // The engine thread's time by what it did: admit (cache lookups, state copies), prefill,
  // decode (the device step and reading its tokens back), emit (the host's per-request work after
  // a step), idle (waiting for requests). Their rates tell where a step's time goes.
  prometheus::Counter& EngineSeconds(const std::string& phase);

 private:
  prometheus::Family<prometheus::Counter>& finished_;
  prometheus::Family<prometheus::Counter>& responses_;
  prometheus::Family<prometheus::Counter>& engine_seconds_;
};

}  // namespace mesa::serve

#endif  // MESANET_SERVE_SERVE_METRICS_H_
