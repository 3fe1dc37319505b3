// thread:: scalar helpers of the attention kernels: fast exp2, packing two fp32 values into
// one register of 16-bit elements (the mma operand layout: first value in the low half),
// and the quad reductions over the 4 lanes that share a row of an mma accumulator.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashattn::cuda::prim {

namespace thread {

// 2^x with ex2.approx (relative error about 2^-22; ex2(-inf) = 0, subnormals flushed).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// tanh through exp2: 1 - 2 / (e^{2x} + 1). Absolute error about 1e-7 over the whole line,
// saturating to +-1 (tanh.approx is faster but only good to about 5e-4 relative).
__device__ __forceinline__ float tanh_exp2(float x) {
  constexpr float kTwoLog2e = 2.8853900817779268f;  // 2 / ln(2)
  return 1.f - __fdividef(2.f, exp2_approx(x * kTwoLog2e) + 1.f);
}

template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

}  // namespace thread

namespace quad {

// Reductions over the 4 consecutive lanes 4g .. 4g+3 (one accumulator row); every lane of
// the warp must call them, and every lane of the quad gets the result.
__device__ __forceinline__ float max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace quad

// The 32-bit shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace flashattn::cuda::prim
