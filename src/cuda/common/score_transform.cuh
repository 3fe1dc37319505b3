// What happens to a warp's score fragment between S = Q K^T and the online softmax: softcap,
// ALiBi and, on key blocks that need it, the visibility mask. One function for the forward and
// the KV-cache kernels. They differ only in where a fragment row's query index and ALiBi slope
// come from (the forward: consecutive queries of one head; the KV cache: packed rows, each its
// own head), so those are functions of (row tile m, half) passed in by the kernel.
#pragma once

#include <cfloat>

#include "core/params.hpp"
#include "cuda/prim/math.cuh"
#include "cuda/common/block_mask.cuh"

namespace flashattn::cuda {

// Score conversions computed on the host once per call. A raw score is q.k, or with softcap
// tanh(scale q.k / softcap); score = raw * unit, and raw * log2_unit is the score in log2 units.
struct ScoreScales {
  float unit;
  float log2_unit;
  float softcap_pre;  // scale / softcap; 0 without softcap
};

// The conversions of a call (every kernel family's launcher passes them to its kernel).
inline ScoreScales score_scales(const core::AttentionParams& p) {
  constexpr float kLog2e = 1.4426950408889634f;
  ScoreScales sc;
  if (p.scale == 0.f) {
    // Every visible score is 0, softcapped or not: uniform weights. A masked raw score is
    // -inf, and -inf * 0 would be NaN, so the kernels get the smallest normal unit instead:
    // exp2 of any finite raw score times it rounds to exactly 1, as it would at 0.
    sc.unit = FLT_MIN;
    sc.log2_unit = FLT_MIN * kLog2e;
    sc.softcap_pre = 0.f;
  } else if (p.softcap > 0.f) {
    sc.unit = p.softcap;
    sc.log2_unit = p.softcap * kLog2e;
    sc.softcap_pre = p.scale / p.softcap;
  } else {
    sc.unit = p.scale;
    sc.log2_unit = p.scale_log2;
    sc.softcap_pre = 0.f;
  }
  return sc;
}

// The conversions for keys read as stored, k / descale (an e4m3 cache): the descale joins
// the scale (softcap's pre-scale when softcap is on), so the raw score of the stored keys is
// used as is. A product of 0 (a zero descale) makes every visible score 0, which is
// score_scales' case of scale 0. The FP8 forward passes q_descale * k_descale of a tile's
// (batch entry, KV head): its raw scores are q8.k8. Descales are taken to be positive, as
// FlashAttention-3 takes them.
__host__ __device__ __forceinline__ ScoreScales with_key_descale(ScoreScales sc, float descale) {
  if (sc.softcap_pre != 0.f) {
    sc.softcap_pre *= descale;
    if (sc.softcap_pre != 0.f) return sc;
  } else if (sc.unit * descale != 0.f) {
    sc.unit *= descale;
    sc.log2_unit *= descale;
    return sc;
  }
  sc.unit = FLT_MIN;
  sc.log2_unit = FLT_MIN * 1.4426950408889634f;
  sc.softcap_pre = 0.f;
  return sc;
}

// The ALiBi slope of query head h of batch entry b in raw score units (what row_slope returns
// below, and what the backward's element-wise step takes), 0 without ALiBi.
__device__ __forceinline__ float alibi_raw_slope(const core::AttentionParams& p, int b, int h,
                                                 const ScoreScales& sc) {
  return p.alibi_slopes == nullptr ? 0.f : p.alibi_slopes[b * p.alibi_batch_stride + h] / sc.unit;
}

// s[m][j][e] (mma accumulator layout) holds key col0 + 8 j + (e % 2) of fragment row (m, e / 2).
// row_query(m, half) is that row's query index (a row past the last query may return an index
// past it: its results are discarded) and row_slope(m, half) its ALiBi slope in raw units;
// both are read only when needed.
// `Masked` is std::true_type on blocks the mask runs through, std::false_type elsewhere.
template <class Masked, int MT, int NT, class RowQuery, class RowSlope>
__device__ __forceinline__ void transform_scores(Masked, float (&s)[MT][NT][4],
                                                 const ScoreScales& sc, bool alibi,
                                                 const VisibilityMask& mask, int col0,
                                                 RowQuery row_query, RowSlope row_slope) {
  if (sc.softcap_pre != 0.f) {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[m][j][e] = prim::thread::tanh_exp2(s[m][j][e] * sc.softcap_pre);
        }
      }
    }
  }
  if (alibi) {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int diagonal = row_query(m, half) + mask.seqlen_k - mask.seqlen_q;
        const float slope = row_slope(m, half);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float distance = fabsf(static_cast<float>(diagonal - (col0 + 8 * j + e)));
            s[m][j][2 * half + e] -= slope * distance;
          }
        }
      }
    }
  }
  if constexpr (Masked::value) {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int half = 0; half < 2; ++half) mask.apply(s[m], half, row_query(m, half), col0);
    }
  }
}

}  // namespace flashattn::cuda
