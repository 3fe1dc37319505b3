// The online-softmax state of one row and the merge of partial results. Split-KV
// decoding, the tiled CPU backend and the CUDA kernels all combine partial (out, lse)
// pairs through these functions, so an empty part (lse = -inf) is handled in one place.
#pragma once

#include <cmath>

#include "core/platform.hpp"

namespace flashattn::core {

// log(exp(a) + exp(b)) without overflow; -inf when both are -inf, NaN when either is NaN
// (a NaN compares false, so it lands in `hi` or, beside -inf, in `lo`).
FA_HOST_DEVICE float log_add_exp(float a, float b) {
  const float hi = a > b ? a : b;
  const float lo = a > b ? b : a;
  if (hi == -INFINITY) return lo;
  return hi + log1pf(expf(lo - hi));
}

// The weight of a part with log-sum-exp `part_lse` in a merged row with `total_lse`:
// exp(part_lse - total_lse), and 0 for an empty part or an empty merged row.
FA_HOST_DEVICE float merge_weight(float part_lse, float total_lse) {
  if (part_lse == -INFINITY || total_lse == -INFINITY) return 0.f;
  return expf(part_lse - total_lse);
}

// Running max and sum of exp(score - max) over the keys seen so far.
struct SoftmaxRow {
  float max = -INFINITY;
  float sum = 0.f;

  // Folds in a block whose scores have maximum `block_max`; returns the factor by which
  // the accumulated output must be scaled (1 when nothing was seen before).
  FA_HOST_DEVICE float rescale_to(float block_max) {
    const float new_max = block_max > max ? block_max : max;
    const float factor = (max == -INFINITY) ? 0.f : expf(max - new_max);
    sum *= factor;
    max = new_max;
    return factor;
  }
  // exp(score - max) for a score of the current block; 0 for masked (-inf) scores.
  FA_HOST_DEVICE float weight(float score) const {
    return max == -INFINITY ? 0.f : expf(score - max);
  }
  // 1 / sum, and 0 for a row that saw no visible key (its output is 0, not NaN). A NaN
  // score makes the sum NaN, and the NaN goes on into the output and the lse (SPEC: it
  // propagates through the keys the row sees); only a sum of exactly 0 means no key.
  FA_HOST_DEVICE float inverse_sum() const { return sum == 0.f ? 0.f : 1.f / sum; }
  FA_HOST_DEVICE float lse() const { return sum == 0.f ? -INFINITY : max + logf(sum); }
};

}  // namespace flashattn::core
