// The FlashAttention-2 backward on the CPU, in two passes so that no output is shared
// between threads (always deterministic, no atomics):
//   dK/dV pass, one task per (sequence, KV head, a few key blocks): for each query head of
//     the group and each query block that sees the keys, load the query block once, and for
//     each key block recompute P from the saved lse, dP = dO V^T, dS = P * (dP - D), then
//     dV += P^T dO and dK += dS^T Q;
//   dQ pass, one task per (sequence, head, a few query blocks): for each K/V tile that a
//     block sees, load it once, and for each block the same P and dS, then dQ += dS K.
// D = rowsum(dO * O) is recomputed per query block, so memory stays a few tiles per
// thread. Query blocks start at multiples of kBlockQ and key tiles at multiples of kBlockK
// and always hold every row (key) of the sequence they cover, so each (query block, key
// tile) pair does the same arithmetic whichever blocks share a task: the results do not
// depend on the grouping, hence not on the thread count. Score tiles are key-major (see
// scores.hpp).
//
// The one-pass backward (backward_one_pass) runs both passes' pairs in one task per
// (sequence, KV head): it keeps every K/V tile and its dK and dV in the thread's scratch
// and computes each pair's P and dS once for its three products, giving each output its
// pairs in the order its pass does, so its bits are the two passes' bits.
//
// With bf16 products (gemm_bf16.hpp) every product takes bf16 operands packed from the
// fp32 tiles, each once per load (a product that sets a non-finite value aside packs its
// operand again, and again after restoring it), and dQ is kept transposed
// (dQ^T += K^T dS) so that dS goes in as row pairs of the key-major tile; dK and dV take P
// and dS key-major, their rows rounded to bf16 in place order. In a tile that every row
// of the block sees whole, without dropout, softcap or ALiBi (most tiles),
// fused_gradients computes P and dS and rounds them into those operands in one pass.
#pragma once

#include "cpu/tiled/gemm.hpp"
#include "cpu/tiled/gemm_bf16.hpp"
#include "cpu/tiled/nonfinite.hpp"
#include "cpu/tiled/scores.hpp"
#include "cpu/tiled/tile_config.hpp"
#include "cpu/tiled/tile_io.hpp"

namespace flashattn::cpu::tiled::FA_TILED_ISA {

// One loaded query block: its rows, the product operands made from them, the saved lse
// and D, and (dQ pass, one pass) its dQ.
struct QueryTiles {
  int row0 = 0, rows = 0;  // the rows loaded
  float* q_rows;    // [kBlockQ][d_pad]
  float* do_rows;   // [kBlockQ][dv_pad]
  float* dq;        // [kBlockQ][d_pad]; bf16 products: dQ^T, [d_pad][kBlockQ]
  float* lse;       // [kBlockQ]: lse, +inf for rows without keys and padding
  float* delta;     // [kBlockQ]: D = rowsum(dO * O)
  // fp32 products only.
  float* qt = nullptr;   // [d][kBlockQ]: scale * Q^T
  float* dot = nullptr;  // [dv][kBlockQ]: dO^T
  // bf16 products only: B operands (pairs).
  uint32_t* qt_pairs = nullptr;   // [d_bf16 / 2][kBlockQ]: S^T = K Q^T
  uint32_t* dot_pairs = nullptr;  // [dv_bf16 / 2][kBlockQ]: dP^T = V dO^T
  uint32_t* q_pairs = nullptr;    // [kBlockQ / 2][d_pad]: dK += dS^T Q
  uint32_t* do_pairs = nullptr;   // [kBlockQ / 2][dv_pad]: dV += P^T dO
};

// One loaded key block (K/V tile) and (dK/dV pass, one pass) its dK and dV.
struct KeyTiles {
  int key0 = 0, keys = 0;  // the keys loaded
  float* k;   // [kBlockK][d_pad]
  float* v;   // [kBlockK][dv_pad]
  float* dk;  // [kBlockK][d_pad]
  float* dv;  // [kBlockK][dv_pad]
  // bf16 products only: A operands (bf16 rows, depth contiguous).
  uint16_t* k16 = nullptr;   // [kBlockK][d_bf16]: S^T = K Q^T
  uint16_t* v16 = nullptr;   // [kBlockK][dv_bf16]: dP^T = V dO^T
  uint16_t* kt16 = nullptr;  // [d_pad][kBlockK]: dQ^T += K^T dS
};

// The per-thread tiles: query blocks and key blocks (a dK/dV task uses one query block
// and up to kGroupB key blocks, a dQ task the converse, a one-pass task one query block and
// every key block of its sequence), and the score tiles of the pair at hand.
struct BackwardTiles {
  bool bf16;  // the tile products run in bf16
  int d, dv, d_pad, dv_pad;
  int d_bf16, dv_bf16;  // d and dv padded to kBf16Depth
  QueryTiles query[kGroupB];
  float* key_base;    // the key blocks' tiles, key_floats apart (key_tiles)
  size_t key_floats;
  float* p;         // [kBlockK][kBlockQ]: scores, then P
  float* ds;        // [kBlockK][kBlockQ]: dP, then dS (softmax scale included)
  float* pz;        // [kBlockK][kBlockQ]: dropout factors Z, then P * Z
  float* cap_grad;  // [kBlockK][kBlockQ]: 1 - tanh^2 of the softcap
  float* out_row;   // [dv_pad]
  float* aside;     // [max(kBlockK, kBlockQ)][max(d_pad, dv_pad)]: an operand as loaded,
                    // when its non-finite values are set aside (nonfinite.hpp)
  // bf16 products only: the score tiles as operands.
  uint16_t* p16 = nullptr;       // [kBlockK][kBlockQ]: P (or P * Z), for dV += P^T dO
  uint16_t* ds16 = nullptr;      // [kBlockK][kBlockQ]: dS, for dK += dS^T Q
  uint32_t* ds_pairs = nullptr;  // [kBlockK / 2][kBlockQ]: dS, for dQ^T += K^T dS
  size_t floats;

