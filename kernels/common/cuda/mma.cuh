// Warp-level tensor-core primitives (mma.sync m16n8k16, fp16 in, fp32 accumulate; m16n8k8 tf32) and
// ldmatrix.
//
// Fragment layouts (PTX ISA, m16n8k16), with g = lane / 4 and c = lane % 4:
//   A (16x16) regs: R0 = (g, 2c..2c+1), R1 = (g+8, 2c..), R2 = (g, 2c+8..), R3 = (g+8, 2c+8..)
//   B (16x8)  regs: R0 = (k 2c..2c+1, n g), R1 = (k 2c+8..2c+9, n g)
//   C (16x8)  f32:  c0,c1 = (g, 2c..2c+1), c2,c3 = (g+8, 2c..2c+1)
// Two adjacent C tiles (n 16s..16s+15) are exactly the A fragment of k-step s, which lets the
// CG keep its vectors in registers in accumulator layout and feed them straight back in.
#ifndef MESANET_KERNELS_COMMON_CUDA_MMA_CUH_
#define MESANET_KERNELS_COMMON_CUDA_MMA_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace mesa::kernels::cuda {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void Mma16816(float c[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same with bf16 operands (the attention kernels; kernels/deltanet keeps its own copy).
__device__ __forceinline__ void MmaBf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D(16x8, f32) += A(16x8, tf32) * B(8x8, tf32): the float32 operands' tensor-core product (the
// gated scan). Fragments, with g = lane / 4 and c = lane % 4: A R0 = (g, c), R1 = (g+8, c), R2 =
// (g, c+4), R3 = (g+8, c+4); B R0 = (k c, n g), R1 = (k c+4, n g); C as for m16n8k16.
__device__ __forceinline__ void MmaTf32(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A float rounded to the nearest tf32 (10 mantissa bits), as the operand register.
__device__ __forceinline__ uint32_t ToTf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// Two floats rounded to a bf16 pair (lo in the low half), as one 32-bit fragment register.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
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

// ---------------------------------------------------------------------------------------------
// "Core-matrix" (CM) shared-memory tiles: a ROWS x COLS fp16 tile stored as 8x8 core matrices of
// 128 contiguous bytes (row r of a core matrix at 16 r bytes), core matrices adjacent along the
// columns 128 bytes apart (LBO) and 8-row groups COLS*16 bytes apart (SBO). This is the
// no-swizzle K-major layout that wgmma reads through a descriptor, and ldmatrix reads it
// conflict-free too (each 8x8 matrix is 128 contiguous bytes), so the mma.sync fallback uses the
// same tiles. Offsets in halves.
template <int COLS>
__device__ __forceinline__ int CmOff(int row, int col) {
  return (col >> 3) * 64 + (row >> 3) * (COLS * 8) + (row & 7) * 8 + (col & 7);
}

// B fragments (two n-tiles n0..n0+15 at k-step k0) from a CM tile stored [n][k].
template <int COLS>
__device__ __forceinline__ void LoadB_NK_Cm(uint32_t b[4], const __half* s, int n0, int k0,
                                            int lane) {
  const int mi = lane >> 3, r = lane & 7;
  LdMatrixX4(b, s + CmOff<COLS>(n0 + r + (mi >> 1) * 8, k0 + (mi & 1) * 8));
}

// Same from a CM tile stored [k][n] (transposing ldmatrix).
template <int COLS>
__device__ __forceinline__ void LoadB_KN_Cm(uint32_t b[4], const __half* s, int k0, int n0,
                                            int lane) {
  const int mi = lane >> 3, r = lane & 7;
  LdMatrixX4Trans(b, s + CmOff<COLS>(k0 + r + (mi & 1) * 8, n0 + (mi >> 1) * 8));
}

// wgmma (sm_90a only). MESA_HAS_WGMMA is 1 in the sm_90a device pass, else the fallback runs.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MESA_HAS_WGMMA 1
#else
#define MESA_HAS_WGMMA 0
#endif

__device__ __forceinline__ void WgmmaFence() {
#if MESA_HAS_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void WgmmaCommit() {
#if MESA_HAS_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void WgmmaWaitAll() {
#if MESA_HAS_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}
// Makes generic-proxy smem writes (st.shared) visible to the async proxy (wgmma operand reads).
__device__ __forceinline__ void FenceProxyAsyncSmem() {
#if MESA_HAS_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Keeps the compiler from moving accumulator reads/writes across the wgmma wait.
template <int N>
__device__ __forceinline__ void FenceAcc(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}

// Operand lists shared by the four wgmma wrappers below (their asm statements differ only in the
// shape and in where A comes from): the accumulator d[N/8][4] as read-write operands %0.. in n-tile
// order, and the matching register list of the PTX instruction.
#define MESA_WGMMA_ACC4(d, i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define MESA_WGMMA_ACC_N64(d)                                                                 \
  MESA_WGMMA_ACC4(d, 0), MESA_WGMMA_ACC4(d, 1), MESA_WGMMA_ACC4(d, 2), MESA_WGMMA_ACC4(d, 3), \
      MESA_WGMMA_ACC4(d, 4), MESA_WGMMA_ACC4(d, 5), MESA_WGMMA_ACC4(d, 6), MESA_WGMMA_ACC4(d, 7)
#define MESA_WGMMA_ACC_N128(d)                                                                 \
  MESA_WGMMA_ACC_N64(d), MESA_WGMMA_ACC4(d, 8), MESA_WGMMA_ACC4(d, 9), MESA_WGMMA_ACC4(d, 10), \
      MESA_WGMMA_ACC4(d, 11), MESA_WGMMA_ACC4(d, 12), MESA_WGMMA_ACC4(d, 13),                  \
      MESA_WGMMA_ACC4(d, 14), MESA_WGMMA_ACC4(d, 15)
#define MESA_WGMMA_REGS_N64                                                \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define MESA_WGMMA_REGS_N128                                                         \
  MESA_WGMMA_REGS_N64                                                                \
  ", "                                                                               \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

// D(64x64, f32) += A(64x16, f16, smem desc, K-major) * B(16x64, f16, smem desc, K-major).
__device__ __forceinline__ void WgmmaM64N64K16(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b) {
#if MESA_HAS_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {" MESA_WGMMA_REGS_N64
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : MESA_WGMMA_ACC_N64(d)
      : "l"(desc_a), "l"(desc_b), "r"(1));
#else
  (void)d;
  (void)desc_a;
  (void)desc_b;
#endif
}

// D(64x128, f32) += A(64x16, f16, smem desc, K-major) * B(16x128, f16, smem desc, K-major).
__device__ __forceinline__ void WgmmaM64N128K16(float (&d)[16][4], uint64_t desc_a,
                                                uint64_t desc_b) {
#if MESA_HAS_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" MESA_WGMMA_REGS_N128
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : MESA_WGMMA_ACC_N128(d)
      : "l"(desc_a), "l"(desc_b), "r"(1));
#else
  (void)d;
  (void)desc_a;
  (void)desc_b;
#endif
}

// Waits until at most one committed wgmma group of this warp is still pending (groups complete in
// order: the older ones are done).
__device__ __forceinline__ void WgmmaWaitOne() {
#if MESA_HAS_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
#endif
}

// stmatrix (sm_90): stores four 8x8 fp16 matrices; register j of every lane goes to matrix j
// (lane = 4 * row + col/2, the mma accumulator/ldmatrix fragment layout), lanes 8j..8j+7 give
// the 16-byte row addresses of matrix j.
__device__ __forceinline__ void StMatrixX4(void* smem, const uint32_t r[4]) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(SmemAddr(smem)),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
#else
  (void)smem;
  (void)r;
#endif
}

