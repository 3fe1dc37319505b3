// Which keys a block of query rows can see and which query rows a block of keys is seen
// by. Shared by the drivers and by every ISA build of the kernels (compiled for the
// baseline ISA). Row addressing comes from core/sequence.hpp.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/mask.hpp"
#include "core/numeric.hpp"
#include "core/params.hpp"
#include "core/sequence.hpp"

namespace flashattn::cpu::tiled {

using core::kMaxHeadDim;

using core::element_offset;
using core::lse_offset;
using core::sequence_rows;
using core::SequenceRows;

// The longest query and key sequence of the call (varlen: from cu_seqlens, so a wrong
// max_seqlen can never make a row go missing).
inline int longest_query_sequence(const core::AttentionParams& params) {
  if (!params.is_varlen()) return params.seqlen_q;
  int longest = 0;
  for (int b = 0; b < params.batch; ++b) {
    longest = std::max(longest, params.cu_seqlens_q[b + 1] - params.cu_seqlens_q[b]);
  }
  return longest;
}

inline int longest_key_sequence(const core::AttentionParams& params) {
  int longest = 0;
  for (int b = 0; b < params.batch; ++b) {
    longest = std::max(longest, sequence_rows(params, b).rows_k);
  }
  return longest;
}

// Element offset of cache position `position` of KV head `head` for batch entry b: through
// block_table when paged (params.k.batch_stride is then the page stride), else in cache
// row cache_batch_idx[b] (or b). Shared by the append and the attention.
inline int64_t cache_offset(const core::KVCacheParams& params, const core::Operand& cache,
                            int b, int position, int head) {
  if (params.is_paged()) {
    const int64_t page =
        params.block_table[b * params.block_table_batch_stride + position / params.page_size];
    return element_offset(cache, page, position % params.page_size, head);
  }
  const int64_t row = params.cache_batch_idx != nullptr ? params.cache_batch_idx[b] : b;
  return element_offset(cache, row, position, head);
}

inline int appended_rows(const core::KVCacheParams& params) {
  return params.k_new.ptr != nullptr ? params.seqlen_new : 0;
}

inline int cache_leftpad(const core::KVCacheParams& params, int b) {
  return params.cache_leftpad != nullptr ? params.cache_leftpad[b] : 0;
}

// Keys batch entry b attends: cache positions [leftpad, cache_seqlens[b] + appended).
inline int cache_keys(const core::KVCacheParams& params, int b) {
  return params.cache_seqlens[b] + appended_rows(params) - cache_leftpad(params, b);
}

// Rotates the first rotary_dim entries of `x` to absolute position `position` in double,
// pairing (x[2i], x[2i+1]) when interleaved (GPT-J) and (x[i], x[i + rotary_dim/2])
// otherwise (GPT-NeoX); the caller rounds to the dtype as the reference does.
inline void rotate(const core::KVCacheParams& params, int position, double* x) {
  const int half = params.rotary_dim / 2;
  const int64_t table_row = static_cast<int64_t>(position) * params.rotary_row_stride;
  for (int i = 0; i < half; ++i) {
    const double c = core::load_element(params.rotary_cos, table_row + i, params.dtype);
    const double s = core::load_element(params.rotary_sin, table_row + i, params.dtype);
    double& first = x[params.rotary_interleaved ? 2 * i : i];
    double& second = x[params.rotary_interleaved ? 2 * i + 1 : i + half];
    const double x0 = first, x1 = second;
    first = x0 * c - x1 * s;
    second = x0 * s + x1 * c;
  }
}

// The visibility rule of one (sequence, head): docs/contract.md steps 2-4 and 6.
struct ScoreRule {
  int seqlen_q = 0;
  int seqlen_k = 0;
  int window_left = -1;
  int window_right = -1;
  float scale = 1.f;
  float softcap = 0.f;      // 0: off
  float alibi_slope = 0.f;  // 0: off
  bool dropout = false;
  uint64_t seed = 0;
  uint64_t offset = 0;
  uint32_t bh = 0;  // b * nheads + h: the Philox counter's head coordinate
  uint32_t drop_threshold = 0;
  float dropout_rescale = 1.f;

  core::KeyRange visible(int row) const {
    return core::visible_keys(row, seqlen_q, seqlen_k, window_left, window_right);
  }

  // Keys seen by at least one of the query rows [row0, row0 + rows): the visible ranges
  // of consecutive rows are monotone and overlap, so their union is one interval.
  core::KeyRange keys_of_rows(int row0, int rows) const {
    const core::KeyRange first = visible(row0);
    const core::KeyRange last = visible(row0 + rows - 1);
    const int begin = std::max(0, first.begin);
    const int end = std::min(seqlen_k, last.end);
    return {begin, std::max(begin, end)};
  }

  // Whether every row of [row0, row0 + rows) sees every key of [key0, key0 + keys), so the
  // block needs no mask.
  bool block_fully_visible(int row0, int rows, int key0, int keys) const {
    return visible(row0 + rows - 1).begin <= key0 && visible(row0).end >= key0 + keys;
  }

  // Query rows that see at least one key of [key0, key0 + keys): row i sees key j iff
  // i + sk - sq - left <= j <= i + sk - sq + right.
  core::KeyRange rows_of_keys(int key0, int keys) const {
    const int64_t shift = static_cast<int64_t>(seqlen_k) - seqlen_q;
    int64_t begin = window_right < 0 ? 0 : key0 - shift - window_right;
    int64_t end = window_left < 0 ? seqlen_q : key0 + keys - 1 - shift + window_left + 1;
    begin = std::max<int64_t>(begin, 0);
    end = std::min<int64_t>(end, seqlen_q);
    if (keys <= 0 || end < begin) end = begin;
    return {static_cast<int>(begin), static_cast<int>(end)};
  }
};

inline ScoreRule score_rule(const core::AttentionParams& params, int b, int h, int seqlen_q,
                            int seqlen_k) {
  ScoreRule rule;
  rule.seqlen_q = seqlen_q;
  rule.seqlen_k = seqlen_k;
  rule.window_left = params.window_left;
  rule.window_right = params.window_right;
  rule.scale = params.scale;
  rule.softcap = params.softcap;
  if (params.alibi_slopes != nullptr) {
    rule.alibi_slope = params.alibi_slopes[b * params.alibi_batch_stride + h];
  }
  rule.dropout = params.has_dropout();
  const core::DropoutKey key = core::dropout_key(params);
  rule.seed = key.seed;
  rule.offset = key.offset;
  rule.bh = static_cast<uint32_t>(b) * static_cast<uint32_t>(params.nheads) +
            static_cast<uint32_t>(h);
  rule.drop_threshold = params.drop_threshold;
  rule.dropout_rescale = 1.f / (1.f - params.dropout_p);  // as the reference: from p itself
  return rule;
}

}  // namespace flashattn::cpu::tiled
