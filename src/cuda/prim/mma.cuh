// warp:: tensor-core multiply-accumulate, mma.sync.aligned.m16n8k16 with fp32 accumulation
// and fp16 or bf16 operands (sm_80 and newer). All 32 lanes of the warp execute it together.
//
// Fragment layouts (lane = laneid, g = lane / 4, t = lane % 4). Every 32-bit operand register
// holds two 16-bit elements, the lower column (A) or lower k (B) in the low half:
//   A 16x16, row-major   a[0] = A[g][2t, 2t+1]      a[1] = A[g+8][2t, 2t+1]
//                        a[2] = A[g][2t+8, 2t+9]    a[3] = A[g+8][2t+8, 2t+9]
//   B 16x8, k by n       b[0] = B[2t, 2t+1][g]      b[1] = B[2t+8, 2t+9][g]
//   C/D 16x8, fp32       c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]
// The C layout pairs two adjacent 8-column tiles into exactly the A layout of a 16-wide k
// slice, which is what lets a score accumulator become the A operand of the next product.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashattn::cuda::prim::warp {

template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                     const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                            const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace flashattn::cuda::prim::warp

namespace flashattn::cuda::prim::thread {

// Clears this thread's share of an MT x NT grid of 16x8 accumulator tiles.
template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][j][e] = 0.f;
    }
  }
}

}  // namespace flashattn::cuda::prim::thread
