// Keeping a long loop's loop-invariant integers out of spilled registers. A kernel near its
// register limit lets ptxas spill what stays live across the loop; when shared memory leaves
// L1 little room, each reload goes to L2, hundreds of cycles on the loop's path.
//   warp_uniform: lane 0's value for the whole warp. ptxas then knows the value is the same
//     in every lane and may keep what derives from it in uniform registers, which the vector
//     registers' pressure does not spill. For values that are uniform already but come from
//     threadIdx (a warpgroup's index).
//   thread_index_fresh: threadIdx.x read again where it is used (a volatile read is never
//     hoisted), for per-thread values cheaper to recompute than to keep.
// Whether either helps depends on the rest of the kernel's register allocation: measure.
#pragma once

namespace flashattn::cuda::prim {

__device__ __forceinline__ int warp_uniform(int x) { return __shfl_sync(0xffffffffu, x, 0); }

__device__ __forceinline__ int thread_index_fresh() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  return tid;
}

}  // namespace flashattn::cuda::prim
