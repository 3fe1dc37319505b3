// Moving rows between the caller's tensors (fp32, fp16, bf16 or e4m3, any row stride) and
// the fp32 tiles of the kernels. Loads run once per tile pair and are vectorized where the
// ISA can convert (F16C); stores write each output row once and convert with the shared
// round-to-nearest-even helpers of core/numeric.hpp.
#pragma once

#include <type_traits>

#include "cpu/tiled/simd.hpp"

namespace flashattn::cpu::tiled::FA_TILED_ISA {

using core::ElementType;

// The storage type of one element: fp16 and bf16 are raw 16-bit patterns, e4m3 8-bit ones.
template <ElementType Type>
using Storage = std::conditional_t<
    Type == ElementType::kF32, float,
    std::conditional_t<Type == ElementType::kF8E4M3, uint8_t, uint16_t>>;

// The element types of one call's operands. Equal for fp32, fp16 and bf16 calls; FP8 calls
// read e4m3 queries, keys and values (the forward) or e4m3 keys and values (a KV cache),
// and write the output in a 16-bit (or fp32) type.
template <ElementType Q, ElementType KV = Q, ElementType Out = Q>
struct OperandTypes {
  static constexpr ElementType q = Q, kv = KV, out = Out;
  static constexpr bool uniform = Q == KV && KV == Out;
};

template <ElementType Type>
inline void to_float(const Storage<Type>* src, float* dst, int n) {
  if constexpr (Type == ElementType::kF8E4M3) {
    typedef uint8_t VecB __attribute__((vector_size(kLanes)));
    int i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      VecB bytes;
      std::memcpy(&bytes, src + i, sizeof bytes);
      store(dst + i, e4m3_values(__builtin_convertvector(bytes, VecU)));
    }
    for (; i < n; ++i) dst[i] = core::e4m3_to_float(src[i]);
  } else if constexpr (Type == ElementType::kF32) {
    std::memcpy(dst, src, sizeof(float) * n);
  } else if constexpr (Type == ElementType::kBF16) {
    int i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      VecH half;
      std::memcpy(&half, src + i, sizeof half);
      store(dst + i, (VecF)(__builtin_convertvector(half, VecU) << 16));
    }
    for (; i < n; ++i) dst[i] = core::bf16_to_float(src[i]);
  } else {
    int i = 0;
#if FA_TILED_LANES >= 8 && !FA_TILED_EMULATED  // F16C is part of the AVX2 and AVX-512 builds
    for (; i + 8 <= n; i += 8) {
      __m128i half;
      std::memcpy(&half, src + i, sizeof half);
      const __m256 full = _mm256_cvtph_ps(half);
      std::memcpy(dst + i, &full, sizeof full);
    }
#endif
    for (; i < n; ++i) dst[i] = core::fp16_to_float(src[i]);
  }
}

template <ElementType Type>
inline void from_float(const float* src, Storage<Type>* dst, int n) {
  static_assert(Type != ElementType::kF8E4M3, "outputs are never e4m3");
  if constexpr (Type == ElementType::kF32) {
    std::memcpy(dst, src, sizeof(float) * n);
  } else if constexpr (Type == ElementType::kBF16) {
    int i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      const VecH half = __builtin_convertvector(bf16_bits(load(src + i)), VecH);
      std::memcpy(dst + i, &half, sizeof half);
    }
    for (; i < n; ++i) dst[i] = core::float_to_bf16(src[i]);
  } else {
    for (int i = 0; i < n; ++i) dst[i] = core::float_to_fp16(src[i]);
  }
}

// dst[r * ld + c] = row r, element c, converted; columns cols .. padded_cols are zeroed
// so a padded tile can serve as the B operand of gemm().
template <ElementType Type, typename RowPointer>
void pack_rows(RowPointer row_pointer, int rows, int cols, int padded_cols, float* dst,
               int64_t ld) {
  for (int r = 0; r < rows; ++r) {
    float* out = dst + r * ld;
    to_float<Type>(row_pointer(r), out, cols);
    for (int c = cols; c < padded_cols; ++c) out[c] = 0.f;
  }
}

// Asks the memory system for rows row_pointer(0 .. rows-1) of `cols` elements.
template <ElementType Type, typename RowPointer>
void prefetch_rows(RowPointer row_pointer, int rows, int cols) {
  const size_t bytes = static_cast<size_t>(cols) * sizeof(Storage<Type>);
  for (int r = 0; r < rows; ++r) {
    const char* row = reinterpret_cast<const char*>(row_pointer(r));
    for (size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(row + offset);
  }
}

// dst[c * ldd + r] = factor * src[r * lds + c] for r < rows, c < cols; the columns
// rows .. padded_rows of dst are zeroed (they are the padding query columns of a score
// tile).
inline void transpose(const float* src, int64_t lds, int rows, int cols, int padded_rows,
                      float* dst, int64_t ldd, float factor = 1.f) {
  for (int r = 0; r < rows; ++r) {
    const float* in = src + r * lds;
    for (int c = 0; c < cols; ++c) dst[c * ldd + r] = factor * in[c];
  }
  for (int c = 0; c < cols; ++c) {
    for (int r = rows; r < padded_rows; ++r) dst[c * ldd + r] = 0.f;
  }
}

// Row r of a tile (cols floats at src + r * lds) times factor[r], converted, to
// row_pointer(r).
template <ElementType Type, typename RowPointer>
void store_rows(const float* src, int64_t lds, int rows, int cols, const float* factor,
                RowPointer row_pointer) {
  float scaled[kMaxHeadDim];
  for (int r = 0; r < rows; ++r) {
    const float* in = src + r * lds;
    const float f = factor != nullptr ? factor[r] : 1.f;
    for (int c = 0; c < cols; ++c) scaled[c] = in[c] * f;
    from_float<Type>(scaled, row_pointer(r), cols);
  }
}

// The same from a transposed tile: row r of the output is column r of src (cols rows of
// src, row stride lds).
template <ElementType Type, typename RowPointer>
void store_columns(const float* src, int64_t lds, int rows, int cols, const float* factor,
                   RowPointer row_pointer) {
  float scaled[kMaxHeadDim];
  for (int r = 0; r < rows; ++r) {
    const float f = factor != nullptr ? factor[r] : 1.f;
    for (int c = 0; c < cols; ++c) scaled[c] = src[c * lds + r] * f;
    from_float<Type>(scaled, row_pointer(r), cols);
  }
}

// Rows of `cols` zeros, converted, to row_pointer(r) for r < rows.
template <ElementType Type, typename RowPointer>
void store_zero_rows(int rows, int cols, RowPointer row_pointer) {
  const float zeros[kMaxHeadDim] = {};
  for (int r = 0; r < rows; ++r) from_float<Type>(zeros, row_pointer(r), cols);
}

inline void zero(float* dst, size_t n) { std::memset(dst, 0, sizeof(float) * n); }

// Per-thread scratch carved into 64-byte aligned tiles; with a null base it only counts.
class Carver {
 public:
  explicit Carver(float* base) : base_(base) {}
  float* take(size_t floats) {
    float* tile = base_ != nullptr ? base_ + used_ : nullptr;
    used_ += (floats + 15) / 16 * 16;
    return tile;
  }
  // Tiles of 16- and 32-bit words (bf16 operands), in the same float-counted space.
  uint16_t* take_u16(size_t count) {
    return reinterpret_cast<uint16_t*>(take((count + 1) / 2));
  }
  uint32_t* take_u32(size_t count) { return reinterpret_cast<uint32_t*>(take(count)); }
  size_t used() const { return used_; }

 private:
  float* base_;
  size_t used_ = 0;
};

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
