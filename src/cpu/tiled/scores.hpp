// The element-wise steps between the two tile products, on key-major score tiles:
// s[j * ld + c] belongs to key key0 + j and query column c, so every per-row quantity
// (running max, lse, D) is a vector along the contiguous dimension. `cols` is the number
// of columns processed (a multiple of kLanes); columns past the used ones are padding
// whose values are never used.
#pragma once

#include "cpu/tiled/bf16_operands.hpp"
#include "cpu/tiled/simd.hpp"

namespace flashattn::cpu::tiled::FA_TILED_ISA {

// The query rows behind the columns of a score tile. Usually consecutive rows of one
// head; a decoding block packs the heads of a GQA group side by side, so rows repeat and
// each column has its head's ALiBi slope.
struct TileColumns {
  int count = 0;    // columns in use
  int row_min = 0;  // their rows lie in [row_min, row_max]
  int row_max = -1;
  const int32_t* row = nullptr;  // row of each column (padded to kLanes); null: row_min + c
  const float* slope = nullptr;  // ALiBi slope of each column; null: the rule's

  static TileColumns consecutive(int row0, int rows) { return {rows, row0, row0 + rows - 1}; }
  int row_of(int c) const { return row != nullptr ? row[c] : row_min + c; }
};

// Whether finish_scores changes scores other than by masking them (softcap, ALiBi): then
// it needs them scaled.
inline bool transforms_scores(const ScoreRule& rule, const TileColumns& columns) {
  return rule.softcap > 0.f || rule.alibi_slope != 0.f || columns.slope != nullptr;
}

// docs/contract.md steps 2-4 on scaled dot products (the kernels fold the scale into Q^T):
// softcap, ALiBi, then -inf outside the window when the block is not fully visible. With
// softcap and a non-null `softcap_grad`, 1 - tanh^2 (the derivative of the cap) is
// written there for the backward. Unscaled scores only need the mask (!transforms_scores).
inline void finish_scores(const ScoreRule& rule, const TileColumns& columns, int cols,
                          int key0, int keys, float* s, int64_t ld, float* softcap_grad) {
  const bool softcap = rule.softcap > 0.f;
  const bool alibi = rule.alibi_slope != 0.f || columns.slope != nullptr;
  const VecF cap = splat(rule.softcap);
  const VecF inverse_cap = splat(softcap ? 1.f / rule.softcap : 0.f);
  const int diagonal_shift = rule.seqlen_k - rule.seqlen_q;
  for (int j = 0; j < keys && (softcap || alibi); ++j) {
    float* row = s + j * ld;
    for (int c = 0; c < cols; c += kLanes) {
      VecF x = load(row + c);
      if (softcap) {
        const VecF t = tanh(x * inverse_cap);
        if (softcap_grad != nullptr) store(softcap_grad + j * ld + c, splat(1.f) - t * t);
        x = cap * t;
      }
      if (alibi) {
        // |i + sk - sq - j| in integers, as the reference, then one rounding to float.
        VecI rows = lane_index() + splat_int(columns.row_min + c);
        if (columns.row != nullptr) std::memcpy(&rows, columns.row + c, sizeof rows);
        VecI distance = rows + splat_int(diagonal_shift - (key0 + j));
        distance = distance < splat_int(0) ? -distance : distance;
        const VecF slope =
            columns.slope != nullptr ? load(columns.slope + c) : splat(rule.alibi_slope);
        x = x - slope * __builtin_convertvector(distance, VecF);
      }
      store(row + c, x);
    }
  }
  const int row_span = columns.row_max - columns.row_min + 1;
  if (rule.block_fully_visible(columns.row_min, row_span, key0, keys)) return;
  for (int c = 0; c < columns.count; ++c) {
    const core::KeyRange visible = rule.visible(columns.row_of(c));
    const int first = std::clamp(visible.begin - key0, 0, keys);
    const int last = std::clamp(visible.end - key0, first, keys);
    for (int j = 0; j < first; ++j) s[j * ld + c] = -INFINITY;
    for (int j = last; j < keys; ++j) s[j * ld + c] = -INFINITY;
  }
}

// The online softmax's step for kLanes columns whose block max is `block_max`: each state's
// max raised to it, factors[l] the rescale of what the state held; returns the max to
// subtract from the block's scores.
inline VecF raise_max(VecF block_max, core::SoftmaxRow* states, float* factors) {
  float subtrahend[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    core::SoftmaxRow& state = states[l];
    // A block that does not raise the max leaves the state as it is (rescale_to would
    // multiply by exp(0) = 1): most blocks, once the first few have been seen.
    factors[l] = block_max[l] <= state.max ? 1.f : state.rescale_to(block_max[l]);
    // A row that has seen only masked keys keeps max = -inf; exp(-inf - 0) = 0.
    subtrahend[l] = state.max == -INFINITY ? 0.f : state.max;
  }
  return load(subtrahend);
}

// FlashAttention-2's online softmax over one key block: folds the block's row maxima into
// `states`, replaces the scores by exp(s - max) and adds their sums. factors[i] is what
// row i of the running output must be multiplied by (core::SoftmaxRow::rescale_to).
inline void softmax_update(float* s, int64_t ld, int keys, int cols, core::SoftmaxRow* states,
                           float* factors) {
  for (int c = 0; c < cols; c += kLanes) {
    VecF block_max = splat(-INFINITY);
    for (int j = 0; j < keys; ++j) block_max = max_ignoring_nan(block_max, load(s + j * ld + c));
    const VecF row_max = raise_max(block_max, states + c, factors + c);
    VecF sum{};
    for (int j = 0; j < keys; ++j) {
      const VecF p = exp_nonpositive(load(s + j * ld + c) - row_max);
      store(s + j * ld + c, p);
      sum += p;
    }
    for (int l = 0; l < kLanes; ++l) states[c + l].sum += sum[l];
  }
}

// softmax_update for the bf16 products, with two passes over the tile fewer: the scores
// are multiplied by `scale` on the way (1 when they are scaled already; scale > 0, so the
// largest scaled score is the scaled largest score), and P goes straight into the row
// pairs of the P V product, pairs[k * ld_pairs + c] = (P[2k][c], P[2k+1][c]) in bf16
// (bf16_operands.hpp), zero from key `keys` up to `depth`. With a non-null `p`, P is also
// stored there in fp32 (row stride ld), for the terms of a set-aside V. The sums add the
// fp32 P key by key, as softmax_update.
inline void softmax_update_pairs(const float* s, int64_t ld, int keys, int depth, int cols,
                                 float scale, core::SoftmaxRow* states, float* factors,
                                 uint32_t* pairs, int64_t ld_pairs, float* p) {
  const VecF factor = splat(scale);
  for (int c = 0; c < cols; c += kLanes) {
    VecF block_max = splat(-INFINITY);
    for (int j = 0; j < keys; ++j) block_max = max_ignoring_nan(block_max, load(s + j * ld + c));
    block_max = block_max * factor;
    const VecF row_max = raise_max(block_max, states + c, factors + c);
    VecF sum{};
    const auto probability = [&](int j) {
      const VecF value = exp_nonpositive(load(s + j * ld + c) * factor - row_max);
      if (p != nullptr) store(p + j * ld + c, value);
      sum += value;
      return value;
    };
    for (int j = 0; j < depth; j += 2) {
      VecU words{};
      if (j + 1 < keys) {
        const VecF low = probability(j);
        words = computed_word_pairs(low, probability(j + 1));
      } else if (j < keys) {
        words = computed_bf16_bits(probability(j));
      }
      std::memcpy(pairs + (j / 2) * ld_pairs + c, &words, sizeof words);
    }
    for (int l = 0; l < kLanes; ++l) states[c + l].sum += sum[l];
  }
}

// Backward: p = exp(s - lse) in place; lse_or_inf holds +inf for rows without a visible
// key (and for padding), which makes their p exactly 0.
inline void probabilities_from_lse(float* s, int64_t ld, int keys, int cols,
                                   const float* lse_or_inf) {
  for (int c = 0; c < cols; c += kLanes) {
    const VecF lse = load(lse_or_inf + c);
    for (int j = 0; j < keys; ++j) {
      store(s + j * ld + c, exp_nonpositive(load(s + j * ld + c) - lse));
    }
  }
}

// z[j * ld + i] = 1/(1-p) where the shared Philox keep-test keeps element (row0 + i,
// key0 + j), else 0 (and 0 in the padding columns). One Philox draw covers sixteen keys.
inline void dropout_factors(const ScoreRule& rule, int row0, int rows, int cols, int key0,
                            int keys, float* z, int64_t ld) {
  for (int i = 0; i < rows; ++i) {
    const uint32_t row = static_cast<uint32_t>(row0 + i);
    int cached_group = -1;
    core::PhiloxWords words{};
    for (int j = 0; j < keys; ++j) {
      const uint32_t col = static_cast<uint32_t>(key0 + j);
      const int group = static_cast<int>(col / core::kDropoutColumnsPerDraw);
      if (group != cached_group) {
        cached_group = group;
        words = core::dropout_draws(rule.seed, rule.offset, rule.bh, row, col);
      }
      z[j * ld + i] = core::dropout_value(words, col % core::kDropoutColumnsPerDraw) >=
                              rule.drop_threshold
                          ? rule.dropout_rescale
                          : 0.f;
    }
  }
  for (int j = 0; j < keys; ++j) {
    for (int i = rows; i < cols; ++i) z[j * ld + i] = 0.f;
  }
}

// a[j * ld + i] *= b[j * ld + i] over a keys x cols tile.
inline void multiply_tile(float* a, const float* b, int64_t ld, int keys, int cols) {
  for (int j = 0; j < keys; ++j) {
    for (int c = 0; c < cols; c += kLanes) {
      store(a + j * ld + c, load(a + j * ld + c) * load(b + j * ld + c));
    }
  }
}

// a[j * ld + c] *= factor over a keys x cols tile.
inline void scale_tile(float* a, int64_t ld, int keys, int cols, float factor) {
  const VecF f = splat(factor);
  for (int j = 0; j < keys; ++j) {
    for (int c = 0; c < cols; c += kLanes) store(a + j * ld + c, load(a + j * ld + c) * f);
  }
}

// Column c of a rows x cols (multiple of kLanes) row-major tile times factors[c]; columns
// whose kLanes factors are all 1 are left alone (most, once the first key blocks have
// been seen, as in scale_rows).
inline void scale_columns(float* tile, int64_t ld, int rows, int cols, const float* factors) {
  for (int c = 0; c < cols; c += kLanes) {
    bool all_one = true;
    for (int l = 0; l < kLanes && all_one; ++l) all_one = factors[c + l] == 1.f;
    if (all_one) continue;
    const VecF f = load(factors + c);
    for (int i = 0; i < rows; ++i) store(tile + i * ld + c, load(tile + i * ld + c) * f);
  }
}

// Row i of a rows x cols (multiple of kLanes) row-major tile times factors[i]; rows
// whose factor is 1 are left alone.
inline void scale_rows(float* tile, int64_t ld, int rows, int cols, const float* factors) {
  for (int i = 0; i < rows; ++i) {
    if (factors[i] == 1.f) continue;
    const VecF f = splat(factors[i]);
    float* row = tile + i * ld;
    for (int c = 0; c < cols; c += kLanes) store(row + c, load(row + c) * f);
  }
}

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
