// thread:: asynchronous global-to-shared copies (cp.async, sm_80+). Each thread issues its
// own 16-byte copies; they complete in commit groups, in order. A copy with `valid` false
// reads nothing and writes 16 zero bytes, which is how tiles past the end of a sequence are
// filled. Shared memory written this way is visible to the other threads of the block only
// after wait_groups<N>() in the writing threads and a __syncthreads().
#pragma once

#include <cstdint>

namespace flashattn::cuda::prim::thread {

// Bypasses L1 (.cg); `gmem` must be 16-byte aligned and `smem_addr` 16-byte aligned.
__device__ __forceinline__ void cp_async_16(uint32_t smem_addr, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `Pending` of this thread's commit groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

}  // namespace flashattn::cuda::prim::thread
