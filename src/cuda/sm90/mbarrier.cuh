// Shared-memory mbarriers (sm_90), the completion signal of TMA copies: a barrier counts
// arrivals and, separately, transaction bytes; its phase completes once `count` threads have
// arrived and every byte announced with arrive_expect_tx has landed. Phases alternate
// parity 0, 1, 0, ...; a waiter names the parity of the phase it waits for.
// `bar` is the shared-window address of an 8-byte-aligned uint64_t.
#pragma once

#include <cstdint>

namespace flashattn::cuda::sm90::mbarrier {

// One thread initializes; the others may use the barrier after fence_init() in that thread
// and a __syncthreads() (the fence makes the init visible to the async proxy, i.e. to TMA).
__device__ __forceinline__ void init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// This thread's arrival, announcing `bytes` more transaction bytes for the current phase.
__device__ __forceinline__ void arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// This thread's arrival (release: its earlier memory accesses happen before the phase completes).
__device__ __forceinline__ void arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Returns once the phase of parity `parity` has completed; its writes are then visible.
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

}  // namespace flashattn::cuda::sm90::mbarrier
