// The global-memory synchronization of the backward's dQ accumulation: fp32 pair additions
// and the deterministic mode's turn counters (an acquire load to wait for a turn, a release
// add to pass it on).
#pragma once

#include <cstdint>

namespace flashattn::cuda::prim {

__device__ __forceinline__ int load_acquire(const int32_t* p) {
  int32_t v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void add_release(int32_t* p, int32_t v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" : : "l"(p), "r"(v) : "memory");
}

// dst[0] += a, dst[1] += b; one vector atomic from sm_90 on (dst 8-byte aligned).
__device__ __forceinline__ void add_pair(float* dst, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(a, b));
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

}  // namespace flashattn::cuda::prim
