// The FlashAttention-2 forward on the CPU: for a few blocks of query rows, Q^T is packed
// once; every visible key block is converted into fp32 tiles (once for all the query
// blocks of the task), scored (S^T = K Q^T), folded into the online softmax and
// accumulated (O += P V); then O is normalized and written with the lse. Fully masked
// key blocks are never visited; per-thread memory is a handful of tiles, whatever the
// sequence length.
//
// With bf16 products (gemm_bf16.hpp) the K and V tiles stay in bf16, the scores are scaled
// after the product instead of through Q^T, and the output is kept transposed
// (O^T += V^T P) so that P goes into the product as row pairs of the key-major score tile,
// with no transpose per tile.
#pragma once

#include "cpu/tiled/gemm.hpp"
#include "cpu/tiled/gemm_bf16.hpp"
#include "cpu/tiled/nonfinite.hpp"
#include "cpu/tiled/scores.hpp"
#include "cpu/tiled/tile_config.hpp"
#include "cpu/tiled/tile_io.hpp"

namespace flashattn::cpu::tiled::FA_TILED_ISA {

// One block of query columns of a task and its running state: scale * Q^T (so the score
// tiles come out scaled), the unnormalized output and the online-softmax state of every
// column. A column is a query row of a head; `columns` says which rows (and ALiBi
// slopes) when they are not consecutive rows of one head.
struct QueryBlock {
  TileColumns columns;    // count == 0: the block is unused
  core::KeyRange keys{};  // keys it attends
  float* qt = nullptr;    // [d][kBlockQ]
  uint32_t* qt_pairs = nullptr;  // bf16 products: Q^T as pairs, [d_bf16 / 2][kBlockQ]
  float* o = nullptr;     // [kBlockQ][dv_pad]; bf16 products: O^T, [dv_pad][kBlockQ]
  float* factors = nullptr;  // [kBlockQ]
  int32_t column_row[kBlockQ];  // storage behind columns.row / .slope when used
  float column_slope[kBlockQ];
  core::SoftmaxRow states[kBlockQ];

  int count() const { return columns.count; }
  bool sees(int key0, int keys_in_tile) const {
    return count() > 0 && keys.begin < key0 + keys_in_tile && key0 < keys.end;
  }
};

// The per-thread tiles of the forward and KV-cache kernels: kGroupQ query blocks share
// each K/V tile, so the keys are read from memory once per kGroupQ * kBlockQ rows. Score
// tiles are key-major with kBlockQ columns.
struct ForwardTiles {
  bool bf16;  // the tile products run in bf16 (bf16 calls only; the tiles after the fp32
              // ones are carved)
  int d, dv, d_pad, dv_pad;
  int d_bf16;  // d padded to kBf16Depth
  float* q_rows;   // [kBlockQ][d_pad]: a query block before its transpose
  float* k;        // [kBlockK][d_pad]
  float* v;        // [kBlockK][dv_pad]
  float* s;        // [kBlockK][kBlockQ]: scores, then probabilities
  float* z;        // [kBlockK][kBlockQ]: dropout factors
  float* qt[kGroupQ];
  float* o[kGroupQ];
  float* factors[kGroupQ];
  // [kBlockK][dv_pad]: V as loaded, when its non-finite values are set aside. Last, so the
  // tiles every call uses keep their places (it is touched only with a NaN or an inf).
  float* v_aside;
  // bf16 products only.
  uint16_t* k16 = nullptr;       // [kBlockK][d_bf16]: the A operand of S^T = K Q^T
  uint16_t* vt16 = nullptr;      // [dv_pad][kBlockK]: V^T, the A operand of O^T += V^T P
  uint32_t* p_pairs = nullptr;   // [kBlockK / 2][kBlockQ]: P as row pairs
  uint32_t* qt_pairs[kGroupQ] = {};
  size_t floats;

