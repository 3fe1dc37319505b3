// Keeping a NaN or an infinity away from the rows that cannot see it (SPEC: a key a row
// cannot see takes no part in that row). A tile product multiplies every query row of a
// block by every key of a tile, and a masked pair is an exact 0 there, but 0 * NaN and
// 0 * inf are NaN: one NaN in V would reach every row of the block. So, in the rare tiles
// where a product's B operand holds a non-finite value and the block is not fully visible,
// the non-finite entries are set aside (0 takes their place in the tile), the product runs
// as usual, and each set-aside entry is then added to exactly the rows that see it.
//
// The finite entries go through the same product as before, so a tile without a
// non-finite value gives the same bits as without this file; a sum that includes a NaN or
// an infinity does not depend on the order of its terms (NaN, or the one infinity), so the
// late additions change nothing a row that sees the value would otherwise get.
#pragma once

#include "cpu/tiled/simd.hpp"

namespace flashattn::cpu::tiled::FA_TILED_ISA {

// Whether rows x cols of the tile (row stride ld) hold a NaN or an infinity: x - x is 0
// for every finite x and NaN otherwise.
inline bool has_nonfinite(const float* tile, int64_t ld, int rows, int cols) {
  const int vector_cols = cols / kLanes * kLanes;
  VecF lanes{};
  float rest = 0.f;
  for (int r = 0; r < rows; ++r) {
    const float* row = tile + r * ld;
    for (int c = 0; c < vector_cols; c += kLanes) {
      const VecF x = load(row + c);
      lanes += x - x;
    }
    for (int c = vector_cols; c < cols; ++c) rest += row[c] - row[c];
  }
  for (int l = 0; l < kLanes; ++l) rest += lanes[l];
  return rest != 0.f;
}

// Copies rows x cols of `tile` into `aside` (same row stride) and puts 0 in the tile
// wherever the value is not finite.
inline void set_aside_nonfinite(float* tile, int64_t ld, int rows, int cols, float* aside) {
  for (int r = 0; r < rows; ++r) {
    float* row = tile + r * ld;
    float* saved = aside + r * ld;
    for (int c = 0; c < cols; ++c) {
      saved[c] = row[c];
      if (!std::isfinite(row[c])) row[c] = 0.f;
    }
  }
}

// Puts the non-finite values set aside back into the tile.
inline void restore_nonfinite(float* tile, int64_t ld, int rows, int cols, const float* aside) {
  for (int r = 0; r < rows; ++r) {
    float* row = tile + r * ld;
    const float* saved = aside + r * ld;
    for (int c = 0; c < cols; ++c) {
      if (!std::isfinite(saved[c])) row[c] = saved[c];
    }
  }
}

// The terms the product C += A * B left out: add(m, n, weight(m, k) * aside[k][n]) for
// every non-finite aside[k][n] (k < depth, n < cols) and every output row m < rows with
// sees(m, k). `add` puts the term into C, whatever C's layout.
template <typename Weight, typename Sees, typename Add>
void add_set_aside(int rows, int depth, int cols, const float* aside, int64_t ld_aside,
                   Weight weight, Sees sees, Add add) {
  for (int k = 0; k < depth; ++k) {
    const float* b = aside + k * ld_aside;
    for (int n = 0; n < cols; ++n) {
      if (std::isfinite(b[n])) continue;
      for (int m = 0; m < rows; ++m) {
        if (sees(m, k)) add(m, n, weight(m, k) * b[n]);
      }
    }
  }
}

// Whether query row `row` of the rule sees key `key`.
inline bool row_sees(const ScoreRule& rule, int row, int key) {
  const core::KeyRange visible = rule.visible(row);
  return visible.begin <= key && key < visible.end;
}

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
