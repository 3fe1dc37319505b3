// thread:: the online softmax of the rows one thread holds in its mma accumulators: MT row
// tiles of 16, of which the thread holds rows g and g + 8 (half 0 and 1), with the scores of
// a key block in s[MT][NT][4] and the output in o[MT][DT][4] (layouts in prim/mma.cuh; a
// warpgroup's wgmma accumulator is the same per warp with MT = 1, sm90/wgmma_fragments.cuh).
//
// Scores stay in "raw" units (q.k, or tanh(...) with softcap); `log2_unit` converts them to
// the log2 domain, so p = exp2(s * log2_unit - max * log2_unit) is one FFMA and one ex2.
// The running sum is kept per thread and reduced over the quad once, at the end. A row with
// no visible key keeps max = -inf; it subtracts 0 instead, so its weights are exp2(-inf) = 0
// and its rescale factors 0, never NaN, and finish() gives it out = 0 and lse = -inf.
#pragma once

#include <math_constants.h>

#include "cuda/prim/math.cuh"

namespace flashattn::cuda {

template <int MT>
struct RowSoftmax {
  float max[MT][2];
  float sum[MT][2];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        max[m][h] = -CUDART_INF_F;
        sum[m][h] = 0.f;
      }
    }
  }

  // Folds in one key block: updates the maxima, rescales `o` and the sums, and replaces the
  // scores by their unnormalized weights.
  template <int NT, int DT>
  __device__ __forceinline__ void update(float (&s)[MT][NT][4], float (&o)[MT][DT][4],
                                         float log2_unit) {
    float factor[MT][2];
    fold_block(s, log2_unit, factor);
    rescale(o, factor);
  }

  // update() in two halves, for a kernel whose O is still being accumulated by the tensor
  // cores while it folds in the next block: fold_block updates the maxima and sums and turns
  // the scores into weights, returning the factor each row of O must be scaled by, which
  // rescale() applies once O is complete. log2_offset scales every weight (and so the sums) by
  // 2^log2_offset: a kernel that rounds the weights to a narrow type (e4m3) moves them into its
  // range that way, and takes log2_offset * ln 2 off the lse that finish() returns.
  //
  // kPolyEvery > 0: every kPolyEvery-th weight of a row is computed by exp2_poly<kPolyDegree>
  // (FMA and ALU pipes) instead of the MUFU's ex2, for kernels whose softmax is bound by the
  // MUFU's rate (forward_tuning.hpp says which).
  //
  // kSlack >= 0 (lazy rescaling, the whole warp calls it): a row keeps the maximum it was last
  // rescaled to (max[][]) while no row of the warp sees a block maximum more than kSlack above
  // its own in the log2 domain, so its weights stay below 2^kSlack (times 2^log2_offset); then
  // the factors are all 1 and fold_block returns false: O need not be rescaled. The vote is per
  // warp so that the skip is a uniform branch. kSlack < 0: every block rescales (returns true).
  template <int kPolyEvery = 0, int kPolyDegree = 3, int kSlack = -1, int NT>
  __device__ __forceinline__ bool fold_block(float (&s)[MT][NT][4], float log2_unit,
                                             float (&factor)[MT][2], float log2_offset = 0.f) {
    constexpr int kEvery = kPolyEvery > 0 ? kPolyEvery : 1;
    float block_max[MT][2];
    bool move = kSlack < 0;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float bm = max[m][h];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          bm = fmaxf(bm, fmaxf(s[m][j][2 * h], s[m][j][2 * h + 1]));
        }
        block_max[m][h] = prim::quad::max(bm);
        if constexpr (kSlack >= 0) {
          move |= (block_max[m][h] - max[m][h]) * log2_unit > static_cast<float>(kSlack);
        }
      }
    }
    if constexpr (kSlack >= 0) move = __any_sync(0xffffffffu, move);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float row_sum = sum[m][h];
        if (move) {
          const bool none = block_max[m][h] == -CUDART_INF_F;
          factor[m][h] =
              none ? 0.f : prim::thread::exp2_approx((max[m][h] - block_max[m][h]) * log2_unit);
          max[m][h] = block_max[m][h];
          row_sum *= factor[m][h];
        } else {
          factor[m][h] = 1.f;
        }
        const float shift =
            (max[m][h] == -CUDART_INF_F ? 0.f : max[m][h] * log2_unit) - log2_offset;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float x = fmaf(s[m][j][2 * h + e], log2_unit, -shift);
            const bool poly = kPolyEvery > 0 && (2 * j + e) % kEvery == kEvery - 1;
            const float p = poly ? prim::thread::exp2_poly<kPolyDegree>(x)
                                 : prim::thread::exp2_approx(x);
            s[m][j][2 * h + e] = p;
            row_sum += p;
          }
        }
        sum[m][h] = row_sum;
      }
    }
    return move;
  }

  template <int DT>
  static __device__ __forceinline__ void rescale(float (&o)[MT][DT][4],
                                                 const float (&factor)[MT][2]) {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int d = 0; d < DT; ++d) {
          o[m][d][2 * h] *= factor[m][h];
          o[m][d][2 * h + 1] *= factor[m][h];
        }
      }
    }
  }

  // Normalizes `o` and returns the natural-log lse of each row (score units: `unit` is what
  // converts a raw score to a score) in lse[m][h]; -inf for a row with no visible key.
  template <int DT>
  __device__ __forceinline__ void finish(float (&o)[MT][DT][4], float unit, float (&lse)[MT][2]) {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float total = prim::quad::sum(sum[m][h]);
        const bool empty = total == 0.f;
        const float inv = empty ? 0.f : 1.f / total;
        lse[m][h] = empty ? -CUDART_INF_F : max[m][h] * unit + logf(total);
#pragma unroll
        for (int d = 0; d < DT; ++d) {
          o[m][d][2 * h] *= inv;
          o[m][d][2 * h + 1] *= inv;
        }
      }
    }
  }
};

}  // namespace flashattn::cuda
