// Host-side conversions between fp32 and the 16-bit storage types (round to nearest
// even), and typed element access for the CPU backends.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::core {

// The storage type of a public floating-point dtype (kI32 has none; it maps to kF32).
inline ElementType element_type(DType dtype) {
  switch (dtype) {
    case DType::kF16: return ElementType::kF16;
    case DType::kBF16: return ElementType::kBF16;
    default: return ElementType::kF32;
  }
}

inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
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

inline float load_element(const void* base, int64_t index, ElementType type) {
  switch (type) {
    case ElementType::kF32: return static_cast<const float*>(base)[index];
    case ElementType::kF16: return fp16_to_float(static_cast<const uint16_t*>(base)[index]);
    case ElementType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
  }
  return 0.f;
}

inline void store_element(void* base, int64_t index, ElementType type, float value) {
  switch (type) {
    case ElementType::kF32: static_cast<float*>(base)[index] = value; return;
    case ElementType::kF16: static_cast<uint16_t*>(base)[index] = float_to_fp16(value); return;
    case ElementType::kBF16: static_cast<uint16_t*>(base)[index] = float_to_bf16(value); return;
  }
}

// The value `x` takes after a round trip through `type` (fp32 is exact).
inline float round_to(float x, ElementType type) {
  switch (type) {
    case ElementType::kF32: return x;
    case ElementType::kF16: return fp16_to_float(float_to_fp16(x));
    case ElementType::kBF16: return bf16_to_float(float_to_bf16(x));
  }
  return x;
}

}  // namespace flashattn::core
