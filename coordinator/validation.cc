#include "coordinator/validation.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/utf8.h"
#include "proto/api_limits.h"
#include "proto/worker_api_limits.h"
#include "spec/generation.h"
#include "spec/tasks.h"
#include "spec/validate_job_spec.h"

namespace mesa::coordinator {
namespace {

// "FIELD: at most LIMIT[UNIT], got GOT": every result bound's error.
absl::Status AtMost(absl::string_view field, int64_t limit, int64_t got,
                    absl::string_view unit = "") {
  return absl::InvalidArgumentError(absl::StrCat(field, ": at most ", limit, unit, ", got ", got));
}

absl::Status CheckEvalResultBounds(const mesa::v1::JobResult& result) {
  if (result.datasets_size() > spec::kMaxEvalDatasets) {
    return AtMost("result.datasets", spec::kMaxEvalDatasets, result.datasets_size());
  }
  if (result.tasks_size() > spec::kMaxEvalTasks) {
    return AtMost("result.tasks", spec::kMaxEvalTasks, result.tasks_size());
  }
  if (result.cg_sweep_size() > spec::kMaxCgSweepSettings) {
    return AtMost("result.cg_sweep", spec::kMaxCgSweepSettings, result.cg_sweep_size(),
                  " settings");
  }
  if (result.internals_size() > spec::kMaxLayers) {
    return AtMost("result.internals", spec::kMaxLayers, result.internals_size(), " layers");
  }
  int64_t internals_entries = 0;  // layer x head, bounded as the spec bounds n_layers x n_heads
  for (int l = 0; l < result.internals_size(); ++l) {
    const int heads = result.internals(l).heads_size();
    if (heads > spec::kMaxHeads) {
      return AtMost(absl::StrCat("result.internals[", l, "].heads"), spec::kMaxHeads, heads);
    }
    internals_entries += heads;
  }
  if (internals_entries > spec::kMaxInternalsEntries) {
    return AtMost("result.internals.heads", spec::kMaxInternalsEntries, internals_entries,
                  " layer x head entries in all");
  }
  int64_t curve_positions = 0;
  for (const mesa::v1::DatasetResult& d : result.datasets()) {
    curve_positions +=
        std::max({d.nll_at_position_size(), d.mean_nll_so_far_size(), d.count_at_position_size()});
  }
  for (const mesa::v1::CgSweepPoint& point : result.cg_sweep()) {
    curve_positions += point.cg_steps_at_position_size();
  }
  if (curve_positions > spec::kMaxEvalCurvePositions) {
    return AtMost("result.datasets and result.cg_sweep", spec::kMaxEvalCurvePositions,
                  curve_positions, " curve positions in all");
  }
  return absl::OkStatus();
}

absl::Status CheckGenerateResultBounds(const mesa::v1::JobResult& result) {
  if (result.completions_size() > spec::kMaxPrompts) {
    return AtMost("result.completions", spec::kMaxPrompts, result.completions_size());
  }
  for (int i = 0; i < result.completions_size(); ++i) {
    const mesa::v1::Completion& c = result.completions(i);
    auto field = [i](absl::string_view name) {
      return absl::StrCat("result.completions[", i, "].", name);
    };
    const struct {
      const char* name;
      int64_t limit, got;
      const char* unit;
    } sizes[] = {
        {"prompt", spec::kMaxPromptBytes, static_cast<int64_t>(c.prompt().size()), " bytes"},
        {"completion", spec::kMaxCompletionBytes, static_cast<int64_t>(c.completion().size()),
         " bytes"},
        {"finish_reason", spec::kMaxFinishReasonBytes,
         static_cast<int64_t>(c.finish_reason().size()), " bytes"},
        {"tokens", spec::kMaxNewTokens, c.tokens_size(), ""},
        {"logprobs", spec::kMaxNewTokens, c.logprobs_size(), ""},
        {"cg_steps", spec::kMaxNewTokens, c.cg_steps_size(), ""},
    };
    for (const auto& size : sizes) {
      if (size.got > size.limit) return AtMost(field(size.name), size.limit, size.got, size.unit);
    }
    if (c.cg_layers() < 0 || c.cg_layers() > spec::kMaxLayers) {
      return AtMost(field("cg_layers"), spec::kMaxLayers, c.cg_layers());
    }
    if (c.cg_heads() < 0 || c.cg_heads() > spec::kMaxHeads) {
      return AtMost(field("cg_heads"), spec::kMaxHeads, c.cg_heads());
    }
    // One value per token, layer and head (spec/validate_job_spec.h bounds layers and heads).
    const int64_t per_head =
        int64_t{std::max(c.tokens_size(), c.cg_steps_size())} * c.cg_layers() * c.cg_heads();
    if (c.cg_steps_by_layer_head_size() > per_head) {
      return AtMost(field("cg_steps_by_layer_head"), per_head, c.cg_steps_by_layer_head_size(),
                    " (tokens x cg_layers x cg_heads)");
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool IsValidIdentifier(absl::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

absl::Status CheckJobIdField(absl::string_view field, absl::string_view id) {
  if (id.size() > kMaxJobIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": at most ", kMaxJobIdBytes, " bytes, got ", id.size()));
  }
  return absl::OkStatus();
}

absl::Status CheckCancelJobRequest(const mesa::v1::CancelJobRequest& request) {
  if (absl::Status s = CheckJobIdField("id", request.id()); !s.ok()) return s;
  if (request.reason().size() > kMaxCancelReasonBytes) {
    return absl::InvalidArgumentError(absl::StrCat("reason: at most ", kMaxCancelReasonBytes,
                                                   " bytes, got ", request.reason().size()));
  }
  return absl::OkStatus();
}

absl::Status CheckListJobsRequest(const mesa::v1::ListJobsRequest& request) {
  if (request.queue().size() > 63) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue: at most 63 bytes, got ", request.queue().size()));
  }
  if (request.page_token().size() > kMaxPageTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("page_token: at most ", kMaxPageTokenBytes,
                                                   " bytes, got ", request.page_token().size()));
  }
  if (request.labels_size() > kMaxLabelFilters) {
    return absl::InvalidArgumentError(absl::StrCat("labels: at most ", kMaxLabelFilters,
                                                   " filters, got ", request.labels_size()));
  }
  for (const auto& [key, value] : request.labels()) {
    if (key.size() > 63 || value.size() > 256) {
      return absl::InvalidArgumentError(
          "labels: keys are at most 63 bytes and values at most 256 bytes");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckJobResultBounds(const mesa::v1::JobResult& result) {
  if (absl::Status s = CheckEvalResultBounds(result); !s.ok()) return s;
  if (absl::Status s = CheckGenerateResultBounds(result); !s.ok()) return s;
  // Each part within its bound can still add up to more than a client can read in one response.
  const int64_t bytes = static_cast<int64_t>(result.ByteSizeLong());
  if (bytes > kMaxJobResultBytes) return AtMost("result", kMaxJobResultBytes, bytes, " bytes");
  return absl::OkStatus();
}

absl::Status CheckRegisterWorkerRequest(const mesa::v1::RegisterWorkerRequest& request) {
  if (!IsValidIdentifier(request.worker_id())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker_id: must be 1 to 128 of [A-Za-z0-9._-], got \"", request.worker_id(), "\""));
  }
  const auto& res = request.resources();
  if (res.gpus_size() > kMaxWorkerGpus) {
    return absl::InvalidArgumentError(
        absl::StrCat("resources.gpus: at most ", kMaxWorkerGpus, " GPUs"));
  }
  if (res.cpu_slots() < 0 || res.cpu_slots() > kMaxWorkerCpuSlots) {
    return absl::InvalidArgumentError(absl::StrCat("resources.cpu_slots: must be between 0 and ",
                                                   kMaxWorkerCpuSlots, ", got ", res.cpu_slots()));
  }
  if (res.memory_bytes() < 0 || res.memory_bytes() > kMaxWorkerMemoryBytes) {
    return absl::InvalidArgumentError(absl::StrCat("resources.memory_bytes: must be between 0 and ",
                                                   kMaxWorkerMemoryBytes, ", got ",
                                                   res.memory_bytes()));
  }
  std::vector<int> indices;
  for (int i = 0; i < res.gpus_size(); ++i) {
    const int g = res.gpus(i).index();
    if (g < 0 || std::find(indices.begin(), indices.end(), g) != indices.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("resources.gpus[", i, "].index: must be unique and >= 0, got ", g));
    }
    indices.push_back(g);
  }
  return absl::OkStatus();
}

absl::Status CheckUpdateAttemptRequest(const mesa::v1::UpdateAttemptRequest& request) {
  if (request.checkpoint_path().size() > kMaxCheckpointPathBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint_path: at most ", kMaxCheckpointPathBytes, " bytes"));
  }
  if (request.resumed().checkpoint().size() > kMaxCheckpointPathBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("resumed.checkpoint: at most ", kMaxCheckpointPathBytes, " bytes"));
  }
  if (request.result().checkpoint_path().size() > kMaxCheckpointPathBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("result.checkpoint_path: at most ", kMaxCheckpointPathBytes, " bytes"));
  }
  if (request.result().metrics_size() > kMaxResultMetrics) {
    return absl::InvalidArgumentError(absl::StrCat("result.metrics: at most ", kMaxResultMetrics,
                                                   ", got ", request.result().metrics_size()));
  }
  for (const auto& [name, value] : request.result().metrics()) {
    if (name.size() > kMaxResultMetricNameBytes || !base::IsValidUtf8(name)) {
      return absl::InvalidArgumentError(absl::StrCat("result.metrics: names are UTF-8 of at most ",
                                                     kMaxResultMetricNameBytes, " bytes"));
    }
  }
  if (absl::Status s = CheckJobResultBounds(request.result()); !s.ok()) return s;
  if (static_cast<size_t>(request.logs_size()) > kMaxLogLinesPerUpdate) {
    return absl::InvalidArgumentError(absl::StrCat("logs: at most ", kMaxLogLinesPerUpdate,
                                                   " lines per update, got ", request.logs_size()));
  }
  return absl::OkStatus();
}

}  // namespace mesa::coordinator
