// Decoding with a KV cache (flash_attn_with_kvcache): the forward kernel over keys read
// from the cache (contiguous or paged, cache_batch_idx, leftpad) with rotary applied to
// the queries, optionally over one split of the keys (split-KV / flash-decoding), whose
// partial output and lse kvcache.cpp merges. The new keys were appended before.
//
// A task serves every query head of one KV head: their (head, row) pairs are packed side
// by side as the columns of the query blocks, so a decoding step reads each cache tile
// once per GQA group and fills the vector lanes with heads instead of padding.
#pragma once

#include "cpu/tiled/forward_kernels.hpp"

namespace flashattn::cpu::tiled::FA_TILED_ISA {

// Writes a finished block: out and lse of column c's (head_of(c), row_of(c)), or its
// split's partial result.
template <ElementType Type, typename HeadOf, typename RowOf>
void write_columns(const core::KVCacheParams& params, const SplitPartials& partials, int b,
                   int split, const ForwardTiles& t, const QueryBlock& block, HeadOf head_of,
                   RowOf row_of, float v_descale) {
  using Element = Storage<Type>;
  if (partials.splits == 1) {
    finish_block<Type>(
        t, block,
        [&](int c) {
          return static_cast<Element*>(params.out.ptr) +
                 element_offset(params.out, b, row_of(c), head_of(c));
        },
        [&](int c) -> float* {
          if (params.lse == nullptr) return nullptr;
          return params.lse + b * params.lse_batch_stride + head_of(c) * params.lse_head_stride +
                 row_of(c);
        },
        v_descale);
    return;
  }
  // Part (b, h, split) row i: see SplitPartials.
  const auto part_row = [&](int c) {
    const int64_t part =
        (static_cast<int64_t>(b) * params.nheads + head_of(c)) * partials.splits + split;
    return part * params.seqlen_q + row_of(c);
  };
  finish_block<ElementType::kF32>(
      t, block, [&](int c) { return partials.out + part_row(c) * params.head_dim_v; },
      [&](int c) { return partials.lse + part_row(c); }, v_descale);
}

template <class Types>
void kvcache_block(const core::KVCacheParams& params, const SplitPartials& partials, int b,
                   int hk, int row0, int rows, int split, float* scratch) {
  using Query = Storage<Types::q>;
  using Key = Storage<Types::kv>;
  if (row0 >= params.seqlen_q) return;
  rows = std::min(rows, params.seqlen_q - row0);
  const int group = params.nheads / params.nheads_k;
  const int head0 = hk * group;
  const int leftpad = cache_leftpad(params, b);
  const bool bf16 =
      kBf16Tiles<Types> && group * params.seqlen_q > kBf16ProductsAboveColumns;
  const ForwardTiles t(scratch, params.head_dim, params.head_dim_v, bf16);
  [[maybe_unused]] const auto products = product_scope<Types::q>(bf16);
  // Visibility does not depend on the head; the ALiBi slope is per column.
  ScoreRule rule = score_rule(params, b, head0, params.seqlen_q, cache_keys(params, b));
  rule.scale = score_scale(params, b, hk);
  const bool alibi = params.alibi_slopes != nullptr;

  // Split `split` of `splits` takes an equal share of the task's key tiles.
  const core::KeyRange keys = rule.keys_of_rows(row0, rows);
  const int tiles_begin = first_tile(keys.begin);
  const int tiles = (keys.end - tiles_begin + kBlockK - 1) / kBlockK;
  const int tiles_per_split = (tiles + partials.splits - 1) / partials.splits;
  const int split_begin = std::clamp(tiles_begin + split * tiles_per_split * kBlockK,
                                     keys.begin, keys.end);
  const int split_end =
      std::clamp(tiles_begin + (split + 1) * tiles_per_split * kBlockK, keys.begin, keys.end);

  const auto cache_row = [&](const core::Operand& cache) {
    const Key* base = static_cast<const Key*>(cache.ptr);
    return [&params, &cache, base, b, hk, leftpad](int j) {
      return base + cache_offset(params, cache, b, leftpad + j, hk);
    };
  };

  // Column n of the task is row + n % rows of head head0 + n / rows; a task with
  // more columns than its blocks hold (a huge GQA group) runs in rounds.
  const int columns = group * rows;
  const auto head_of = [&](int n) { return head0 + n / rows; };
  const auto row_of = [&](int n) { return row0 + n % rows; };
  for (int round = 0; round < columns; round += kGroupQ * kBlockQ) {
    QueryBlock blocks[kGroupQ];
    reset_blocks(t, blocks);
    for (int g = 0; g < kGroupQ && round + g * kBlockQ < columns; ++g) {
      QueryBlock& block = blocks[g];
      const int first = round + g * kBlockQ;
      const int count = std::min(kBlockQ, columns - first);
      block.columns = {count, row_of(first), row_of(first), block.column_row,
                       alibi ? block.column_slope : nullptr};
      for (int c = 0; c < round_up_lanes(count); ++c) {
        const int n = first + std::min(c, count - 1);  // padding repeats the last column
        block.column_row[c] = row_of(n);
        block.column_slope[c] =
            alibi ? params.alibi_slopes[b * params.alibi_batch_stride + head_of(n)] : 0.f;
        block.columns.row_min = std::min(block.columns.row_min, row_of(n));
        block.columns.row_max = std::max(block.columns.row_max, row_of(n));
      }
      // Queries are rotated like the reference: in double from the exact inputs, then
      // rounded to the dtype. FlashAttention-2 rotates every query at the first new
      // position unless the attention is causal or windowed, where row i sits at +i.
      const auto rotate_query = [&](int c, float* x) {
        if (params.rotary_cos == nullptr) return;
        double exact[kMaxHeadDim];
        for (int i = 0; i < params.rotary_dim; ++i) exact[i] = x[i];
        const int row = row_of(first + c);
        rotate(params, params.cache_seqlens[b] + (params.has_window() ? row : 0), exact);
        for (int i = 0; i < params.rotary_dim; ++i) {
          x[i] = core::round_to(static_cast<float>(exact[i]), params.dtype);
        }
      };
      start_block<Types::q>(
          rule,
          [&](int c) {
            return static_cast<const Query*>(params.q.ptr) +
                   element_offset(params.q, b, row_of(first + c), head_of(first + c));
          },
          rotate_query, t, &block);
    }
    const core::KeyRange attended = restrict_keys(rule, split_begin, split_end, blocks);
    attend_keys<Types::kv>(rule, attended.begin, attended.end, cache_row(params.k),
                           cache_row(params.v), t, blocks);
    for (int g = 0; g < kGroupQ; ++g) {
      if (blocks[g].count() == 0) continue;
      write_columns<Types::out>(params, partials, b, split, t, blocks[g],
                                [&](int c) { return head_of(round + g * kBlockQ + c); },
                                [&](int c) { return row_of(round + g * kBlockQ + c); },
                                params.v_descale.at(b, hk));
    }
  }
}

inline size_t kvcache_scratch_floats(const core::KVCacheParams& params) {
  return ForwardTiles(nullptr, params.head_dim, params.head_dim_v, uses_bf16_tiles(params))
      .floats;
}

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
