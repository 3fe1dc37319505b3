// warp:: shared-memory to register loads of 8x8 tiles of 16-bit elements (ldmatrix, sm_75+).
// All 32 lanes execute together. `row_addr` is this lane's shared-memory address (32-bit,
// from prim::smem_addr) of one 16-byte row: lanes 8i .. 8i+7 name the 8 rows of matrix i.
//
// Result register i comes from matrix i. Without .trans, lane l holds row l / 4, columns
// 2 (l % 4) and 2 (l % 4) + 1 of its matrix (the A/B fragment layout of mma.cuh). With
// .trans, lane l holds column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1: a row-major [k][n]
// tile read this way is the B operand (pairs along k) of mma_m16n8k16.
#pragma once

#include <cstdint>

namespace flashattn::cuda::prim::warp {

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row_addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row_addr));
}

}  // namespace flashattn::cuda::prim::warp
