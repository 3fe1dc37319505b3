// The vector type of one ISA build and the few operations the kernels use, on GCC/Clang
// vector extensions. The including translation unit defines
//   FA_TILED_ISA       the namespace of this build (generic, avx2, avx512, ...)
//   FA_TILED_LANES     floats per vector (4, 8, 16)
//   FA_TILED_EMULATED  1 in the test builds that run a wide ISA's code on any CPU: the
//                      same vector widths in portable code, no intrinsics (default 0)
// and compiles this inside a target region for that ISA. Everything here lives in the
// ISA's namespace, so the builds never share a symbol.
#pragma once

#include "cpu/tiled/isa_prelude.hpp"

#ifndef FA_TILED_EMULATED
#define FA_TILED_EMULATED 0
#endif

namespace flashattn::cpu::tiled::FA_TILED_ISA {

constexpr int kLanes = FA_TILED_LANES;
typedef float VecF __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t VecI __attribute__((vector_size(kLanes * sizeof(int32_t))));

// bf16 bit patterns: 32-bit lanes (the pattern in the low half) and 16-bit ones.
typedef uint32_t VecU __attribute__((vector_size(kLanes * sizeof(uint32_t))));
typedef uint16_t VecH __attribute__((vector_size(kLanes * sizeof(uint16_t))));

inline int round_up_lanes(int n) { return (n + kLanes - 1) / kLanes * kLanes; }

inline VecF load(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, VecF v) { std::memcpy(p, &v, sizeof v); }
// x - 0 is x for every x (signed zeros included), so this folds into one broadcast.
inline VecF splat(float x) { return x - VecF{}; }
inline VecI splat_int(int32_t x) { return x - VecI{}; }
inline VecU splat_u(uint32_t x) { return x - VecU{}; }

// The bf16 of each lane, in the low half: round to nearest even, NaN stays a (quiet)
// NaN, bit for bit as core::float_to_bf16.
inline VecU bf16_bits(VecF x) {
  const VecU bits = (VecU)x;
  const VecU rounded = (bits + splat_u(0x7FFFu) + ((bits >> 16) & splat_u(1u))) >> 16;
  const VecU quiet_nan = (bits >> 16) | splat_u(0x40u);
  return (bits & splat_u(0x7FFFFFFFu)) > splat_u(0x7F800000u) ? quiet_nan : rounded;
}

// The fp32 value of e4m3 bit patterns (one per 32-bit lane), bit for bit as
// core::e4m3_to_float: a normal value moves its exponent and mantissa into place and
// rebiases (7 -> 127); a subnormal (exponent 0) is mantissa * 2^-9, exact in fp32;
// S.1111.111 is NaN.
inline VecF e4m3_values(VecU x) {
  const VecU magnitude = x & splat_u(0x7Fu);
  const VecU normal = (magnitude << 20) + splat_u(120u << 23);
  const VecU subnormal = (VecU)(__builtin_convertvector(magnitude, VecF) * splat(1.f / 512.f));
  VecU bits = magnitude < splat_u(8u) ? subnormal : normal;
  bits = magnitude == splat_u(0x7Fu) ? splat_u(0x7FC00000u) : bits;
  return (VecF)(bits | ((x & splat_u(0x80u)) << 24));
}

inline VecF fma(VecF a, VecF b, VecF c) {
#if FA_TILED_LANES == 16 && !FA_TILED_EMULATED
  return _mm512_fmadd_ps(a, b, c);
#elif FA_TILED_LANES == 8 && !FA_TILED_EMULATED
  return _mm256_fmadd_ps(a, b, c);
#else
  return a * b + c;
#endif
}

// The scalar counterpart of fma(): fused exactly when the vector one is.
inline float fma_scalar(float a, float b, float c) {
#if FA_TILED_LANES >= 8 && !FA_TILED_EMULATED
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

// NaN in `candidate` never wins, so a row max ignores NaN scores (they reach the output
// through exp instead).
inline VecF max_ignoring_nan(VecF current, VecF candidate) {
  return candidate > current ? candidate : current;
}

inline VecF abs(VecF x) { return (VecF)((VecI)x & splat_int(0x7FFFFFFF)); }

// 0, 1, ..., kLanes - 1.
inline VecI lane_index() {
  VecI v{};
  for (int i = 0; i < kLanes; ++i) v[i] = i;
  return v;
}

// exp(x) for x <= 0, -inf and NaN (every caller passes a difference to a maximum, or
// -2|y|), to about 1 ulp: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so n * ln2
// is exact), exp(r) by its Taylor polynomial to r^7 (truncation below 1e-8 relative), 2^n
// through the exponent bits. Below -87 the result is exactly 0, so masked scores (-inf)
// weigh nothing; NaN propagates through the arithmetic.
inline VecF exp_nonpositive(VecF x) {
  constexpr float kLow = -87.f;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693145751953125f;  // 16 significant bits
  constexpr float kLn2Low = 1.42860682030941723212e-6f;
  constexpr float kRoundMagic = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const VecF low = splat(kLow);
  const VecF clamped = x < low ? low : x;
  const VecF shifted = fma(clamped, splat(kLog2e), splat(kRoundMagic));
  const VecF n = shifted - splat(kRoundMagic);
  VecF r = fma(n, splat(-kLn2High), clamped);
  r = fma(n, splat(-kLn2Low), r);
  VecF poly = splat(1.f / 5040.f);
  poly = fma(poly, r, splat(1.f / 720.f));
  poly = fma(poly, r, splat(1.f / 120.f));
  poly = fma(poly, r, splat(1.f / 24.f));
  poly = fma(poly, r, splat(1.f / 6.f));
  poly = fma(poly, r, splat(0.5f));
  poly = fma(poly, r, splat(1.f));
  poly = fma(poly, r, splat(1.f));
  const VecI exponent = ((VecI)shifted - (VecI)splat(kRoundMagic) + splat_int(127)) << 23;
  const VecF result = poly * (VecF)exponent;
  return x < low ? VecF{} : result;
}

// expm1(z) for z <= 0 with full relative accuracy near 0: the Taylor series to z^10 above
// -0.5 (truncation below 1e-9 relative), exp(z) - 1 below, where exp(z) < 0.61 and the
// subtraction loses nothing.
inline VecF expm1_nonpositive(VecF z) {
  constexpr float kInverseFactorials[] = {1.f / 3628800.f, 1.f / 362880.f, 1.f / 40320.f,
                                          1.f / 5040.f,    1.f / 720.f,    1.f / 120.f,
                                          1.f / 24.f,      1.f / 6.f,      0.5f,
                                          1.f};
  VecF series = splat(kInverseFactorials[0]);
  for (int t = 1; t < 10; ++t) series = fma(series, z, splat(kInverseFactorials[t]));
  const VecF small = series * z;
  const VecF large = exp_nonpositive(z) - splat(1.f);
  return z > splat(-0.5f) ? small : large;
}

// tanh(y) = sign(y) * -e / (2 + e) with e = expm1(-2|y|): no cancellation for small |y|.
inline VecF tanh(VecF y) {
  const VecF e = expm1_nonpositive(splat(-2.f) * abs(y));
  const VecF magnitude = -e / (splat(2.f) + e);
  const VecI sign = (VecI)y & splat_int(static_cast<int32_t>(0x80000000u));
  return (VecF)((VecI)magnitude | sign);
}

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
