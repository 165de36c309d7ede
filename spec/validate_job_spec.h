// The job-spec validator: every rule a mesa.v1.JobSpec must satisfy to run, in one place, used by
// mesactl (before sending), the coordinator (at submit) and mesa-train (at start). A spec the
// coordinator accepts can therefore only fail later for a reason its spec could not show (a
// missing shard file, a device that dies). Problems name their field path, e.g.
// "spec.model.d_model: must be between 1 and 16384, got 0"; all are reported at once, joined
// with "; ".
//
// Numeric ranges are the table kNumericLimits (path, bounds, which job types), checked through
// protobuf reflection, so a test can walk every limit; the kernels' own limits come from
// kernels/common/limits.h.
#ifndef MESANET_SPEC_VALIDATE_JOB_SPEC_H_
#define MESANET_SPEC_VALIDATE_JOB_SPEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/common/limits.h"
#include "mesa/v1/job.pb.h"

namespace mesa::spec {

inline constexpr int64_t kMaxSteps = 1'000'000'000'000;
inline constexpr int kMaxPathLength = 4096;
inline constexpr int kMaxLabels = 64;
inline constexpr int kMaxLabelValue = 256;
// Parameters of one model (float32 master weights + two AdamW moments must fit a node).
inline constexpr int64_t kMaxParameters = int64_t{1} << 34;
// Settings of one eval.cg_sweep (each is a full pass over the evaluation batches).
inline constexpr int kMaxCgSweepSettings = 32;
// eval.datasets of one job, and (with eval.per_position) the positions of all their curves
// together: the sum of their seq_len values, plus the first dataset's for each tolerance of
// eval.cg_sweep (its curve of mean CG steps per position). Bounds the curves a job carries through
// the worker's event line (proto/trainer_events.h, which repeats the first dataset's), the store
// and GetJob to ~9.6 MB at the very most (~6 MB with plain figures).
inline constexpr int kMaxEvalDatasets = 16;
// Tokens per sequence (data.seq_len, eval.datasets[i].seq_len).
inline constexpr int kMaxSeqLen = 1 << 20;
inline constexpr int kMaxEvalCurvePositions = 65536;
// model.n_layers and model.n_heads.
inline constexpr int kMaxLayers = 512;
inline constexpr int kMaxHeads = 256;
// eval.internals reports one entry per layer x head (LayerInternals.heads), at most ~632 bytes of
// event JSON each (every figure at its longest, the layers' own fields included; ~534 with
// plain figures), so kMaxLayers x kMaxHeads (131,072 entries, ~83 MB) could never be reported.
// With eval.internals, model.n_layers x model.n_heads may be at most this: ~5.2 MB, which with
// the longest curves (~9.6 MB) leaves ~2 MB of the 16 MiB event line (proto/trainer_events.h)
// spare; //spec:validate_job_spec_test measures that largest result.
inline constexpr int kMaxInternalsEntries = 8192;

// Which job types a rule applies to: kBoth is training and evaluation (the types with a model
// section); kAny adds generation.
enum JobTypes : unsigned { kTrain = 1, kEval = 2, kBoth = 3, kGenerate = 4, kAny = 7 };

// A numeric field's bounds, inclusive; for the job types in `applies_to`.
struct NumericLimit {
  const char* path;  // below JobSpec, e.g. "model.d_model"
  double lo;
  double hi;
  JobTypes applies_to = kBoth;
};

std::span<const NumericLimit> NumericLimits();

struct ValidateOptions {
  // Data-parallel ranks the job runs on; 0: what spec.resources asks for (gpus, else cpu_ranks).
  // mesa-train passes mpirun's.
  int world_size = 0;
  // The device the run will use when known (mesa-train's --device); empty: the spec's.
  std::string device;
  // mesa-train --eval: validate as an evaluation whatever spec.type says.
  bool as_eval = false;
  // Submissions to the service: every path must be absolute (a trainer runs in an attempt
  // directory on some worker, where a relative path means nothing the submitter meant; mesactl
  // makes paths absolute first). mesa-train run by hand resolves them against its directory.
  bool require_absolute_paths = false;
  // Confined paths (spec/confined_paths.h; the coordinator's --data_roots and --checkpoint_root).
  // Non-empty data_roots: data.train_path and data.val_path must lie inside one of them,
  // checkpoint.init_from and eval.checkpoint inside one of them or checkpoint_root. Non-empty
  // checkpoint_root: checkpoint.dir, when set, strictly inside it and not inside a per-job
  // <checkpoint_root>/job-... directory. Paths are normalised first; ".." is refused. Roots are
  // absolute (normalised here).
  std::vector<std::string> data_roots;
  std::string checkpoint_root;
};

// Every problem, "spec.PATH: message". Empty when the spec is valid.
std::vector<std::string> JobSpecProblems(const mesa::v1::JobSpec& spec,
                                         const ValidateOptions& options = {});

// INVALID_ARGUMENT listing every problem, or OK.
absl::Status ValidateJobSpec(const mesa::v1::JobSpec& spec, const ValidateOptions& options = {});

// Parameters of the model a valid spec describes (the same count as model::ModelConfig's).
int64_t ModelParameters(const mesa::v1::ModelConfig& model);

// ^[a-z][a-z0-9-]{0,62}$ (job names and queue names).
bool IsValidName(absl::string_view name);

// ^[a-z0-9][a-z0-9_.-]{0,62}$ (eval.datasets[i].name, and the synthetic tasks' names).
bool IsDatasetName(absl::string_view name);

// The sequence mixers a layer can have.
bool IsMixerName(absl::string_view name);

// The mixer of each of n_layers layers: model.layer_mixers repeated, else model.mixer (default
// "mesa") everywhere. For a valid spec.
std::vector<std::string> LayerMixers(const mesa::v1::ModelConfig& model);

// The resolved defaults of fields where 0 means "use the default", so callers apply the same ones.
inline constexpr int kDefaultConvWidth = 4;
inline constexpr int kDefaultCgSteps = kernels::kDefaultCgSteps;
inline constexpr float kDefaultMlpMult = 3.0f;

}  // namespace mesa::spec

#endif  // MESANET_SPEC_VALIDATE_JOB_SPEC_H_
