// Named barriers (bar.sync / bar.arrive with an id and a thread count): a subset of a block's
// warps synchronizes without the others, and a producer can signal without waiting (arrive) a
// consumer that waits (sync). Id 0 is __syncthreads's; `threads` is a multiple of 32 and counts
// every thread that arrives or syncs for one phase. Both order the shared-memory accesses before
// them for the threads that sync.
#pragma once

namespace flashattn::cuda::prim {

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace flashattn::cuda::prim