  ForwardTiles(float* base, int head_dim, int head_dim_v, bool bf16_products)
      : bf16(bf16_products),
        d(head_dim),
        dv(head_dim_v),
        d_pad(round_up_lanes(d)),
        dv_pad(round_up_lanes(dv)),
        d_bf16(round_up(d, kBf16Depth)) {
    Carver carve(base);
    q_rows = carve.take(static_cast<size_t>(kBlockQ) * d_pad);
    k = carve.take(static_cast<size_t>(kBlockK) * d_pad);
    v = carve.take(static_cast<size_t>(kBlockK) * dv_pad);
    s = carve.take(static_cast<size_t>(kBlockK) * kBlockQ);
    z = carve.take(static_cast<size_t>(kBlockK) * kBlockQ);
    for (int g = 0; g < kGroupQ; ++g) {
      qt[g] = carve.take(static_cast<size_t>(d) * kBlockQ);
      o[g] = carve.take(static_cast<size_t>(kBlockQ) * dv_pad);
      factors[g] = carve.take(kBlockQ);
    }
    v_aside = carve.take(static_cast<size_t>(kBlockK) * dv_pad);
    if (bf16) {
      k16 = carve.take_u16(static_cast<size_t>(kBlockK) * d_bf16);
      vt16 = carve.take_u16(static_cast<size_t>(dv_pad) * kBlockK);
      p_pairs = carve.take_u32(static_cast<size_t>(kBlockK / 2) * kBlockQ);
      for (int g = 0; g < kGroupQ; ++g) {
        qt_pairs[g] = carve.take_u32(static_cast<size_t>(d_bf16 / 2) * kBlockQ);
      }
    }
    floats = carve.used();
  }
};

static_assert(kBlockK % kBf16Depth == 0 && kBlockQ % kBf16Depth == 0,
              "a padded key or query block fits its tile");

// Scores one K/V tile against one query block and folds it into the block's output. With
// `v_set_aside`, t.v holds 0 for V's non-finite values and v_aside the values themselves,
// added to the rows that see them (nonfinite.hpp).
//
// The bf16 products take P from softmax_update_pairs, which also scales the scores unless
// softcap or ALiBi need them scaled first; with dropout, P goes through fp32 and is packed
// afterwards. Which path a tile takes depends on the call only, never on the grouping of
// rows into tasks, so a row's P is the same whatever the thread count.
inline void attend_tile(const ScoreRule& rule, int key0, int keys, const ForwardTiles& t,
                        bool v_set_aside, QueryBlock* block) {
  const int count = block->count(), cols = round_up_lanes(count);
  const int depth = round_up(keys, kBf16Depth);
  const bool direct_p = t.bf16 && !rule.dropout;
  const bool scale_in_exp =
      direct_p && rule.scale > 0.f && !transforms_scores(rule, block->columns);
  if (t.bf16) {
    gemm_bf16(round_up(keys, kBf16Rows), cols, t.d_bf16, t.k16, t.d_bf16, block->qt_pairs,
              kBlockQ, t.s, kBlockQ, false);
    if (!scale_in_exp) scale_tile(t.s, kBlockQ, keys, cols, rule.scale);
  } else {
    gemm<ALayout::kRowMajor>(keys, cols, t.d, t.k, t.d_pad, block->qt, kBlockQ, t.s, kBlockQ,
                             false);
  }
  finish_scores(rule, block->columns, cols, key0, keys, t.s, kBlockQ, nullptr);
  if (direct_p) {
    // P in fp32 (over the scores) only for the terms of a set-aside V.
    softmax_update_pairs(t.s, kBlockQ, keys, depth, cols, scale_in_exp ? rule.scale : 1.f,
                         block->states, block->factors, t.p_pairs, kBlockQ,
                         v_set_aside ? t.s : nullptr);
  } else {
    softmax_update(t.s, kBlockQ, keys, cols, block->states, block->factors);
  }
  if (t.bf16) {
    scale_columns(block->o, kBlockQ, t.dv_pad, cols, block->factors);
  } else {
    scale_rows(block->o, t.dv_pad, count, t.dv_pad, block->factors);
  }
  if (rule.dropout) {  // training only: consecutive rows of one head
    dropout_factors(rule, block->columns.row_min, count, cols, key0, keys, t.z, kBlockQ);
    multiply_tile(t.s, t.z, kBlockQ, keys, cols);
  }
  if (t.bf16) {
    if (!direct_p) {
      pack_row_pairs([&](int j) { return t.s + j * kBlockQ; }, keys, count, depth, cols,
                     t.p_pairs, kBlockQ);
    }
    gemm_bf16(t.dv_pad, cols, depth, t.vt16, kBlockK, t.p_pairs, kBlockQ, block->o, kBlockQ,
              true);
  } else {
    // P is the transpose of the key-major tile: column-major A, read in place.
    gemm<ALayout::kColMajor>(count, t.dv_pad, keys, t.s, kBlockQ, t.v, t.dv_pad, block->o,
                             t.dv_pad, true);
  }
  if (v_set_aside) {
    const TileColumns& columns = block->columns;
    float* o = block->o;
    const bool transposed = t.bf16;
    const int64_t ld = transposed ? kBlockQ : t.dv_pad;
    add_set_aside(
        count, keys, t.dv, t.v_aside, t.dv_pad,
        [&](int c, int j) { return t.s[j * kBlockQ + c]; },
        [&](int c, int j) { return row_sees(rule, columns.row_of(c), key0 + j); },
        [&](int c, int n, float term) { o[transposed ? n * ld + c : c * ld + n] += term; });
  }
}

// Whether some block that attends the tile has a row that does not see all of its keys:
// only then can a masked pair meet a non-finite value in P V.
inline bool tile_partly_masked(const ScoreRule& rule, int key0, int keys,
                               const QueryBlock* blocks) {
  for (int g = 0; g < kGroupQ; ++g) {
    const QueryBlock& block = blocks[g];
    if (!block.sees(key0, keys)) continue;
    const TileColumns& c = block.columns;
    if (!rule.block_fully_visible(c.row_min, c.row_max - c.row_min + 1, key0, keys)) {
      return true;
    }
  }
  return false;
}

// The first tile of a key range: tiles start at multiples of kBlockK, so a row meets the
// same tiles (and the same rounding) whatever the grouping of rows into tasks, the
// thread count or the split-KV count.
inline int first_tile(int key_begin) { return key_begin / kBlockK * kBlockK; }

// Attends the query blocks over the keys [key_begin, key_end) (each block only over the
// tiles it sees): the FlashAttention-2 loop.
template <ElementType Type, typename KeyRow, typename ValueRow>
void attend_keys(const ScoreRule& rule, int key_begin, int key_end, KeyRow key_row,
                 ValueRow value_row, const ForwardTiles& t, QueryBlock* blocks) {
  // With few query columns (decoding) a tile takes less time to score than to load, and
  // its rows (a head apart in memory) defeat the hardware prefetchers: ask for the next
  // tile while this one is scored. With many columns it would only compete with the
  // computation for the cache.
  int columns = 0;
  for (int g = 0; g < kGroupQ; ++g) columns += blocks[g].count();
  const bool prefetch = columns <= kPrefetchBelowColumns;
  for (int key0 = first_tile(key_begin); key0 < key_end; key0 += kBlockK) {
    const int keys = std::min(kBlockK, key_end - key0);
    const auto tile_key = [&](int j) { return key_row(key0 + j); };
    const auto tile_value = [&](int j) { return value_row(key0 + j); };
    const bool partly_masked = tile_partly_masked(rule, key0, keys, blocks);
    // V goes through fp32 where a NaN or an infinity may have to be set aside; the bf16
    // products take it from the input otherwise.
    const bool v_in_fp32 = !t.bf16 || partly_masked;
    if (t.bf16) {
      if constexpr (kBf16Products<Type>) {
        pack_bf16_rows(tile_key, keys, t.d, round_up(keys, kBf16Rows), t.d_bf16, t.k16,
                       t.d_bf16);
      }
    } else {
      pack_rows<Type>(tile_key, keys, t.d, t.d, t.k, t.d_pad);
    }
    if (v_in_fp32) pack_rows<Type>(tile_value, keys, t.dv, t.dv_pad, t.v, t.dv_pad);
    const int next0 = key0 + kBlockK;
    if (prefetch && next0 < key_end) {
      const int next_keys = std::min(kBlockK, key_end - next0);
      prefetch_rows<Type>([&](int j) { return key_row(next0 + j); }, next_keys, t.d);
      prefetch_rows<Type>([&](int j) { return value_row(next0 + j); }, next_keys, t.dv);
    }
    const bool v_set_aside = partly_masked && has_nonfinite(t.v, t.dv_pad, keys, t.dv);
    if (v_set_aside) set_aside_nonfinite(t.v, t.dv_pad, keys, t.dv, t.v_aside);
    if (t.bf16) {
      const int depth = round_up(keys, kBf16Depth);
      if (v_in_fp32) {
        pack_bf16_columns([&](int j) { return t.v + j * t.dv_pad; }, keys, t.dv, depth,
                          t.dv_pad, t.vt16, kBlockK);
      } else if constexpr (kBf16Products<Type>) {
        pack_bf16_columns(tile_value, keys, t.dv, depth, t.dv_pad, t.vt16, kBlockK);
      }
    }
    for (int g = 0; g < kGroupQ; ++g) {
      if (blocks[g].sees(key0, keys)) attend_tile(rule, key0, keys, t, v_set_aside, &blocks[g]);
    }
  }
}

// Packs column c of a block (query_row(c) points at its input row) as scale * Q^T,
// after prepare(c, row) (rotary, for the KV cache), and resets the block's output and
// softmax state.
template <ElementType Type, typename QueryRow, typename PrepareRow>
void start_block(const ScoreRule& rule, QueryRow query_row, PrepareRow prepare,
                 const ForwardTiles& t, QueryBlock* block) {
  const int count = block->count();
  pack_rows<Type>(query_row, count, t.d, t.d, t.q_rows, t.d_pad);
  for (int c = 0; c < count; ++c) prepare(c, t.q_rows + c * t.d_pad);
  if (t.bf16) {
    pack_column_pairs([&](int c) { return t.q_rows + c * t.d_pad; }, count, t.d,
                      round_up_lanes(count), t.d_bf16, block->qt_pairs, kBlockQ);
    zero(block->o, static_cast<size_t>(t.dv_pad) * kBlockQ);
  } else {
    transpose(t.q_rows, t.d_pad, count, t.d, round_up_lanes(count), block->qt, kBlockQ,
              rule.scale);
    zero(block->o, static_cast<size_t>(count) * t.dv_pad);
  }
  for (core::SoftmaxRow& state : block->states) state = core::SoftmaxRow{};
}

// Points block g at its tiles and gives it no columns yet.
inline void reset_blocks(const ForwardTiles& t, QueryBlock* blocks) {
  for (int g = 0; g < kGroupQ; ++g) {
    blocks[g].columns = TileColumns{};
    blocks[g].keys = {0, 0};
    blocks[g].qt = t.qt[g];
    blocks[g].qt_pairs = t.qt_pairs[g];
    blocks[g].o = t.o[g];
    blocks[g].factors = t.factors[g];
  }
}

// The keys the blocks see, restricted to [key_begin, key_end), recorded in each block;
// returns their union.
inline core::KeyRange restrict_keys(const ScoreRule& rule, int key_begin, int key_end,
                                    QueryBlock* blocks) {
  core::KeyRange all{key_end, key_begin};
  for (int g = 0; g < kGroupQ; ++g) {
    QueryBlock& block = blocks[g];
    if (block.count() == 0) continue;
    const TileColumns& c = block.columns;
    const core::KeyRange visible = rule.keys_of_rows(c.row_min, c.row_max - c.row_min + 1);
    block.keys = {std::max(visible.begin, key_begin), std::min(visible.end, key_end)};
    all = {std::min(all.begin, block.keys.begin), std::max(all.end, block.keys.end)};
  }
  return all.begin < all.end ? all : core::KeyRange{key_begin, key_begin};
}

// Columns of one query block: out = O * v_descale / rowsum (0 for a row that saw no key)
// through out_row(c) and lse = max + log(sum) (-inf then) through lse_row(c) (null: not
// wanted). v_descale is 1 unless V is e4m3.
template <ElementType Type, typename OutRow, typename LseRow>
void finish_block(const ForwardTiles& t, const QueryBlock& block, OutRow out_row,
                  LseRow lse_row, float v_descale = 1.f) {
  const int count = block.count();
  for (int c = 0; c < count; ++c) block.factors[c] = block.states[c].inverse_sum() * v_descale;
  if (t.bf16) {
    store_columns<Type>(block.o, kBlockQ, count, t.dv, block.factors, out_row);
  } else {
    store_rows<Type>(block.o, t.dv_pad, count, t.dv, block.factors, out_row);
  }
  for (int c = 0; c < count; ++c) {
    float* lse = lse_row(c);
    if (lse != nullptr) *lse = block.states[c].lse();
  }
}

// Whether a call of these operand types multiplies its tiles in bf16 (all of them bf16).
template <class Types>
constexpr bool kBf16Tiles = Types::uniform && kBf16Products<Types::q>;

// The scale the scores are multiplied by: with e4m3 operands it absorbs the descales of q
// and k (docs/contract.md, "FP8"), so the tiles hold the raw e4m3 values.
inline float score_scale(const core::AttentionParams& params, int b, int hk) {
  if (!params.has_fp8()) return params.scale;
  return params.scale * (params.q_descale.at(b, hk) * params.k_descale.at(b, hk));
}

template <class Types>
void forward_block(const core::AttentionParams& params, int b, int h, int row0, int rows,
                   float* scratch) {
  using Query = Storage<Types::q>;
  using Key = Storage<Types::kv>;
  using Out = Storage<Types::out>;
  const SequenceRows seq = sequence_rows(params, b);
  if (row0 >= seq.seqlen_q) return;
  const int row_end = std::min(seq.seqlen_q, row0 + rows);
  const int hk = h / (params.nheads / params.nheads_k);
  const bool bf16 = kBf16Tiles<Types> && seq.seqlen_q > kBf16ProductsAboveColumns;
  const ForwardTiles t(scratch, params.head_dim, params.head_dim_v, bf16);
  [[maybe_unused]] const auto products = product_scope<Types::q>(bf16);
  ScoreRule rule = score_rule(params, b, h, seq.seqlen_q, seq.seqlen_k);
  rule.scale = score_scale(params, b, hk);

  // Block g: rows row0 + g * kBlockQ .. of this head.
  const Query* q = static_cast<const Query*>(params.q.ptr) +
                   element_offset(params.q, seq.batch, seq.q_row0, h);
  QueryBlock blocks[kGroupQ];
  reset_blocks(t, blocks);
  for (int g = 0; g < kGroupQ; ++g) {
    const int first = row0 + g * kBlockQ;
    if (first >= row_end) break;
    blocks[g].columns = TileColumns::consecutive(first, std::min(kBlockQ, row_end - first));
    start_block<Types::q>(
        rule, [&](int c) { return q + (first + c) * params.q.row_stride; },
        [](int, float*) {}, t, &blocks[g]);
  }
  const core::KeyRange keys = restrict_keys(rule, 0, seq.seqlen_k, blocks);

  const Key* k = static_cast<const Key*>(params.k.ptr) +
                 element_offset(params.k, seq.batch, seq.k_row0, hk);
  const Key* v = static_cast<const Key*>(params.v.ptr) +
                 element_offset(params.v, seq.batch, seq.k_row0, hk);
  attend_keys<Types::kv>(
      rule, keys.begin, keys.end, [&](int j) { return k + j * params.k.row_stride; },
      [&](int j) { return v + j * params.v.row_stride; }, t, blocks);

  Out* out = static_cast<Out*>(params.out.ptr) +
             element_offset(params.out, seq.batch, seq.q_row0, h);
  float* lse = params.lse != nullptr ? params.lse + lse_offset(params, seq, h, 0) : nullptr;
  const float v_descale = params.v_descale.at(b, hk);
  for (const QueryBlock& block : blocks) {
    if (block.count() == 0) continue;
    const int first = block.columns.row_min;
    finish_block<Types::out>(
        t, block, [&](int c) { return out + (first + c) * params.out.row_stride; },
        [&](int c) { return lse != nullptr ? lse + first + c : nullptr; }, v_descale);
  }
}

// Runtime form of kBf16Tiles, for the scratch sizes.
inline bool uses_bf16_tiles(const core::AttentionParams& params) {
  return !params.has_fp8() && uses_bf16_products(params.dtype);
}

inline size_t forward_scratch_floats(const core::AttentionParams& params) {
  return ForwardTiles(nullptr, params.head_dim, params.head_dim_v, uses_bf16_tiles(params))
      .floats;
}

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
