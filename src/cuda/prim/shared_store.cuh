// Stores to shared memory by shared-window address (prim::smem_addr), for tiles whose swizzled
// layout the caller computes in bytes.
#pragma once

#include <cstdint>

namespace flashattn::cuda::prim {

__device__ __forceinline__ void store_shared(uint32_t addr, uint32_t value) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(value) : "memory");
}

__device__ __forceinline__ void store_shared(uint32_t addr, float lo, float hi) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(lo), "f"(hi) : "memory");
}

}  // namespace flashattn::cuda::prim
