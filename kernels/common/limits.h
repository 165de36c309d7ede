// The shapes the kernels support, for every backend (CPU and CUDA). The job-spec validator
// (spec/validate_job_spec.h) checks specs against these before a job is accepted, so a job the
// coordinator takes never fails in a kernel for a reason its spec already showed.
#ifndef MESANET_KERNELS_LIMITS_H_
#define MESANET_KERNELS_LIMITS_H_

namespace mesa::kernels {

// The Mesa/GLA operator tiles the head dimension in 16-wide MMA fragments and keeps a head's
// D x D state in shared memory: D must be a multiple of 16 in [16, 128].
inline constexpr int kHeadDimMultiple = 16;
inline constexpr int kMinHeadDim = 16;
inline constexpr int kMaxHeadDim = 128;
// CG iterations per token (fixed steps, or the bound in tolerance mode).
inline constexpr int kMaxCgSteps = 1000;
// CG steps of the Mesa solve when nothing says otherwise: training's fixed steps, the bound in
// tolerance mode, decoding (the paper's and FLA's default). The one definition every layer uses.
inline constexpr int kDefaultCgSteps = 30;
// Short causal convolutions: the CUDA kernels keep the taps in registers. The CPU takes the same
// bound so a checkpoint trained on one backend runs on the other.
inline constexpr int kMaxConvWidth = 8;
// Context parallelism splits each sequence along time into slices of a whole number of the
// chunked operators' 64-token chunks (CPU and CUDA), so that slices start on chunk boundaries.
inline constexpr int kContextSliceMultiple = 64;
// Sliding-window attention: the longest window (the longest sequence a job may train on, so any
// larger window is global attention).
inline constexpr int kMaxAttentionWindow = 1 << 20;

}  // namespace mesa::kernels

#endif  // MESANET_KERNELS_LIMITS_H_
