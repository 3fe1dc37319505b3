// Register reallocation between warpgroups (setmaxnreg, sm_90a): a block launched with few
// registers per thread hands those of a light warpgroup to the heavy ones. Every thread of a
// warpgroup executes the same call; the block's total must stay within the register file.
#pragma once

namespace flashattn::cuda::sm90::warpgroup {

template <int Registers>
__device__ __forceinline__ void raise_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

template <int Registers>
__device__ __forceinline__ void lower_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

}  // namespace flashattn::cuda::sm90::warpgroup
