// Conversions between fp32 and the 16- and 8-bit storage types (round to nearest even), and
// typed element access for the CPU backends. The e4m3 encoding and the appended value are
// host and device functions: the CUDA append quantizes with them, so an FP8 cache holds the
// same bytes whichever backend wrote it.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/params.hpp"
#include "core/platform.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::core {

// The storage type of a public floating-point dtype (kI32 has none; it maps to kF32).
inline ElementType element_type(DType dtype) {
  switch (dtype) {
    case DType::kF16: return ElementType::kF16;
    case DType::kBF16: return ElementType::kBF16;
    case DType::kF8E4M3: return ElementType::kF8E4M3;
    default: return ElementType::kF32;
  }
}

FA_HOST_DEVICE float bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

FA_HOST_DEVICE uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}

inline float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t bits = float_to_bits(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return bits_to_float(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return bits_to_float(sign);
  // Subnormal: normalize.
  int e = 113;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  return bits_to_float(sign | (static_cast<uint32_t>(e) << 23) | ((mantissa & 0x3FFu) << 13));
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t bits = float_to_bits(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);  // NaN
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in fp16
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // in [14, 24]: value / 2^-24 = mantissa >> shift
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

// FP8 e4m3 ("fn"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, S.1111.111
// is NaN, the largest finite value 448, the smallest subnormal 2^-9.
inline float e4m3_to_float(uint8_t x) {
  const uint32_t sign = static_cast<uint32_t>(x & 0x80u) << 24;
  const uint32_t exponent = (x >> 3) & 0xFu;
  const uint32_t mantissa = x & 0x7u;
  if (exponent == 0xF && mantissa == 0x7) return bits_to_float(sign | 0x7FC00000u);
  if (exponent != 0) return bits_to_float(sign | ((exponent + 120) << 23) | (mantissa << 20));
  // Subnormal: mantissa * 2^-9, exact in fp32.
  const float magnitude = static_cast<float>(mantissa) * (1.f / 512.f);
  return bits_to_float(sign | float_to_bits(magnitude));
}

// Round to nearest even. Finite values past the largest saturate to +-448 (as CUDA's
// satfinite conversion and vLLM's cache writes do, so one large key does not turn into a
// NaN); NaN and +-inf become NaN (e4m3 has no infinity, and a non-finite input must stay
// non-finite).
FA_HOST_DEVICE uint8_t float_to_e4m3(float f) {
  const uint32_t bits = float_to_bits(f);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);  // NaN, inf
  if (abs >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7Eu);  // >= 448: saturate
  if (abs < 0x3C800000u) {  // below 2^-6: subnormal (or zero) in e4m3, in units of 2^-9
    const float units = bits_to_float(abs) * 512.f;  // exact: a power-of-two scaling
    uint32_t n = static_cast<uint32_t>(units);
    const float rest = units - static_cast<float>(n);
    if (rest > 0.5f || (rest == 0.5f && (n & 1u))) ++n;
    return static_cast<uint8_t>(sign | n);  // n == 8 is the smallest normal, 2^-6
  }
  // Normal: keep 3 of the 23 mantissa bits, rounding the other 20 to nearest even.
  uint32_t kept = ((abs >> 23) - 120) << 3 | ((abs >> 20) & 0x7u);
  const uint32_t rest = abs & 0xFFFFFu;
  if (rest > 0x80000u || (rest == 0x80000u && (kept & 1u))) ++kept;
  if (kept > 0x7Eu) kept = 0x7Eu;  // rounding past 448 saturates too
  return static_cast<uint8_t>(sign | kept);
}

// What a cache slot receives for an appended value before rounding to the cache's type:
// an e4m3 cache stores value / descale (docs/contract.md, "FP8"), other caches the value.
// Shared by the backends so their caches agree bit for bit.
FA_HOST_DEVICE float appended_value(float value, bool e4m3_cache, float descale) {
  return e4m3_cache ? value / descale : value;
}

inline float load_element(const void* base, int64_t index, ElementType type) {
  switch (type) {
    case ElementType::kF32: return static_cast<const float*>(base)[index];
    case ElementType::kF16: return fp16_to_float(static_cast<const uint16_t*>(base)[index]);
    case ElementType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    case ElementType::kF8E4M3: return e4m3_to_float(static_cast<const uint8_t*>(base)[index]);
  }
  return 0.f;
}

inline void store_element(void* base, int64_t index, ElementType type, float value) {
  switch (type) {
    case ElementType::kF32: static_cast<float*>(base)[index] = value; return;
    case ElementType::kF16: static_cast<uint16_t*>(base)[index] = float_to_fp16(value); return;
    case ElementType::kBF16: static_cast<uint16_t*>(base)[index] = float_to_bf16(value); return;
    case ElementType::kF8E4M3: static_cast<uint8_t*>(base)[index] = float_to_e4m3(value); return;
  }
}

// The value `x` takes after a round trip through `type` (fp32 is exact).
inline float round_to(float x, ElementType type) {
  switch (type) {
    case ElementType::kF32: return x;
    case ElementType::kF16: return fp16_to_float(float_to_fp16(x));
    case ElementType::kBF16: return bf16_to_float(float_to_bf16(x));
    case ElementType::kF8E4M3: return e4m3_to_float(float_to_e4m3(x));
  }
  return x;
}

}  // namespace flashattn::core