  BackwardTiles(float* base, int head_dim, int head_dim_v, bool bf16_products,
                int query_blocks = kGroupB, int key_blocks = kGroupB)
      : bf16(bf16_products),
        d(head_dim),
        dv(head_dim_v),
        d_pad(round_up_lanes(d)),
        dv_pad(round_up_lanes(dv)),
        d_bf16(round_up(d, kBf16Depth)),
        dv_bf16(round_up(dv, kBf16Depth)) {
    Carver carve(base);
    const size_t score_tile = static_cast<size_t>(kBlockK) * kBlockQ;
    p = carve.take(score_tile);
    ds = carve.take(score_tile);
    pz = carve.take(score_tile);
    cap_grad = carve.take(score_tile);
    out_row = carve.take(dv_pad);
    aside = carve.take(static_cast<size_t>(std::max(kBlockK, kBlockQ)) * std::max(d_pad, dv_pad));
    if (bf16) {
      p16 = carve.take_u16(score_tile);
      ds16 = carve.take_u16(score_tile);
      ds_pairs = carve.take_u32(score_tile / 2);
    }
    for (int g = 0; g < query_blocks; ++g) {
      QueryTiles& q = query[g];
      q.q_rows = carve.take(static_cast<size_t>(kBlockQ) * d_pad);
      q.do_rows = carve.take(static_cast<size_t>(kBlockQ) * dv_pad);
      q.dq = carve.take(static_cast<size_t>(kBlockQ) * d_pad);
      q.lse = carve.take(kBlockQ);
      q.delta = carve.take(kBlockQ);
      if (bf16) {
        q.qt_pairs = carve.take_u32(static_cast<size_t>(d_bf16 / 2) * kBlockQ);
        q.dot_pairs = carve.take_u32(static_cast<size_t>(dv_bf16 / 2) * kBlockQ);
        q.q_pairs = carve.take_u32(static_cast<size_t>(kBlockQ / 2) * d_pad);
        q.do_pairs = carve.take_u32(static_cast<size_t>(kBlockQ / 2) * dv_pad);
      } else {
        q.qt = carve.take(static_cast<size_t>(d) * kBlockQ);
        q.dot = carve.take(static_cast<size_t>(dv) * kBlockQ);
      }
    }
    Carver count(nullptr);
    carve_key(count);
    key_floats = count.used();
    key_base = carve.take(key_floats * key_blocks);
    floats = carve.used();
  }

  // The tiles of key block g (key0 and keys left for the caller).
  KeyTiles key_tiles(int g) const {
    Carver carve(key_base + key_floats * g);
    return carve_key(carve);
  }

