// Causal depthwise convolution continued from a tail (kernels/conv/cuda/causal_conv_step_cuda.h):
// one thread per (sequence, channel, chunk of 32 new tokens) walks its tokens with the last W - 1
// inputs in registers,
// summing the W taps in the CPU's order without contraction (the same bits as
// kernels/conv/causal_conv_step.cc), then writes the new tail.
#include <cuda_bf16.h>

#include "kernels/common/cuda/step_common.cuh"
#include "kernels/conv/cuda/conv_step_kernels.h"

namespace mesa::kernels::cuda {
namespace {

// Tokens per thread: a long append (a prefill piece) is split into chunks of this many tokens, one
// thread per (sequence, channel, chunk), so that it fills the GPU; a decoding step (t = 1) is one
// chunk.
constexpr int kTokensPerThread = 32;

// The convolutions of one launch (kernel parameters, read by blockIdx.y).
struct ConvSteps {
  ConvStepKernelArgs p[kMaxConvSteps];
};

template <int W, typename T>
__global__ void __launch_bounds__(256) ConvStepKernel(ConvSteps steps) {
  // Dims from the first (both have the same); the operands of blockIdx.y's picked field by field
  // with constant indices, so that the parameters are not copied to local memory to be indexed.
  const ConvStepKernelArgs& a = steps.p[0];
  const bool second = blockIdx.y != 0;
  const float* weight = second ? steps.p[1].weight : a.weight;
  float* tail_base = second ? steps.p[1].tail : a.tail;
  const void* x_base = second ? steps.p[1].x : a.x;
  void* out_base = second ? steps.p[1].out : a.out;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int C = a.channels;
  const int64_t chunks = (int64_t(a.seq_len) + kTokensPerThread - 1) / kTokensPerThread;
  if (idx >= int64_t(a.batch) * C * chunks) return;
  const int64_t chunk = idx % chunks;
  const int64_t bc = idx / chunks;
  const int64_t b = bc / C;
  const int c = static_cast<int>(bc % C);
  float w[W], win[W];
#pragma unroll
  for (int j = 0; j < W; ++j) w[j] = weight[int64_t(c) * W + j];
  float* tail = tail_base + b * (W - 1) * C + c;
  const T* x = static_cast<const T*>(x_base) + b * a.seq_len * C + c;
  T* out = static_cast<T*>(out_base) + b * a.seq_len * C + c;
  const int64_t t0 = chunk * kTokensPerThread;
  const int64_t t1 = t0 + kTokensPerThread < a.seq_len ? t0 + kTokensPerThread : a.seq_len;
  // The W - 1 inputs before t0: from the new inputs, or (before the first) from the tail.
  float old_tail[W > 1 ? W - 1 : 1];
#pragma unroll
  for (int j = 0; j < W - 1; ++j) old_tail[j] = tail[int64_t(j) * C];
#pragma unroll
  for (int j = 0; j < W - 1; ++j) {
    const int64_t pos = t0 - (W - 1) + j;  // < 0: tail row W - 1 + pos
    win[j] = pos >= 0 ? step::LoadElem(x + pos * C) : old_tail[W - 1 + pos];
  }
  for (int64_t t = t0; t < t1; ++t) {
    win[W - 1] = step::LoadElem(x + t * C);
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < W; ++j) acc = __fadd_rn(acc, __fmul_rn(w[j], win[j]));
    step::StoreElem(out + t * C, acc);
#pragma unroll
    for (int j = 0; j + 1 < W; ++j) win[j] = win[j + 1];
  }
  // The new tail: the last W - 1 inputs of (old tail, new inputs). Written by the first chunk's
  // thread, the only one that read the old tail (so no other thread reads it after this).
  if (chunk == 0) {
#pragma unroll
    for (int j = 0; j < W - 1; ++j) {
      const int64_t pos = int64_t(a.seq_len) - (W - 1) + j;
      tail[int64_t(j) * C] = pos >= 0 ? step::LoadElem(x + pos * C) : old_tail[W - 1 + pos];
    }
  }
}

template <int W>
cudaError_t Launch(const ConvSteps& steps, int count, cudaStream_t stream) {
  const ConvStepKernelArgs& a = steps.p[0];
  const int64_t chunks = (int64_t(a.seq_len) + kTokensPerThread - 1) / kTokensPerThread;
  const int64_t n = int64_t(a.batch) * a.channels * (chunks > 0 ? chunks : 1);
  const dim3 grid(static_cast<unsigned>((n + 255) / 256), count), block(256);
  if (a.dtype == DType::kBF16) {
    ConvStepKernel<W, __nv_bfloat16><<<grid, block, 0, stream>>>(steps);
  } else {
    ConvStepKernel<W, float><<<grid, block, 0, stream>>>(steps);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchCausalConvSteps(const ConvStepKernelArgs* args, int count, cudaStream_t stream) {
  if (count < 1 || count > kMaxConvSteps) return cudaErrorInvalidValue;
  ConvSteps a;
  for (int i = 0; i < count; ++i) a.p[i] = args[i];
  switch (a.p[0].width) {
    case 1:
      return Launch<1>(a, count, stream);
    case 2:
      return Launch<2>(a, count, stream);
    case 3:
      return Launch<3>(a, count, stream);
    case 4:
      return Launch<4>(a, count, stream);
    case 5:
      return Launch<5>(a, count, stream);
    case 6:
      return Launch<6>(a, count, stream);
    case 7:
      return Launch<7>(a, count, stream);
    case 8:
      return Launch<8>(a, count, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace mesa::kernels::cuda
