// warp:: register to shared-memory stores of 8x8 tiles of 16-bit elements (stmatrix, sm_90):
// the counterpart of prim/ldmatrix.cuh. All 32 lanes execute together; lanes 8i .. 8i+7 name
// the 8 rows (16 bytes each) of matrix i. Without .trans, register i of lane l holds row l / 4,
// columns 2 (l % 4) and 2 (l % 4) + 1 of matrix i.
#pragma once

#include <cstdint>

namespace flashattn::cuda::sm90::warp {

__device__ __forceinline__ void stmatrix_x4(uint32_t row_addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(row_addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

}  // namespace flashattn::cuda::sm90::warp