 private:
  KeyTiles carve_key(Carver& carve) const {
    KeyTiles k;
    k.k = carve.take(static_cast<size_t>(kBlockK) * d_pad);
    k.v = carve.take(static_cast<size_t>(kBlockK) * dv_pad);
    k.dk = carve.take(static_cast<size_t>(kBlockK) * d_pad);
    k.dv = carve.take(static_cast<size_t>(kBlockK) * dv_pad);
    if (bf16) {
      k.k16 = carve.take_u16(static_cast<size_t>(kBlockK) * d_bf16);
      k.v16 = carve.take_u16(static_cast<size_t>(kBlockK) * dv_bf16);
      k.kt16 = carve.take_u16(static_cast<size_t>(d_pad) * kBlockK);
    }
    return k;
  }
};

// The B operands of dV += P^T dO and dK += dS^T Q: the loaded rows of dO and Q in pairs.
inline void pack_query_pairs(const BackwardTiles& t, QueryTiles* q) {
  const int depth = round_up(q->rows, kBf16Depth);
  pack_row_pairs([&](int c) { return q->do_rows + c * t.dv_pad; }, q->rows, t.dv, depth,
                 t.dv_pad, q->do_pairs, t.dv_pad);
  pack_row_pairs([&](int c) { return q->q_rows + c * t.d_pad; }, q->rows, t.d, depth, t.d_pad,
                 q->q_pairs, t.d_pad);
}

// The A operand of dQ^T += K^T dS: the loaded K, transposed.
inline void pack_key_columns(const BackwardTiles& t, KeyTiles* k) {
  pack_bf16_columns([&](int j) { return k->k + j * t.d_pad; }, k->keys, t.d,
                    round_up(k->keys, kBf16Depth), t.d_pad, k->kt16, kBlockK);
}

// Loads query rows [row0, row0 + rows) of head h into q: Q, dO, the product operands
// made from them (fp32: scale * Q^T, so the score tiles come out scaled, and dO^T), the
// saved lse and D = rowsum(dO * O).
template <ElementType Type>
void load_query_block(const core::BackwardParams& params, const SequenceRows& seq, int h,
                      int row0, int rows, float rule_scale, const BackwardTiles& t,
                      QueryTiles* q) {
  using Element = Storage<Type>;
  const auto rows_of = [&](const core::Operand& op) {
    const Element* base = static_cast<const Element*>(op.ptr) +
                          element_offset(op, seq.batch, seq.q_row0 + row0, h);
    return [base, &op](int r) { return base + r * op.row_stride; };
  };
  q->row0 = row0;
  q->rows = rows;
  const int cols = round_up_lanes(rows);
  pack_rows<Type>(rows_of(params.q), rows, t.d, t.d_pad, q->q_rows, t.d_pad);
  pack_rows<Type>(rows_of(params.dout), rows, t.dv, t.dv_pad, q->do_rows, t.dv_pad);
  if (t.bf16) {
    pack_column_pairs([&](int c) { return q->q_rows + c * t.d_pad; }, rows, t.d, cols,
                      t.d_bf16, q->qt_pairs, kBlockQ);
    pack_column_pairs([&](int c) { return q->do_rows + c * t.dv_pad; }, rows, t.dv, cols,
                      t.dv_bf16, q->dot_pairs, kBlockQ);
    pack_query_pairs(t, q);
  } else {
    transpose(q->q_rows, t.d_pad, rows, t.d, cols, q->qt, kBlockQ, rule_scale);
    transpose(q->do_rows, t.dv_pad, rows, t.dv, cols, q->dot, kBlockQ);
  }

  const auto out_row = rows_of(params.out);
  for (int i = 0; i < rows; ++i) {
    const float saved = params.lse[lse_offset(params, seq, h, row0 + i)];
    q->lse[i] = saved == -INFINITY ? INFINITY : saved;
    to_float<Type>(out_row(i), t.out_row, t.dv);
    const float* dout = q->do_rows + i * t.dv_pad;
    float sum = 0.f;
    if (t.bf16) {
      // dP comes from bf16 products, whose order of summation is the hardware's: no
      // order of D's sum matches it, so D takes the fast one.
      for (int c = t.dv; c < t.dv_pad; ++c) t.out_row[c] = 0.f;
      VecF lanes{};
      for (int c = 0; c < t.dv_pad; c += kLanes) {
        lanes = fma(load(dout + c), load(t.out_row + c), lanes);
      }
      for (int l = 0; l < kLanes; ++l) sum += lanes[l];
    } else {
      // The same arithmetic as the GEMM that makes dP (one fused multiply-add per
      // element, in order), so dP - D is exactly 0 where P is one-hot and out = v.
      for (int c = 0; c < t.dv; ++c) sum = fma_scalar(dout[c], t.out_row[c], sum);
    }
    q->delta[i] = sum;
  }
  for (int i = rows; i < cols; ++i) {
    q->lse[i] = INFINITY;
    q->delta[i] = 0.f;
  }
}

// From raw tiles t.p = K Q^T and t.ds = V dO^T of keys [key0, key0 + keys) and the query
// block q: t.p becomes P, t.ds becomes scale * dS (softcap's chain rule included).
// Returns the tile dV needs: P, or P * Z with dropout. In a partly masked tile the masked
// pairs of P, P * Z and dS are set to exactly 0: computed, they would be 0 * NaN there when
// the row's lse, D, dO or the key's V is not finite.
inline const float* tile_gradients(const ScoreRule& rule, const QueryTiles& q, int key0,
                                   int keys, const BackwardTiles& t) {
  const int row0 = q.row0, rows = q.rows;
  const int cols = round_up_lanes(rows);
  const bool softcap = rule.softcap > 0.f;
  finish_scores(rule, TileColumns::consecutive(row0, rows), cols, key0, keys, t.p, kBlockQ,
                softcap ? t.cap_grad : nullptr);
  probabilities_from_lse(t.p, kBlockQ, keys, cols, q.lse);
  if (rule.dropout) {
    dropout_factors(rule, row0, rows, cols, key0, keys, t.pz, kBlockQ);
    multiply_tile(t.ds, t.pz, kBlockQ, keys, cols);  // dP of the dropped-out P
    multiply_tile(t.pz, t.p, kBlockQ, keys, cols);
  }
  const VecF scale = splat(rule.scale);
  for (int j = 0; j < keys; ++j) {
    float* ds = t.ds + j * kBlockQ;
    const float* p = t.p + j * kBlockQ;
    for (int c = 0; c < cols; c += kLanes) {
      VecF grad = load(p + c) * (load(ds + c) - load(q.delta + c));
      if (softcap) grad = grad * load(t.cap_grad + j * kBlockQ + c);
      store(ds + c, grad * scale);
    }
  }
  if (!rule.block_fully_visible(row0, rows, key0, keys)) {
    for (int c = 0; c < rows; ++c) {
      const core::KeyRange visible = rule.visible(row0 + c);
      const int first = std::clamp(visible.begin - key0, 0, keys);
      const int last = std::clamp(visible.end - key0, first, keys);
      for (int j = 0; j < keys; ++j) {
        if (j >= first && j < last) continue;
        t.p[j * kBlockQ + c] = 0.f;
        t.ds[j * kBlockQ + c] = 0.f;
        if (rule.dropout) t.pz[j * kBlockQ + c] = 0.f;
      }
    }
  }
  return rule.dropout ? t.pz : t.p;
}

// Loads keys [key0, key0 + keys) of KV head hk into k: K and V in fp32 and, with bf16
// products, as the A operands of the score products (and, with `transposed`, K^T for dQ).
template <ElementType Type>
void load_key_block(const core::BackwardParams& params, const SequenceRows& seq, int hk,
                    int key0, int keys, bool transposed, const BackwardTiles& t, KeyTiles* k) {
  using Element = Storage<Type>;
  const Element* kp = static_cast<const Element*>(params.k.ptr) +
                      element_offset(params.k, seq.batch, seq.k_row0 + key0, hk);
  const Element* vp = static_cast<const Element*>(params.v.ptr) +
                      element_offset(params.v, seq.batch, seq.k_row0 + key0, hk);
  k->key0 = key0;
  k->keys = keys;
  pack_rows<Type>([&](int j) { return kp + j * params.k.row_stride; }, keys, t.d, t.d_pad, k->k,
                  t.d_pad);
  pack_rows<Type>([&](int j) { return vp + j * params.v.row_stride; }, keys, t.dv, t.dv_pad,
                  k->v, t.dv_pad);
  if (!t.bf16) return;
  pack_bf16_rows([&](int j) { return k->k + j * t.d_pad; }, keys, t.d, round_up(keys, kBf16Rows),
                 t.d_bf16, k->k16, t.d_bf16);
  pack_bf16_rows([&](int j) { return k->v + j * t.dv_pad; }, keys, t.dv,
                 round_up(keys, kBf16Rows), t.dv_bf16, k->v16, t.dv_bf16);
  if (transposed) pack_key_columns(t, k);
}

// The raw score tiles of a key block and a query block: t.p = scale * K Q^T (K Q^T when
// `unscaled`, bf16 products only) and t.ds = V dO^T.
inline void score_products(const QueryTiles& q, const KeyTiles& k, float scale, bool unscaled,
                           const BackwardTiles& t) {
  const int cols = round_up_lanes(q.rows);
  if (t.bf16) {
    const int rows = round_up(k.keys, kBf16Rows);
    gemm_bf16(rows, cols, t.d_bf16, k.k16, t.d_bf16, q.qt_pairs, kBlockQ, t.p, kBlockQ, false);
    if (!unscaled) scale_tile(t.p, kBlockQ, k.keys, cols, scale);
    gemm_bf16(rows, cols, t.dv_bf16, k.v16, t.dv_bf16, q.dot_pairs, kBlockQ, t.ds, kBlockQ,
              false);
  } else {
    gemm<ALayout::kRowMajor>(k.keys, cols, t.d, k.k, t.d_pad, q.qt, kBlockQ, t.p, kBlockQ,
                             false);
    gemm<ALayout::kRowMajor>(k.keys, cols, t.dv, k.v, t.dv_pad, q.dot, kBlockQ, t.ds, kBlockQ,
                             false);
  }
}

// Whether a pair takes fused_gradients: bf16 products, a tile every row of the block sees
// whole, and no dropout, softcap or ALiBi. Decided by the pair alone, so whichever blocks
// share a task.
inline bool fused_pair(const ScoreRule& rule, const QueryTiles& q, const KeyTiles& k,
                       const BackwardTiles& t) {
  return t.bf16 && !rule.dropout && rule.scale > 0.f &&
         !transforms_scores(rule, TileColumns::consecutive(q.row0, q.rows)) &&
         rule.block_fully_visible(q.row0, q.rows, k.key0, k.keys);
}

// tile_gradients and the rounding of P and dS into their operands, in one pass over the
// raw tiles (t.p unscaled) with the same arithmetic: p = exp(scale * s - lse),
// ds = p * (dp - D) * scale, then put(j, c, p, ds) for key j < keys and the kLanes columns
// from c (c < cols), with 0 in the columns past the block's rows.
template <typename Put>
void fused_gradients(const ScoreRule& rule, const QueryTiles& q, int keys,
                     const BackwardTiles& t, Put put) {
  const int cols = round_up_lanes(q.rows);
  const VecF scale = splat(rule.scale);
  for (int j = 0; j < keys; ++j) {
    const float* s = t.p + j * kBlockQ;
    const float* dp = t.ds + j * kBlockQ;
    for (int c = 0; c < cols; c += kLanes) {
      VecF p = exp_nonpositive(load(s + c) * scale - load(q.lse + c));
      VecF ds = p * (load(dp + c) - load(q.delta + c));
      ds = ds * scale;
      if (c + kLanes > q.rows) {
        const VecI inside = lane_index() + splat_int(c) < splat_int(q.rows);
        p = inside ? p : VecF{};
        ds = inside ? ds : VecF{};
      }
      put(j, c, p, ds);
    }
  }
}

// fused_gradients' P and dS, rounded into the operands that the products of
// pair_gradients take: with DkDv, the A operands t.p16 and t.ds16 of dV and dK (out_rows x
// depth, depth = the block's rows rounded up, zero outside keys x rows); with Dq, the row
// pairs t.ds_pairs of dQ^T (depth / 2 x cols, depth = keys rounded up, zero outside keys x
// rows).
template <bool DkDv, bool Dq>
void fused_operands(const ScoreRule& rule, const QueryTiles& q, int keys,
                    const BackwardTiles& t) {
  const int cols = round_up_lanes(q.rows);
  const auto put_row = [](uint16_t* dst, VecF x) {
    const VecH bits = computed_bf16(x);
    std::memcpy(dst, &bits, sizeof bits);
  };
  fused_gradients(rule, q, keys, t, [&](int j, int c, VecF p, VecF ds) {
    if constexpr (DkDv) {
      put_row(t.p16 + j * kBlockQ + c, p);
      put_row(t.ds16 + j * kBlockQ + c, ds);
    }
    if constexpr (Dq) {
      uint32_t* word = t.ds_pairs + (j / 2) * kBlockQ + c;
      VecU bits = computed_bf16_bits(ds);
      if (j % 2 == 1) {
        VecU low;
        std::memcpy(&low, word, sizeof low);
        bits = word_pairs(low, bits);
      }
      std::memcpy(word, &bits, sizeof bits);
    }
  });
  if constexpr (DkDv) {
    const int depth = round_up(q.rows, kBf16Depth), out_rows = round_up(keys, kBf16Rows);
    for (int j = 0; j < out_rows; ++j) {
      const int from = j < keys ? cols : 0;
      std::memset(t.p16 + j * kBlockQ + from, 0, sizeof(uint16_t) * (depth - from));
      std::memset(t.ds16 + j * kBlockQ + from, 0, sizeof(uint16_t) * (depth - from));
    }
  }
  if constexpr (Dq) {
    // An odd last key pairs with zeros; pairs past the keys are zero.
    const int depth = round_up(keys, kBf16Depth);
    for (int k = keys / 2; 2 * k < depth; ++k) {
      if (2 * k + 1 == keys) continue;
      std::memset(t.ds_pairs + k * kBlockQ, 0, sizeof(uint32_t) * cols);
    }
  }
}

// A gradient product C += A * B whose B operand is a loaded fp32 tile (depth rows x b_cols
// of `b`, row stride ldb) or, with bf16 products, an operand pack() made from it:
// product() runs it. A partly masked tile sets b's non-finite values aside first
// (nonfinite.hpp), packs again, and adds their terms afterwards through add(m, n, term),
// with a_entry(m, k) the A entry and pair(m, k) the (query row, key) of output row m and
// depth k; then b and its operand are restored for the next pair that reads them.
template <typename Pack, typename Product, typename AEntry, typename Pair, typename Add>
void gradient_product(const ScoreRule& rule, bool partly_masked, int rows, int depth, float* b,
                      int64_t ldb, int b_cols, Pack pack, Product product, AEntry a_entry,
                      Pair pair, Add add, float* aside) {
  const bool set_aside = partly_masked && has_nonfinite(b, ldb, depth, b_cols);
  if (set_aside) {
    set_aside_nonfinite(b, ldb, depth, b_cols, aside);
    pack();
  }
  product();
  if (!set_aside) return;
  add_set_aside(rows, depth, b_cols, aside, ldb, a_entry,
                [&](int m, int k) {
                  const auto [row, key] = pair(m, k);
                  return row_sees(rule, row, key);
                },
                add);
  restore_nonfinite(b, ldb, depth, b_cols, aside);
  pack();
}

// add() of gradient_product for a row-major C.
inline auto add_to(float* c, int64_t ldc) {
  return [c, ldc](int m, int n, float term) { c[m * ldc + n] += term; };
}

// dQ += dS K of one pair (t.ds holds dS).
inline void dq_product(const ScoreRule& rule, bool partly_masked, KeyTiles& k, QueryTiles& q,
                       const BackwardTiles& t) {
  const int row0 = q.row0, rows = q.rows, key0 = k.key0, keys = k.keys;
  const int cols = round_up_lanes(rows);
  const auto ds_entry = [&](int m, int j) { return t.ds[j * kBlockQ + m]; };
  const auto pair = [&](int m, int j) { return std::pair{row0 + m, key0 + j}; };
  if (t.bf16) {
    // dQ^T += K^T dS: dS as row pairs of the key-major tile.
    const int depth = round_up(keys, kBf16Depth);
    gradient_product(
        rule, partly_masked, rows, keys, k.k, t.d_pad, t.d, [&] { pack_key_columns(t, &k); },
        [&] {
          pack_row_pairs([&](int j) { return t.ds + j * kBlockQ; }, keys, rows, depth, cols,
                         t.ds_pairs, kBlockQ);
          gemm_bf16(t.d_pad, cols, depth, k.kt16, kBlockK, t.ds_pairs, kBlockQ, q.dq, kBlockQ,
                    true);
        },
        ds_entry, pair, [&](int m, int n, float term) { q.dq[n * kBlockQ + m] += term; },
        t.aside);
  } else {
    // dQ += dS K: dS is the transpose of the key-major tile (column-major A).
    gradient_product(
        rule, partly_masked, rows, keys, k.k, t.d_pad, t.d, [] {},
        [&] {
          gemm<ALayout::kColMajor>(rows, t.d_pad, keys, t.ds, kBlockQ, k.k, t.d_pad, q.dq,
                                   t.d_pad, true);
        },
        ds_entry, pair, add_to(q.dq, t.d_pad), t.aside);
  }
}

// dV += P^T dO and dK += dS^T Q of one pair (p_for_dv holds P or P * Z, t.ds dS).
inline void dkdv_products(const ScoreRule& rule, bool partly_masked, KeyTiles& k, QueryTiles& q,
                          const float* p_for_dv, const BackwardTiles& t) {
  const int row0 = q.row0, rows = q.rows, key0 = k.key0, live = k.keys;
  const auto pair = [&](int m, int j) { return std::pair{row0 + j, key0 + m}; };
  const auto p_entry = [&](int m, int j) { return p_for_dv[m * kBlockQ + j]; };
  const auto ds_entry = [&](int m, int j) { return t.ds[m * kBlockQ + j]; };
  if (t.bf16) {
    // The key-major tiles are P^T and dS^T already: their rows, rounded, are A; the query
    // rows of dO and Q, in pairs, are B.
    const int depth = round_up(rows, kBf16Depth), out_rows = round_up(live, kBf16Rows);
    const auto tile_rows = [&](const float* tile) {
      return [tile](int j) { return tile + j * kBlockQ; };
    };
    gradient_product(
        rule, partly_masked, live, rows, q.do_rows, t.dv_pad, t.dv,
        [&] { pack_query_pairs(t, &q); },
        [&] {
          pack_bf16_rows(tile_rows(p_for_dv), live, rows, out_rows, depth, t.p16, kBlockQ);
          gemm_bf16(out_rows, t.dv_pad, depth, t.p16, kBlockQ, q.do_pairs, t.dv_pad, k.dv,
                    t.dv_pad, true);
        },
        p_entry, pair, add_to(k.dv, t.dv_pad), t.aside);
    gradient_product(
        rule, partly_masked, live, rows, q.q_rows, t.d_pad, t.d,
        [&] { pack_query_pairs(t, &q); },
        [&] {
          pack_bf16_rows(tile_rows(t.ds), live, rows, out_rows, depth, t.ds16, kBlockQ);
          gemm_bf16(out_rows, t.d_pad, depth, t.ds16, kBlockQ, q.q_pairs, t.d_pad, k.dk,
                    t.d_pad, true);
        },
        ds_entry, pair, add_to(k.dk, t.d_pad), t.aside);
  } else {
    // The key-major tiles are P^T and dS^T already: row-major A, depth = query rows.
    gradient_product(
        rule, partly_masked, live, rows, q.do_rows, t.dv_pad, t.dv, [] {},
        [&] {
          gemm<ALayout::kRowMajor>(live, t.dv_pad, rows, p_for_dv, kBlockQ, q.do_rows,
                                   t.dv_pad, k.dv, t.dv_pad, true);
        },
        p_entry, pair, add_to(k.dv, t.dv_pad), t.aside);
    gradient_product(
        rule, partly_masked, live, rows, q.q_rows, t.d_pad, t.d, [] {},
        [&] {
          gemm<ALayout::kRowMajor>(live, t.d_pad, rows, t.ds, kBlockQ, q.q_rows, t.d_pad, k.dk,
                                   t.d_pad, true);
        },
        ds_entry, pair, add_to(k.dk, t.d_pad), t.aside);
  }
}

// One pair of a key block (loaded, with K^T when Dq; dK and dV zeroed before its first
// pair) and a query block (loaded, dQ zeroed before its first pair): P and dS once, then
// dV and dK (DkDv) and dQ (Dq). Each product's arithmetic depends on the pair alone, not
// on which others run, so the passes and the one-pass backward agree bit for bit.
template <bool DkDv, bool Dq>
void pair_gradients(const ScoreRule& rule, KeyTiles& k, QueryTiles& q, const BackwardTiles& t) {
  const int row0 = q.row0, rows = q.rows, key0 = k.key0, keys = k.keys;
  const int cols = round_up_lanes(rows);
  if (fused_pair(rule, q, k, t)) {
    score_products(q, k, rule.scale, true, t);
    fused_operands<DkDv, Dq>(rule, q, keys, t);
    if constexpr (DkDv) {
      const int depth = round_up(rows, kBf16Depth), out_rows = round_up(keys, kBf16Rows);
      gemm_bf16(out_rows, t.dv_pad, depth, t.p16, kBlockQ, q.do_pairs, t.dv_pad, k.dv,
                t.dv_pad, true);
      gemm_bf16(out_rows, t.d_pad, depth, t.ds16, kBlockQ, q.q_pairs, t.d_pad, k.dk, t.d_pad,
                true);
    }
    if constexpr (Dq) {
      gemm_bf16(t.d_pad, cols, round_up(keys, kBf16Depth), k.kt16, kBlockK, t.ds_pairs,
                kBlockQ, q.dq, kBlockQ, true);
    }
    return;
  }
  score_products(q, k, rule.scale, false, t);
  const float* p_for_dv = tile_gradients(rule, q, key0, keys, t);
  const bool partly_masked = !rule.block_fully_visible(row0, rows, key0, keys);
  if constexpr (DkDv) dkdv_products(rule, partly_masked, k, q, p_for_dv, t);
  if constexpr (Dq) dq_product(rule, partly_masked, k, q, t);
}

// Whether the non-empty range `r` meets [lo, lo + count): a tile at lo that a grouped block's
// rows or keys reach.
inline bool meets(const core::KeyRange& r, int lo, int count) {
  return r.begin < r.end && r.begin < lo + count && lo < r.end;
}

// Writes the dQ of query block q (head h) to params.dq.
template <ElementType Type>
void store_dq(const core::BackwardParams& params, const SequenceRows& seq, int h,
              const QueryTiles& q, const BackwardTiles& t) {
  using Element = Storage<Type>;
  Element* dq = static_cast<Element*>(params.dq.ptr) +
                element_offset(params.dq, seq.batch, seq.q_row0 + q.row0, h);
  const auto dq_row = [&](int r) { return dq + r * params.dq.row_stride; };
  if (t.bf16) {
    store_columns<Type>(q.dq, kBlockQ, q.rows, t.d, nullptr, dq_row);
  } else {
    store_rows<Type>(q.dq, t.d_pad, q.rows, t.d, nullptr, dq_row);
  }
}

// The live keys of the key block at key0: those before seqlen_k (keys past seqused_k are
// rows of the sequence nobody attends, whose gradient is 0).
inline int live_keys(const SequenceRows& seq, int key0) {
  return std::clamp(seq.seqlen_k - key0, 0, kBlockK);
}

// Key block k of KV head hk: zeroes its dK and dV and loads its live keys, with K^T when
// `transposed`.
template <ElementType Type>
void start_key_block(const core::BackwardParams& params, const SequenceRows& seq, int hk,
                     int key0, bool transposed, const BackwardTiles& t, KeyTiles* k) {
  zero(k->dk, static_cast<size_t>(kBlockK) * t.d_pad);
  zero(k->dv, static_cast<size_t>(kBlockK) * t.dv_pad);
  k->key0 = key0;
  k->keys = live_keys(seq, key0);
  if (k->keys > 0) load_key_block<Type>(params, seq, hk, key0, k->keys, transposed, t, k);
}

// Writes the dK and dV of key block k (KV head hk) to params.dk and params.dv, zero past
// the live keys. Those zeros are written, not taken from the tiles: a product padded to
// whole operand rows leaves 0 * x in the tile rows past the live keys, NaN where a query
// row holds a NaN.
template <ElementType Type>
void store_dkdv(const core::BackwardParams& params, const SequenceRows& seq, int hk,
                const KeyTiles& k, const BackwardTiles& t) {
  using Element = Storage<Type>;
  const int keys = std::min(kBlockK, seq.rows_k - k.key0);
  const int live = std::min(k.keys, keys);
  Element* dk = static_cast<Element*>(params.dk.ptr) +
                element_offset(params.dk, seq.batch, seq.k_row0 + k.key0, hk);
  Element* dv = static_cast<Element*>(params.dv.ptr) +
                element_offset(params.dv, seq.batch, seq.k_row0 + k.key0, hk);
  const auto dk_row = [&](int r) { return dk + r * params.dk.row_stride; };
  const auto dv_row = [&](int r) { return dv + r * params.dv.row_stride; };
  store_rows<Type>(k.dk, t.d_pad, live, t.d, nullptr, dk_row);
  store_rows<Type>(k.dv, t.dv_pad, live, t.dv, nullptr, dv_row);
  store_zero_rows<Type>(keys - live, t.d, [&](int r) { return dk_row(live + r); });
  store_zero_rows<Type>(keys - live, t.dv, [&](int r) { return dv_row(live + r); });
}

// The pairs each pass runs: the dQ pass pairs a query block with the key tiles that meet
// the keys its rows see, the dK/dV pass a key block with the query blocks that meet the
// rows that see its keys. The one-pass backward asks both, so it runs the same pairs.
inline bool dq_pass_pair(const core::KeyRange& block_keys, int key0) {
  return meets(block_keys, key0, kBlockK);
}
inline bool dkdv_pass_pair(const ScoreRule& rule, const KeyTiles& k, int row0) {
  return k.keys > 0 && meets(rule.rows_of_keys(k.key0, k.keys), row0, kBlockQ);
}

// Query blocks [q_block, q_block + blocks) (blocks <= kGroupB) of (sequence b, head h): dq.
template <ElementType Type>
void backward_dq_block(const core::BackwardParams& params, int b, int h, int q_block,
                       int blocks, float* scratch) {
  const SequenceRows seq = sequence_rows(params, b);
  const int hk = h / (params.nheads / params.nheads_k);
  BackwardTiles t(scratch, params.head_dim, params.head_dim_v, kBf16Products<Type>);
  [[maybe_unused]] const auto products = product_scope<Type>(kBf16Products<Type>);
  const ScoreRule rule = score_rule(params, b, h, seq.seqlen_q, seq.seqlen_k);

  int loaded = 0;
  core::KeyRange keys{seq.seqlen_k, 0};
  core::KeyRange block_keys[kGroupB];
  for (; loaded < blocks; ++loaded) {
    const int row0 = (q_block + loaded) * kBlockQ;
    if (row0 >= seq.seqlen_q) break;
    QueryTiles& q = t.query[loaded];
    load_query_block<Type>(params, seq, h, row0, std::min(kBlockQ, seq.seqlen_q - row0),
                           rule.scale, t, &q);
    zero(q.dq, static_cast<size_t>(kBlockQ) * t.d_pad);
    block_keys[loaded] = rule.keys_of_rows(q.row0, q.rows);
    if (block_keys[loaded].begin >= block_keys[loaded].end) continue;
    keys = {std::min(keys.begin, block_keys[loaded].begin),
            std::max(keys.end, block_keys[loaded].end)};
  }

  // Tiles at multiples of kBlockK, as in the forward, each loaded once for the blocks.
  KeyTiles k = t.key_tiles(0);
  for (int key0 = keys.begin / kBlockK * kBlockK; key0 < keys.end; key0 += kBlockK) {
    bool tile_loaded = false;
    for (int g = 0; g < loaded; ++g) {
      if (!dq_pass_pair(block_keys[g], key0)) continue;
      if (!tile_loaded) {
        load_key_block<Type>(params, seq, hk, key0, std::min(kBlockK, seq.seqlen_k - key0),
                             true, t, &k);
        tile_loaded = true;
      }
      pair_gradients<false, true>(rule, k, t.query[g], t);
    }
  }

  for (int g = 0; g < loaded; ++g) store_dq<Type>(params, seq, h, t.query[g], t);
}

// Key blocks [k_block, k_block + blocks) (blocks <= kGroupB) of (sequence b, KV head hk):
// dk and dv, summed over the group of query heads.
template <ElementType Type>
void backward_dkdv_block(const core::BackwardParams& params, int b, int hk, int k_block,
                         int blocks, float* scratch) {
  const SequenceRows seq = sequence_rows(params, b);
  BackwardTiles t(scratch, params.head_dim, params.head_dim_v, kBf16Products<Type>);
  [[maybe_unused]] const auto products = product_scope<Type>(kBf16Products<Type>);

  int loaded = 0;
  KeyTiles key[kGroupB];
  for (; loaded < blocks; ++loaded) {
    const int key0 = (k_block + loaded) * kBlockK;
    if (key0 >= seq.rows_k) break;
    key[loaded] = t.key_tiles(loaded);
    start_key_block<Type>(params, seq, hk, key0, false, t, &key[loaded]);
  }

  const int group = params.nheads / params.nheads_k;
  QueryTiles& q = t.query[0];
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    const ScoreRule rule = score_rule(params, b, h, seq.seqlen_q, seq.seqlen_k);
    core::KeyRange rows{seq.seqlen_q, 0};
    for (int g = 0; g < loaded; ++g) {
      const KeyTiles& k = key[g];
      if (k.keys == 0) continue;
      const core::KeyRange block_rows = rule.rows_of_keys(k.key0, k.keys);
      if (block_rows.begin >= block_rows.end) continue;
      rows = {std::min(rows.begin, block_rows.begin), std::max(rows.end, block_rows.end)};
    }
    // Query blocks at multiples of kBlockQ, whatever the key block, each loaded once for
    // the key blocks.
    for (int row0 = rows.begin / kBlockQ * kBlockQ; row0 < rows.end; row0 += kBlockQ) {
      bool block_loaded = false;
      for (int g = 0; g < loaded; ++g) {
        if (!dkdv_pass_pair(rule, key[g], row0)) continue;
        if (!block_loaded) {
          load_query_block<Type>(params, seq, h, row0, std::min(kBlockQ, seq.seqlen_q - row0),
                                 rule.scale, t, &q);
          block_loaded = true;
        }
        pair_gradients<true, false>(rule, key[g], q, t);
      }
    }
  }

