// core/mask.hpp's two spellings of the one visibility rule agree: key_visible (from the row,
// as the forward kernels and the CPU backends use it) and key_visible_at_distance (from the
// key's distance to the row's diagonal, as the backward kernels use it), over every row and
// key of small problems with every kind of window.
#include <gtest/gtest.h>

#include "core/mask.hpp"

namespace {

using flashattn::core::key_visible;
using flashattn::core::key_visible_at_distance;

TEST(MaskRule, DistanceFormAgreesWithTheRowForm) {
  const int windows[] = {-1, 0, 1, 3, 17};
  for (int seqlen_q : {1, 5, 16, 33}) {
    for (int seqlen_k : {1, 4, 16, 40}) {
      for (int left : windows) {
        for (int right : windows) {
          for (int row = 0; row < seqlen_q; ++row) {
            // Keys past seqlen_k too: a tile's last block runs past the sequence.
            for (int col = 0; col < seqlen_k + 8; ++col) {
              const int distance = row + seqlen_k - seqlen_q - col;
              ASSERT_EQ(key_visible_at_distance(distance, col, seqlen_k, left, right),
                        key_visible(row, col, seqlen_q, seqlen_k, left, right))
                  << "seqlen_q " << seqlen_q << " seqlen_k " << seqlen_k << " window (" << left
                  << ", " << right << ") row " << row << " col " << col;
            }
          }
        }
      }
    }
  }
}

}  // namespace
