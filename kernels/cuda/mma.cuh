// Warp-level tensor-core primitives (mma.sync m16n8k16, fp16 in, fp32 accumulate) and ldmatrix.
//
// Fragment layouts (PTX ISA, m16n8k16), with g = lane / 4 and c = lane % 4:
//   A (16x16) regs: R0 = (g, 2c..2c+1), R1 = (g+8, 2c..), R2 = (g, 2c+8..), R3 = (g+8, 2c+8..)
//   B (16x8)  regs: R0 = (k 2c..2c+1, n g), R1 = (k 2c+8..2c+9, n g)
//   C (16x8)  f32:  c0,c1 = (g, 2c..2c+1), c2,c3 = (g+8, 2c..2c+1)
// Two adjacent C tiles (n 16s..16s+15) are exactly the A fragment of k-step s, which lets the
// CG keep its vectors in registers in accumulator layout and feed them straight back in.
#ifndef MESANET_KERNELS_CUDA_MMA_CUH_
#define MESANET_KERNELS_CUDA_MMA_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace mesa::kernels::cuda {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void Mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t r[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t r[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}

__device__ __forceinline__ uint32_t PackHalf2(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// Flips the sign of both halves (negates an fp16 fragment exactly).
__device__ __forceinline__ uint32_t NegHalf2(uint32_t x) { return x ^ 0x80008000u; }

// Smem tiles are row-major fp16 with rows padded by 8 halves (16 bytes) so that the 8 row
// addresses of one ldmatrix land in distinct banks.
// B fragments for two n-tiles (n0..n0+15) of k-step k0..k0+15 when B is stored as [n][k]
// ("col" operand, K contiguous): b[0],b[1] -> tile n0, b[2],b[3] -> tile n0+8.
__device__ __forceinline__ void LoadB_NK(uint32_t b[4], const __half* s, int stride, int n0, int k0,
                                         int lane) {
  const int mi = lane >> 3, r = lane & 7;
  LdMatrixX4(b, s + (n0 + r + (mi >> 1) * 8) * stride + k0 + (mi & 1) * 8);
}

// Same, when B is stored as [k][n] (N contiguous): uses the transposing ldmatrix.
__device__ __forceinline__ void LoadB_KN(uint32_t b[4], const __half* s, int stride, int k0, int n0,
                                         int lane) {
  const int mi = lane >> 3, r = lane & 7;
  LdMatrixX4Trans(b, s + (k0 + r + (mi & 1) * 8) * stride + n0 + (mi >> 1) * 8);
}

// A fragment (rows m0..m0+15, k0..k0+15) when A is stored as [m][k].
__device__ __forceinline__ void LoadA_MK(uint32_t a[4], const __half* s, int stride, int m0, int k0,
                                         int lane) {
  const int mi = lane >> 3, r = lane & 7;
  LdMatrixX4(a, s + (m0 + r + (mi & 1) * 8) * stride + k0 + (mi >> 1) * 8);
}

// A fragment when A is stored as [k][m] (A = X^T of a row-major X).
__device__ __forceinline__ void LoadA_KM(uint32_t a[4], const __half* s, int stride, int m0, int k0,
                                         int lane) {
  const int mi = lane >> 3, r = lane & 7;
  LdMatrixX4Trans(a, s + (k0 + r + (mi >> 1) * 8) * stride + m0 + (mi & 1) * 8);
}

// Sum over the 4 lanes of a quad (the lanes holding one accumulator row).
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_CUDA_MMA_CUH_
