// The operands of the bf16 tile products (gemm_bf16.hpp) and how tiles are packed into
// them. The hardware multiplies bf16 pairs along the depth into an fp32 sum:
//   A: bf16, row-major, the depth contiguous, so a pair (a[m][2k], a[m][2k+1]) is one
//      32-bit word;
//   B: "pairs", 32-bit words b[k][n] = (B[2k][n], B[2k+1][n]), the low half first, so a
//      row of words is one vector of (depth pair, column) products.
// Depths are padded with zeros to kBf16Depth (an AMX tile row is 32 bf16) and the rows of
// A and C to kBf16Rows (an AMX tile has 16 rows); the AVX512-BF16 build pads the same way,
// so both builds run the same packing code. Values are rounded to nearest even (NaN stays
// NaN), as core::float_to_bf16; bf16 inputs pass through unchanged.
#pragma once

#include "cpu/tiled/tile_io.hpp"

// The bf16 products of the build (gemm_bf16.hpp).
#define FA_TILED_BF16_NONE 0
#define FA_TILED_BF16_DOT 1
#define FA_TILED_BF16_AMX 2
#ifndef FA_TILED_BF16
#define FA_TILED_BF16 FA_TILED_BF16_NONE
#endif

namespace flashattn::cpu::tiled::FA_TILED_ISA {

constexpr int kBf16Depth = 32;
constexpr int kBf16Rows = 16;

inline int round_up(int n, int multiple) { return (n + multiple - 1) / multiple * multiple; }

// Columns [c, c + kLanes) of a row (fp32 tile or bf16 input) as bf16 bits; columns at or
// past `cols` read as 0.
inline VecU bf16_lanes(const float* row, int c, int cols) {
  if (c + kLanes <= cols) return bf16_bits(load(row + c));
  float part[kLanes] = {};
  for (int i = 0; i < kLanes && c + i < cols; ++i) part[i] = row[c + i];
  return bf16_bits(load(part));
}
inline VecU bf16_lanes(const uint16_t* row, int c, int cols) {
  VecH half{};
  if (c + kLanes <= cols) {
    std::memcpy(&half, row + c, sizeof half);
  } else {
    for (int i = 0; i < kLanes && c + i < cols; ++i) half[i] = row[c + i];
  }
  return __builtin_convertvector(half, VecU);
}

// An A operand: dst[r * ld + c] = row(r)[c] for r < rows, c < cols, zeros up to
// padded_rows x padded_cols (padded_cols a multiple of kLanes).
template <typename RowPointer>
void pack_bf16_rows(RowPointer row, int rows, int cols, int padded_rows, int padded_cols,
                    uint16_t* dst, int64_t ld) {
  for (int r = 0; r < padded_rows; ++r) {
    uint16_t* out = dst + r * ld;
    for (int c = 0; c < padded_cols; c += kLanes) {
      const VecH bits = r < rows ? __builtin_convertvector(bf16_lanes(row(r), c, cols), VecH)
                                 : VecH{};
      std::memcpy(out + c, &bits, sizeof bits);
    }
  }
}

// kLanes x kLanes 32-bit words transposed in registers: block[i][l] becomes block[l][i].
// log2(kLanes) stages; the stage of width B swaps the off-diagonal B x B blocks of every
// 2B x 2B block, two two-source shuffles per pair of rows.
template <int B, size_t... L>
inline VecU take_low_blocks(VecU a, VecU b, std::index_sequence<L...>) {
  return __builtin_shufflevector(a, b, ((L & B) ? kLanes + L - B : L)...);
}
template <int B, size_t... L>
inline VecU take_high_blocks(VecU a, VecU b, std::index_sequence<L...>) {
  return __builtin_shufflevector(a, b, ((L & B) ? kLanes + L : L + B)...);
}
template <int B>
inline void transpose_stage(VecU* block) {
  constexpr auto lanes = std::make_index_sequence<kLanes>{};
#pragma GCC unroll 16
  for (int i = 0; i < kLanes; ++i) {
    if (i & B) continue;
    const VecU low = take_low_blocks<B>(block[i], block[i + B], lanes);
    const VecU high = take_high_blocks<B>(block[i], block[i + B], lanes);
    block[i] = low;
    block[i + B] = high;
  }
}
inline void transpose_words(VecU* block) {
  transpose_stage<1>(block);
  transpose_stage<2>(block);
  if constexpr (kLanes >= 8) transpose_stage<4>(block);
  if constexpr (kLanes >= 16) transpose_stage<8>(block);
}

// A bf16 word pair of each column of two rows: the low half from `low`, the high from `high`
// (both bf16 bits in the low halves of their lanes).
inline VecU word_pairs(VecU low, VecU high) { return low | (high << 16); }

// The pairs of consecutive elements of a row: word i = (x[2i], x[2i + 1]), x the
// concatenation of `first` and `second` (bf16 bits in the low halves of their lanes).
template <size_t... L>
inline VecU element_pairs(VecU first, VecU second, std::index_sequence<L...>) {
  const VecU even = __builtin_shufflevector(first, second, (2 * L)...);
  const VecU odd = __builtin_shufflevector(first, second, (2 * L + 1)...);
  return word_pairs(even, odd);
}

// Computed values (P, dS) rounded to bf16 for a product, as bf16_bits, except that where
// the build has AVX512-BF16 its conversion instruction does it, which also flushes
// denormals to zero: harmless for a probability or a gradient term, so never used for
// the inputs, whose values must pass unchanged.
#if FA_TILED_BF16 != FA_TILED_BF16_NONE && !FA_TILED_EMULATED
inline VecH computed_bf16(VecF x) {
  const __m256bh rounded = _mm512_cvtneps_pbh((__m512)x);
  VecH bits;
  std::memcpy(&bits, &rounded, sizeof bits);
  return bits;
}
// The same in the low halves of 32-bit lanes (the zero-masked form of the widening: the
// plain one starts from an undefined vector, which GCC warns about).
inline VecU computed_bf16_bits(VecF x) {
  return (VecU)_mm512_maskz_cvtepu16_epi32(0xFFFF, (__m256i)_mm512_cvtneps_pbh((__m512)x));
}
#else
inline VecU computed_bf16_bits(VecF x) { return bf16_bits(x); }
inline VecH computed_bf16(VecF x) { return __builtin_convertvector(bf16_bits(x), VecH); }
#endif

// word_pairs of two vectors of computed values.
inline VecU computed_word_pairs(VecF low, VecF high) {
  return word_pairs(computed_bf16_bits(low), computed_bf16_bits(high));
}

// Pair rows and output rows come kLanes at a time.
static_assert(kBf16Depth / 2 % kLanes == 0, "a padded depth holds whole blocks of words");

// An A operand from the transpose: dst[c * ld + r] = row(r)[c] for r < rows, c < cols,
// zeros up to padded_cols rows of padded_rows (a multiple of kBf16Depth; the depth) each.
// Two source rows make a row of 32-bit words, kLanes such rows a block that is transposed
// in registers. Once per K or V tile.
template <typename RowPointer>
void pack_bf16_columns(RowPointer row, int rows, int cols, int padded_rows, int padded_cols,
                       uint16_t* dst, int64_t ld) {
  for (int k0 = 0; 2 * k0 < padded_rows; k0 += kLanes) {
    for (int c0 = 0; c0 < padded_cols; c0 += kLanes) {
      VecU block[kLanes];
      for (int i = 0; i < kLanes; ++i) {
        const int r = 2 * (k0 + i);
        block[i] = word_pairs(r < rows ? bf16_lanes(row(r), c0, cols) : VecU{},
                              r + 1 < rows ? bf16_lanes(row(r + 1), c0, cols) : VecU{});
      }
      transpose_words(block);
      for (int i = 0; i < kLanes; ++i) {
        std::memcpy(dst + (c0 + i) * ld + 2 * k0, &block[i], sizeof block[i]);
      }
    }
  }
}

// A B operand from consecutive rows: dst[k * ld + c] = (row(2k)[c], row(2k+1)[c]) for
// rows < `rows`, c < cols; zeros up to padded_rows / 2 x padded_cols (multiple of kLanes).
template <typename RowPointer>
void pack_row_pairs(RowPointer row, int rows, int cols, int padded_rows, int padded_cols,
                    uint32_t* dst, int64_t ld) {
  for (int k = 0; 2 * k < padded_rows; ++k) {
    uint32_t* out = dst + k * ld;
    for (int c = 0; c < padded_cols; c += kLanes) {
      const VecU words = word_pairs(2 * k < rows ? bf16_lanes(row(2 * k), c, cols) : VecU{},
                                    2 * k + 1 < rows ? bf16_lanes(row(2 * k + 1), c, cols)
                                                     : VecU{});
      std::memcpy(out + c, &words, sizeof words);
    }
  }
}

// A B operand from the transpose: dst[k * ld + n] = (row(n)[2k], row(n)[2k+1]) for
// n < rows, 2k + 1 < depth; zeros up to padded_depth / 2 x padded_rows (padded_depth a
// multiple of kBf16Depth, padded_rows of kLanes). Blocks of kLanes rows of words are
// transposed in registers, as in pack_bf16_columns. Once per query block (Q^T, dO^T).
template <typename RowPointer>
void pack_column_pairs(RowPointer row, int rows, int depth, int padded_rows, int padded_depth,
                       uint32_t* dst, int64_t ld) {
  constexpr auto lanes = std::make_index_sequence<kLanes>{};
  for (int n0 = 0; n0 < padded_rows; n0 += kLanes) {
    for (int k0 = 0; 2 * k0 < padded_depth; k0 += kLanes) {
      VecU block[kLanes];
      for (int i = 0; i < kLanes; ++i) {
        if (n0 + i >= rows) {
          block[i] = VecU{};
          continue;
        }
        const auto in = row(n0 + i);
        block[i] = element_pairs(bf16_lanes(in, 2 * k0, depth),
                                 bf16_lanes(in, 2 * k0 + kLanes, depth), lanes);
      }
      transpose_words(block);
      for (int i = 0; i < kLanes; ++i) {
        std::memcpy(dst + (k0 + i) * ld + n0, &block[i], sizeof block[i]);
      }
    }
  }
}

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
