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

// An A operand from the transpose: dst[c * ld + r] = row(r)[c] for r < rows, c < cols,
// zeros up to padded_cols rows of padded_rows (even; the depth) each. Two source rows at
// a time, so each column gets one 32-bit pair per step. Once per K or V tile.
template <typename RowPointer>
void pack_bf16_columns(RowPointer row, int rows, int cols, int padded_rows, int padded_cols,
                       uint16_t* dst, int64_t ld) {
  for (int r = 0; r < padded_rows; r += 2) {
    for (int c = 0; c < padded_cols; c += kLanes) {
      const VecU low = r < rows ? bf16_lanes(row(r), c, cols) : VecU{};
      const VecU high = r + 1 < rows ? bf16_lanes(row(r + 1), c, cols) : VecU{};
      const VecU words = low | (high << 16);
      for (int i = 0; i < kLanes; ++i) {
        const uint32_t word = words[i];
        std::memcpy(dst + (c + i) * ld + r, &word, sizeof word);
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
      const VecU low = 2 * k < rows ? bf16_lanes(row(2 * k), c, cols) : VecU{};
      const VecU high = 2 * k + 1 < rows ? bf16_lanes(row(2 * k + 1), c, cols) : VecU{};
      const VecU words = low | (high << 16);
      std::memcpy(out + c, &words, sizeof words);
    }
  }
}

// A B operand from the transpose: dst[k * ld + n] = (row(n)[2k], row(n)[2k+1]) for
// n < rows, 2k + 1 < depth; zeros up to padded_depth / 2 x padded_rows. Once per query
// block (Q^T, dO^T).
template <typename RowPointer>
void pack_column_pairs(RowPointer row, int rows, int depth, int padded_rows, int padded_depth,
                       uint32_t* dst, int64_t ld) {
  for (int k = 0; 2 * k < padded_depth; ++k) {
    std::memset(dst + k * ld + rows, 0, sizeof(uint32_t) * (padded_rows - rows));
  }
  for (int n = 0; n < rows; ++n) {
    const auto in = row(n);
    for (int e = 0; e < padded_depth; e += kLanes) {
      const VecU lanes = bf16_lanes(in, e, depth);
      for (int i = 0; i < kLanes / 2; ++i) {
        dst[(e / 2 + i) * ld + n] = lanes[2 * i] | (lanes[2 * i + 1] << 16);
      }
    }
  }
}

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
