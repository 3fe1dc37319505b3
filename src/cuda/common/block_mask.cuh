// The forward's masking policy: which key blocks a block of query rows visits, which of them
// need the per-element mask (a window edge, the causal diagonal or the end of the keys runs
// through them) and the mask itself. Visibility is core::visible_keys, the same function the
// CPU backends use, so the two cannot disagree.
#pragma once

#include <math_constants.h>

#include "core/mask.hpp"

namespace flashattn::cuda {

// Key blocks [begin, end) are visited; [unmasked_begin, unmasked_end) need no mask;
// begin <= unmasked_begin <= unmasked_end <= end.
struct KeyBlocks {
  int begin;
  int unmasked_begin;
  int unmasked_end;
  int end;
};

struct VisibilityMask {
  int seqlen_q;
  int seqlen_k;
  int window_left;
  int window_right;

  __device__ __forceinline__ core::KeyRange keys(int row) const {
    return core::visible_keys(row, seqlen_q, seqlen_k, window_left, window_right);
  }

  // The blocks of `block_n` keys that query rows [m0, m0 + rows) (rows >= 1) visit. Visible
  // ranges only move right as the row grows, so the first row bounds the start of the union
  // and the end of the fully visible part, the last row the other two.
  __device__ __forceinline__ KeyBlocks blocks(int m0, int rows, int block_n) const {
    const core::KeyRange first = keys(m0);
    const core::KeyRange last = keys(m0 + rows - 1);
    KeyBlocks kb;
    kb.begin = first.begin / block_n;
    kb.end = last.end > first.begin ? (last.end + block_n - 1) / block_n : kb.begin;
    int ub = (last.begin + block_n - 1) / block_n;
    int ue = first.end / block_n;
    ub = ub < kb.begin ? kb.begin : (ub > kb.end ? kb.end : ub);
    ue = ue > kb.end ? kb.end : ue;
    if (ue <= ub) ub = ue = kb.end;  // no fully visible block: every visited block is masked
    kb.unmasked_begin = ub;
    kb.unmasked_end = ue;
    return kb;
  }

  // Sets the scores of keys row `row` may not see to -inf. `s[j][e]` holds key
  // col0 + 8 j + (e % 2) of the accumulator row selected by `half` (e / 2 == half).
  template <int NT>
  __device__ __forceinline__ void apply(float (&s)[NT][4], int half, int row, int col0) const {
    const core::KeyRange r = keys(row);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = col0 + 8 * j + e;
        if (col < r.begin || col >= r.end) s[j][2 * half + e] = -CUDART_INF_F;
      }
    }
  }
};

}  // namespace flashattn::cuda
