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

// 2^x without the MUFU: x rounded to an integer j with the 1.5 * 2^23 trick (j lands in the
// low bits of t), 2^(x - j) on [-0.5, 0.5] by a minimax polynomial of kDegree (relative error
// 7.5e-5 at degree 3, 2.6e-6 at 4, 2.3e-7 at 5 in fp32), times 2^j built from t's bits. Only
// FMA- and ALU-pipe instructions, so a kernel whose exp2 calls saturate the MUFU can move a
// share of them here. Matches exp2_approx where a softmax needs it to: -inf and everything
// below -127 give exactly 0 (x clamped to -127, whose 2^j is the bit pattern 0), NaN stays
// NaN (max.NaN keeps it; its 2^j is 1).
// The minimax coefficients of 2^f on [-0.5, 0.5] for relative error, c_k of f^k.
__host__ __device__ constexpr float exp2_poly_coefficient(int degree, int k) {
  constexpr float kC3[] = {0.99992806f, 0.69326097f, 0.24261113f, 0.055171669f};
  constexpr float kC4[] = {0.99999928f, 0.69312179f, 0.24024744f, 0.055917859f, 0.0095701022f};
  constexpr float kC5[] = {1.0000001f,   0.69314694f,  0.2402212f,
                           0.055507131f, 0.009675541f, 0.0013276472f};
  return degree == 3 ? kC3[k] : degree == 4 ? kC4[k] : kC5[k];
}

template <int kDegree>
__device__ __forceinline__ float exp2_poly(float x) {
  static_assert(kDegree >= 3 && kDegree <= 5, "exp2_poly: degree 3, 4 or 5");
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23
  float clamped;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(clamped) : "f"(x), "f"(-127.f));
  const float t = __fadd_rn(clamped, kRound);  // _rn: kept apart from the subtraction below
  const float f = __fsub_rn(clamped, __fsub_rn(t, kRound));
  float p = exp2_poly_coefficient(kDegree, kDegree);
#pragma unroll
  for (int k = kDegree - 1; k >= 0; --k) p = fmaf(p, f, exp2_poly_coefficient(kDegree, k));
  // t's bits are those of 1.5 * 2^23 plus j: shifted by 23 only j's bits remain.
  const float scale = __uint_as_float((__float_as_uint(t) << 23) + 0x3f800000u);
  return p * scale;
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