  for (int g = 0; g < loaded; ++g) store_dkdv<Type>(params, seq, hk, key[g], t);
}

// Key blocks of a sequence of `rows_k` keys.
inline int key_blocks_of(int rows_k) { return (rows_k + kBlockK - 1) / kBlockK; }

// All of (sequence b, KV head hk) in one task: dk and dv, and dq of the group's query
// heads. Every K/V tile is loaded once (with K^T) and keeps its dK and dV in scratch;
// query heads ascending, then query blocks ascending, each loaded once and paired with the
// key blocks ascending. So dK and dV take their pairs in the dK/dV pass's order and dQ in
// the dQ pass's, and a pair that only one pass runs runs only that pass's products.
template <ElementType Type>
void backward_one_pass(const core::BackwardParams& params, int b, int hk, float* scratch) {
  const SequenceRows seq = sequence_rows(params, b);
  const int key_blocks = key_blocks_of(seq.rows_k);
  BackwardTiles t(scratch, params.head_dim, params.head_dim_v, kBf16Products<Type>, 1,
                  key_blocks);
  [[maybe_unused]] const auto products = product_scope<Type>(kBf16Products<Type>);
  const auto key_block = [&](int g) {
    KeyTiles k = t.key_tiles(g);
    k.key0 = g * kBlockK;
    k.keys = live_keys(seq, k.key0);
    return k;
  };
  for (int g = 0; g < key_blocks; ++g) {
    KeyTiles k = t.key_tiles(g);
    start_key_block<Type>(params, seq, hk, g * kBlockK, true, t, &k);
  }

  const int group = params.nheads / params.nheads_k;
  QueryTiles& q = t.query[0];
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    const ScoreRule rule = score_rule(params, b, h, seq.seqlen_q, seq.seqlen_k);
    for (int row0 = 0; row0 < seq.seqlen_q; row0 += kBlockQ) {
      load_query_block<Type>(params, seq, h, row0, std::min(kBlockQ, seq.seqlen_q - row0),
                             rule.scale, t, &q);
      zero(q.dq, static_cast<size_t>(kBlockQ) * t.d_pad);
      const core::KeyRange block_keys = rule.keys_of_rows(q.row0, q.rows);
      for (int g = 0; g < key_blocks; ++g) {
        KeyTiles k = key_block(g);
        const bool dq = dq_pass_pair(block_keys, k.key0);
        const bool dkdv = dkdv_pass_pair(rule, k, row0);
        if (dq && dkdv) {
          pair_gradients<true, true>(rule, k, q, t);
        } else if (dq) {
          pair_gradients<false, true>(rule, k, q, t);
        } else if (dkdv) {
          pair_gradients<true, false>(rule, k, q, t);
        }
      }
      store_dq<Type>(params, seq, h, q, t);
    }
  }

  for (int g = 0; g < key_blocks; ++g) store_dkdv<Type>(params, seq, hk, key_block(g), t);
}

inline size_t backward_scratch_floats(const core::BackwardParams& params) {
  return BackwardTiles(nullptr, params.head_dim, params.head_dim_v,
                       uses_bf16_products(params.dtype))
      .floats;
}

inline size_t backward_one_pass_scratch_floats(const core::BackwardParams& params) {
  return BackwardTiles(nullptr, params.head_dim, params.head_dim_v,
                       uses_bf16_products(params.dtype), 1,
                       key_blocks_of(longest_key_sequence(params)))
      .floats;
}

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
