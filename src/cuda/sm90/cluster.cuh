// The thread-block cluster a block runs in (sm_90).
#pragma once

namespace flashattn::cuda::sm90 {

// How many blocks this block's cluster holds: 1 for a launch without clusters.
__device__ __forceinline__ unsigned cluster_blocks() {
  unsigned blocks;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(blocks));
  return blocks;
}

}  // namespace flashattn::cuda::sm90