// 2^x with one MUFU op (flushes subnormal results to 0; callers pass x <= 0 and round the
// product to fp16 afterwards, so nothing is lost).
__device__ __forceinline__ float Ex2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// D(64x64, f32) += A(64x16, f16, registers: per warp its 16 rows in the mma.sync A-fragment layout)
// * B(16x64, f16, smem desc, K-major).
__device__ __forceinline__ void WgmmaM64N64K16RegA(float (&d)[8][4], const uint32_t a[4],
                                                   uint64_t desc_b) {
#if MESA_HAS_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {" MESA_WGMMA_REGS_N64
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : MESA_WGMMA_ACC_N64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
#else
  (void)d;
  (void)a;
  (void)desc_b;
#endif
}

// D(64x128, f32) += A(64x16, f16, registers: per warp its 16 rows in the mma.sync A-fragment
// layout)
// * B(16x128, f16, smem desc, K-major).
__device__ __forceinline__ void WgmmaM64N128K16RegA(float (&d)[16][4], const uint32_t a[4],
                                                    uint64_t desc_b) {
#if MESA_HAS_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" MESA_WGMMA_REGS_N128
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : MESA_WGMMA_ACC_N128(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
#else
  (void)d;
  (void)a;
  (void)desc_b;
#endif
}

// Shared-memory matrix descriptor, no swizzle: start address, LBO (between core matrices along K)
// and SBO (between 8-row groups), all in bytes (encoded >> 4). Split into the low word (start
// address >> 4 and LBO) and the full descriptor from it: descriptors of one tile differ only in the
// start address, so a loop computes the base low word once and adds (offset bytes >> 4) per wgmma
// (the 14-bit address field cannot carry: smem addresses are < 228 KB).
__device__ __forceinline__ uint32_t WgmmaDescLo(const void* smem, uint32_t lbo) {
  return ((SmemAddr(smem) & 0x3FFFFu) >> 4) | (((lbo >> 4) & 0x3FFFu) << 16);
}
__device__ __forceinline__ uint64_t WgmmaDescFromLo(uint32_t lo, uint32_t sbo) {
  return static_cast<uint64_t>(lo) | (static_cast<uint64_t>((sbo >> 4) & 0x3FFFu) << 32);
}

// 1/x with one MUFU op (no IEEE slow path; subnormal inputs are handled, not flushed).
__device__ __forceinline__ float RcpApprox(float x) {
  float y;
  asm("rcp.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// cp.async of 16 bytes global -> shared (sm_80+), and the waits.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(SmemAddr(smem)), "l"(gmem)
               : "memory");
#else
  *reinterpret_cast<uint4*>(smem) = *reinterpret_cast<const uint4*>(gmem);
#endif
}
__device__ __forceinline__ void CpAsyncWaitAll() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_COMMON_CUDA_MMA_CUH_
