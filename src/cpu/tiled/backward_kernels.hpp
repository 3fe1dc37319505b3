// The FlashAttention-2 backward on the CPU, in two passes so that no output is shared
// between threads (always deterministic, no atomics):
//   dK/dV pass, one task per (sequence, KV head, key block): for each query head of the
//     group and each query block that sees the keys, recompute P from the saved lse,
//     dP = dO V^T, dS = P * (dP - D), then dV += P^T dO and dK += dS^T Q;
//   dQ pass, one task per (sequence, head, query block): the same P and dS, then
//     dQ += dS K.
// D = rowsum(dO * O) is recomputed per query block, so memory stays a few tiles per
// thread. Score tiles are key-major (see scores.hpp).
//
// With bf16 products (gemm_bf16.hpp) every product takes bf16 operands packed from the
// fp32 tiles (after a non-finite value was set aside), and dQ is kept transposed
// (dQ^T += K^T dS) so that dS goes in as row pairs of the key-major tile; dK and dV take P
// and dS key-major, their rows rounded to bf16 in place order.
#pragma once

#include "cpu/tiled/gemm.hpp"
#include "cpu/tiled/gemm_bf16.hpp"
#include "cpu/tiled/nonfinite.hpp"
#include "cpu/tiled/scores.hpp"
#include "cpu/tiled/tile_config.hpp"
#include "cpu/tiled/tile_io.hpp"

namespace flashattn::cpu::tiled::FA_TILED_ISA {

struct BackwardTiles {
  bool bf16;  // the tile products run in bf16 (the tiles at the end are carved)
  int d, dv, d_pad, dv_pad;
  int d_bf16, dv_bf16;  // d and dv padded to kBf16Depth
  float* q_rows;    // [kBlockQ][d_pad]
  float* qt;        // [d][kBlockQ]
  float* do_rows;   // [kBlockQ][dv_pad]
  float* dot;       // [dv][kBlockQ]: dO^T
  float* k;         // [kBlockK][d_pad]
  float* v;         // [kBlockK][dv_pad]
  float* p;         // [kBlockK][kBlockQ]: scores, then P
  float* ds;        // [kBlockK][kBlockQ]: dP, then dS (softmax scale included)
  float* pz;        // [kBlockK][kBlockQ]: dropout factors Z, then P * Z
  float* cap_grad;  // [kBlockK][kBlockQ]: 1 - tanh^2 of the softcap
  float* dq;        // [kBlockQ][d_pad]; bf16 products: dQ^T, [d_pad][kBlockQ]
  float* dk;        // [kBlockK][d_pad]
  float* dv_acc;    // [kBlockK][dv_pad]
  float* lse;       // [kBlockQ]: lse, +inf for rows without keys and padding
  float* delta;     // [kBlockQ]: D = rowsum(dO * O)
  float* out_row;   // [dv_pad]
  float* aside;     // [max(kBlockK, kBlockQ)][max(d_pad, dv_pad)]: an operand as loaded,
                    // when its non-finite values are set aside (nonfinite.hpp)
  // bf16 products only: A operands (bf16 rows, depth contiguous) and B operands (pairs).
  uint16_t* k16 = nullptr;        // [kBlockK][d_bf16]: K, for S^T = K Q^T
  uint16_t* v16 = nullptr;        // [kBlockK][dv_bf16]: V, for dP^T = V dO^T
  uint16_t* kt16 = nullptr;       // [d_pad][kBlockK]: K^T, for dQ^T += K^T dS
  uint16_t* p16 = nullptr;        // [kBlockK][kBlockQ]: P (or P * Z), for dV += P^T dO
  uint16_t* ds16 = nullptr;       // [kBlockK][kBlockQ]: dS, for dK += dS^T Q
  uint32_t* qt_pairs = nullptr;   // [d_bf16 / 2][kBlockQ]
  uint32_t* dot_pairs = nullptr;  // [dv_bf16 / 2][kBlockQ]
  uint32_t* q_pairs = nullptr;    // [kBlockQ / 2][d_pad]
  uint32_t* do_pairs = nullptr;   // [kBlockQ / 2][dv_pad]
  uint32_t* ds_pairs = nullptr;   // [kBlockK / 2][kBlockQ]
  size_t floats;

  BackwardTiles(float* base, int head_dim, int head_dim_v, bool bf16_products)
      : bf16(bf16_products),
        d(head_dim),
        dv(head_dim_v),
        d_pad(round_up_lanes(d)),
        dv_pad(round_up_lanes(dv)),
        d_bf16(round_up(d, kBf16Depth)),
        dv_bf16(round_up(dv, kBf16Depth)) {
    Carver carve(base);
    const size_t score_tile = static_cast<size_t>(kBlockK) * kBlockQ;
    q_rows = carve.take(static_cast<size_t>(kBlockQ) * d_pad);
    qt = carve.take(static_cast<size_t>(d) * kBlockQ);
    do_rows = carve.take(static_cast<size_t>(kBlockQ) * dv_pad);
    dot = carve.take(static_cast<size_t>(dv) * kBlockQ);
    k = carve.take(static_cast<size_t>(kBlockK) * d_pad);
    v = carve.take(static_cast<size_t>(kBlockK) * dv_pad);
    p = carve.take(score_tile);
    ds = carve.take(score_tile);
    pz = carve.take(score_tile);
    cap_grad = carve.take(score_tile);
    dq = carve.take(static_cast<size_t>(kBlockQ) * d_pad);
    dk = carve.take(static_cast<size_t>(kBlockK) * d_pad);
    dv_acc = carve.take(static_cast<size_t>(kBlockK) * dv_pad);
    lse = carve.take(kBlockQ);
    delta = carve.take(kBlockQ);
    out_row = carve.take(dv_pad);
    aside = carve.take(static_cast<size_t>(std::max(kBlockK, kBlockQ)) * std::max(d_pad, dv_pad));
    if (bf16) {
      k16 = carve.take_u16(static_cast<size_t>(kBlockK) * d_bf16);
      v16 = carve.take_u16(static_cast<size_t>(kBlockK) * dv_bf16);
      kt16 = carve.take_u16(static_cast<size_t>(d_pad) * kBlockK);
      p16 = carve.take_u16(score_tile);
      ds16 = carve.take_u16(score_tile);
      qt_pairs = carve.take_u32(static_cast<size_t>(d_bf16 / 2) * kBlockQ);
      dot_pairs = carve.take_u32(static_cast<size_t>(dv_bf16 / 2) * kBlockQ);
      q_pairs = carve.take_u32(static_cast<size_t>(kBlockQ / 2) * d_pad);
      do_pairs = carve.take_u32(static_cast<size_t>(kBlockQ / 2) * dv_pad);
      ds_pairs = carve.take_u32(score_tile / 2);
    }
    floats = carve.used();
  }
};

// Loads query rows [row0, row0 + rows) of head h: Q, scale * Q^T (so the score tiles
// come out scaled), dO and dO^T, the saved lse and D = rowsum(dO * O).
template <ElementType Type>
void load_query_block(const core::BackwardParams& params, const SequenceRows& seq, int h,
                      int row0, int rows, float rule_scale, const BackwardTiles& t) {
  using Element = Storage<Type>;
  const auto rows_of = [&](const core::Operand& op) {
    const Element* base = static_cast<const Element*>(op.ptr) +
                          element_offset(op, seq.batch, seq.q_row0 + row0, h);
    return [base, &op](int r) { return base + r * op.row_stride; };
  };
  const int cols = round_up_lanes(rows);
  pack_rows<Type>(rows_of(params.q), rows, t.d, t.d_pad, t.q_rows, t.d_pad);
  pack_rows<Type>(rows_of(params.dout), rows, t.dv, t.dv_pad, t.do_rows, t.dv_pad);
  if (t.bf16) {
    pack_column_pairs([&](int c) { return t.q_rows + c * t.d_pad; }, rows, t.d, cols, t.d_bf16,
                      t.qt_pairs, kBlockQ);
    pack_column_pairs([&](int c) { return t.do_rows + c * t.dv_pad; }, rows, t.dv, cols,
                      t.dv_bf16, t.dot_pairs, kBlockQ);
  } else {
    transpose(t.q_rows, t.d_pad, rows, t.d, cols, t.qt, kBlockQ, rule_scale);
    transpose(t.do_rows, t.dv_pad, rows, t.dv, cols, t.dot, kBlockQ);
  }

  const auto out_row = rows_of(params.out);
  for (int i = 0; i < rows; ++i) {
    const float saved = params.lse[lse_offset(params, seq, h, row0 + i)];
    t.lse[i] = saved == -INFINITY ? INFINITY : saved;
    to_float<Type>(out_row(i), t.out_row, t.dv);
    const float* dout = t.do_rows + i * t.dv_pad;
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
    t.delta[i] = sum;
  }
  for (int i = rows; i < cols; ++i) {
    t.lse[i] = INFINITY;
    t.delta[i] = 0.f;
  }
}

// From raw tiles t.p = K Q^T and t.ds = V dO^T of keys [key0, key0 + keys) and the loaded
// query block: t.p becomes P, t.ds becomes scale * dS (softcap's chain rule included).
// Returns the tile dV needs: P, or P * Z with dropout. In a partly masked tile the masked
// pairs of P, P * Z and dS are set to exactly 0: computed, they would be 0 * NaN there when
// the row's lse, D, dO or the key's V is not finite.
inline const float* tile_gradients(const ScoreRule& rule, int row0, int rows, int key0,
                                   int keys, const BackwardTiles& t) {
  const int cols = round_up_lanes(rows);
  const bool softcap = rule.softcap > 0.f;
  finish_scores(rule, TileColumns::consecutive(row0, rows), cols, key0, keys, t.p, kBlockQ,
                softcap ? t.cap_grad : nullptr);
  probabilities_from_lse(t.p, kBlockQ, keys, cols, t.lse);
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
      VecF grad = load(p + c) * (load(ds + c) - load(t.delta + c));
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

// The loaded K and V tile (keys rows) as the A operands of the score products, in bf16.
inline void pack_key_tile_bf16(int keys, const BackwardTiles& t) {
  pack_bf16_rows([&](int j) { return t.k + j * t.d_pad; }, keys, t.d, round_up(keys, kBf16Rows),
                 t.d_bf16, t.k16, t.d_bf16);
  pack_bf16_rows([&](int j) { return t.v + j * t.dv_pad; }, keys, t.dv,
                 round_up(keys, kBf16Rows), t.dv_bf16, t.v16, t.dv_bf16);
}

// The raw score tiles of keys x cols: t.p = scale * K Q^T and t.ds = V dO^T.
inline void score_products(int keys, int cols, float scale, const BackwardTiles& t) {
  if (t.bf16) {
    const int rows = round_up(keys, kBf16Rows);
    gemm_bf16(rows, cols, t.d_bf16, t.k16, t.d_bf16, t.qt_pairs, kBlockQ, t.p, kBlockQ, false);
    scale_tile(t.p, kBlockQ, keys, cols, scale);
    gemm_bf16(rows, cols, t.dv_bf16, t.v16, t.dv_bf16, t.dot_pairs, kBlockQ, t.ds, kBlockQ,
              false);
  } else {
    gemm<ALayout::kRowMajor>(keys, cols, t.d, t.k, t.d_pad, t.qt, kBlockQ, t.p, kBlockQ, false);
    gemm<ALayout::kRowMajor>(keys, cols, t.dv, t.v, t.dv_pad, t.dot, kBlockQ, t.ds, kBlockQ,
                             false);
  }
}

// A gradient product C += A * B whose B operand is a loaded fp32 tile (depth rows x b_cols
// of `b`, row stride ldb): product() runs it, reading b as it is then. A partly masked tile
// sets b's non-finite values aside first (nonfinite.hpp) and adds their terms afterwards
// through add(m, n, term), with a_entry(m, k) the A entry and pair(m, k) the (query row,
// key) of output row m and depth k.
template <typename Product, typename AEntry, typename Pair, typename Add>
void gradient_product(const ScoreRule& rule, bool partly_masked, int rows, int depth, float* b,
                      int64_t ldb, int b_cols, Product product, AEntry a_entry, Pair pair,
                      Add add, float* aside) {
  const bool set_aside = partly_masked && has_nonfinite(b, ldb, depth, b_cols);
  if (set_aside) set_aside_nonfinite(b, ldb, depth, b_cols, aside);
  product();
  if (!set_aside) return;
  add_set_aside(rows, depth, b_cols, aside, ldb, a_entry,
                [&](int m, int k) {
                  const auto [row, key] = pair(m, k);
                  return row_sees(rule, row, key);
                },
                add);
}

// add() of gradient_product for a row-major C.
inline auto add_to(float* c, int64_t ldc) {
  return [c, ldc](int m, int n, float term) { c[m * ldc + n] += term; };
}

template <ElementType Type>
void backward_dq_block(const core::BackwardParams& params, int b, int h, int q_block,
                       float* scratch) {
  using Element = Storage<Type>;
  const SequenceRows seq = sequence_rows(params, b);
  const int row0 = q_block * kBlockQ;
  if (row0 >= seq.seqlen_q) return;
  const int rows = std::min(kBlockQ, seq.seqlen_q - row0);
  const int cols = round_up_lanes(rows);
  const int hk = h / (params.nheads / params.nheads_k);
  const BackwardTiles t(scratch, params.head_dim, params.head_dim_v, kBf16Products<Type>);
  [[maybe_unused]] const auto products = product_scope<Type>(kBf16Products<Type>);
  const ScoreRule rule = score_rule(params, b, h, seq.seqlen_q, seq.seqlen_k);
  load_query_block<Type>(params, seq, h, row0, rows, rule.scale, t);
  zero(t.dq, static_cast<size_t>(kBlockQ) * t.d_pad);

  const Element* k = static_cast<const Element*>(params.k.ptr) +
                     element_offset(params.k, seq.batch, seq.k_row0, hk);
  const Element* v = static_cast<const Element*>(params.v.ptr) +
                     element_offset(params.v, seq.batch, seq.k_row0, hk);
  const core::KeyRange range = rule.keys_of_rows(row0, rows);
  // Tiles at multiples of kBlockK, as in the forward.
  for (int key0 = range.begin / kBlockK * kBlockK; key0 < range.end; key0 += kBlockK) {
    const int keys = std::min(kBlockK, range.end - key0);
    pack_rows<Type>([&](int j) { return k + (key0 + j) * params.k.row_stride; }, keys, t.d,
                    t.d_pad, t.k, t.d_pad);
    pack_rows<Type>([&](int j) { return v + (key0 + j) * params.v.row_stride; }, keys, t.dv,
                    t.dv, t.v, t.dv_pad);
    if (t.bf16) pack_key_tile_bf16(keys, t);
    score_products(keys, cols, rule.scale, t);
    tile_gradients(rule, row0, rows, key0, keys, t);
    const bool partly_masked = !rule.block_fully_visible(row0, rows, key0, keys);
    const auto ds_entry = [&](int m, int k) { return t.ds[k * kBlockQ + m]; };
    const auto pair = [&](int m, int k) { return std::pair{row0 + m, key0 + k}; };
    if (t.bf16) {
      // dQ^T += K^T dS: dS as row pairs of the key-major tile.
      const int depth = round_up(keys, kBf16Depth);
      gradient_product(
          rule, partly_masked, rows, keys, t.k, t.d_pad, t.d,
          [&] {
            pack_bf16_columns([&](int j) { return t.k + j * t.d_pad; }, keys, t.d, depth,
                              t.d_pad, t.kt16, kBlockK);
            pack_row_pairs([&](int j) { return t.ds + j * kBlockQ; }, keys, rows, depth, cols,
                           t.ds_pairs, kBlockQ);
            gemm_bf16(t.d_pad, cols, depth, t.kt16, kBlockK, t.ds_pairs, kBlockQ, t.dq, kBlockQ,
                      true);
          },
          ds_entry, pair, [&](int m, int n, float term) { t.dq[n * kBlockQ + m] += term; },
          t.aside);
    } else {
      // dQ += dS K: dS is the transpose of the key-major tile (column-major A).
      gradient_product(
          rule, partly_masked, rows, keys, t.k, t.d_pad, t.d,
          [&] {
            gemm<ALayout::kColMajor>(rows, t.d_pad, keys, t.ds, kBlockQ, t.k, t.d_pad, t.dq,
                                     t.d_pad, true);
          },
          ds_entry, pair, add_to(t.dq, t.d_pad), t.aside);
    }
  }

  Element* dq = static_cast<Element*>(params.dq.ptr) +
                element_offset(params.dq, seq.batch, seq.q_row0 + row0, h);
  const auto dq_row = [&](int r) { return dq + r * params.dq.row_stride; };
  if (t.bf16) {
    store_columns<Type>(t.dq, kBlockQ, rows, t.d, nullptr, dq_row);
  } else {
    store_rows<Type>(t.dq, t.d_pad, rows, t.d, nullptr, dq_row);
  }
}

template <ElementType Type>
void backward_dkdv_block(const core::BackwardParams& params, int b, int hk, int k_block,
                         float* scratch) {
  using Element = Storage<Type>;
  const SequenceRows seq = sequence_rows(params, b);
  const int key0 = k_block * kBlockK;
  if (key0 >= seq.rows_k) return;
  const int keys = std::min(kBlockK, seq.rows_k - key0);
  // Keys past seqused_k are rows of the sequence nobody attends: their gradient is 0.
  const int live = std::clamp(seq.seqlen_k - key0, 0, keys);
  const BackwardTiles t(scratch, params.head_dim, params.head_dim_v, kBf16Products<Type>);
  [[maybe_unused]] const auto products = product_scope<Type>(kBf16Products<Type>);
  zero(t.dk, static_cast<size_t>(kBlockK) * t.d_pad);
  zero(t.dv_acc, static_cast<size_t>(kBlockK) * t.dv_pad);

  if (live > 0) {
    const Element* k = static_cast<const Element*>(params.k.ptr) +
                       element_offset(params.k, seq.batch, seq.k_row0 + key0, hk);
    const Element* v = static_cast<const Element*>(params.v.ptr) +
                       element_offset(params.v, seq.batch, seq.k_row0 + key0, hk);
    pack_rows<Type>([&](int j) { return k + j * params.k.row_stride; }, live, t.d, t.d, t.k,
                    t.d_pad);
    pack_rows<Type>([&](int j) { return v + j * params.v.row_stride; }, live, t.dv, t.dv,
                    t.v, t.dv_pad);
    if (t.bf16) pack_key_tile_bf16(live, t);
    const int group = params.nheads / params.nheads_k;
    for (int h = hk * group; h < (hk + 1) * group; ++h) {
      const ScoreRule rule = score_rule(params, b, h, seq.seqlen_q, seq.seqlen_k);
      const core::KeyRange queries = rule.rows_of_keys(key0, live);
      // Query blocks at multiples of kBlockQ, whatever the key block.
      for (int row0 = queries.begin / kBlockQ * kBlockQ; row0 < queries.end; row0 += kBlockQ) {
        const int rows = std::min(kBlockQ, queries.end - row0);
        const int cols = round_up_lanes(rows);
        load_query_block<Type>(params, seq, h, row0, rows, rule.scale, t);
        score_products(live, cols, rule.scale, t);
        const float* p_for_dv = tile_gradients(rule, row0, rows, key0, live, t);
        const bool partly_masked = !rule.block_fully_visible(row0, rows, key0, live);
        const auto pair = [&](int m, int k) { return std::pair{row0 + k, key0 + m}; };
        const auto p_entry = [&](int m, int k) { return p_for_dv[m * kBlockQ + k]; };
        const auto ds_entry = [&](int m, int k) { return t.ds[m * kBlockQ + k]; };
        if (t.bf16) {
          // The key-major tiles are P^T and dS^T already: their rows, rounded, are A; the
          // query rows of dO and Q, in pairs, are B.
          const int depth = round_up(rows, kBf16Depth), out_rows = round_up(live, kBf16Rows);
          const auto tile_rows = [&](const float* tile) {
            return [tile](int j) { return tile + j * kBlockQ; };
          };
          gradient_product(
              rule, partly_masked, live, rows, t.do_rows, t.dv_pad, t.dv,
              [&] {
                pack_bf16_rows(tile_rows(p_for_dv), live, rows, out_rows, depth, t.p16,
                               kBlockQ);
                pack_row_pairs([&](int c) { return t.do_rows + c * t.dv_pad; }, rows, t.dv,
                               depth, t.dv_pad, t.do_pairs, t.dv_pad);
                gemm_bf16(out_rows, t.dv_pad, depth, t.p16, kBlockQ, t.do_pairs, t.dv_pad,
                          t.dv_acc, t.dv_pad, true);
              },
              p_entry, pair, add_to(t.dv_acc, t.dv_pad), t.aside);
          gradient_product(
              rule, partly_masked, live, rows, t.q_rows, t.d_pad, t.d,
              [&] {
                pack_bf16_rows(tile_rows(t.ds), live, rows, out_rows, depth, t.ds16, kBlockQ);
                pack_row_pairs([&](int c) { return t.q_rows + c * t.d_pad; }, rows, t.d, depth,
                               t.d_pad, t.q_pairs, t.d_pad);
                gemm_bf16(out_rows, t.d_pad, depth, t.ds16, kBlockQ, t.q_pairs, t.d_pad, t.dk,
                          t.d_pad, true);
              },
              ds_entry, pair, add_to(t.dk, t.d_pad), t.aside);
        } else {
          // The key-major tiles are P^T and dS^T already: row-major A, depth = query rows.
          gradient_product(
              rule, partly_masked, live, rows, t.do_rows, t.dv_pad, t.dv,
              [&] {
                gemm<ALayout::kRowMajor>(live, t.dv_pad, rows, p_for_dv, kBlockQ, t.do_rows,
                                         t.dv_pad, t.dv_acc, t.dv_pad, true);
              },
              p_entry, pair, add_to(t.dv_acc, t.dv_pad), t.aside);
          gradient_product(
              rule, partly_masked, live, rows, t.q_rows, t.d_pad, t.d,
              [&] {
                gemm<ALayout::kRowMajor>(live, t.d_pad, rows, t.ds, kBlockQ, t.q_rows, t.d_pad,
                                         t.dk, t.d_pad, true);
              },
              ds_entry, pair, add_to(t.dk, t.d_pad), t.aside);
        }
      }
    }
  }

  const auto rows_of = [&](const core::Operand& op) {
    Element* base = static_cast<Element*>(op.ptr) +
                    element_offset(op, seq.batch, seq.k_row0 + key0, hk);
    return [base, &op](int r) { return base + r * op.row_stride; };
  };
  store_rows<Type>(t.dk, t.d_pad, keys, t.d, nullptr, rows_of(params.dk));
  store_rows<Type>(t.dv_acc, t.dv_pad, keys, t.dv, nullptr, rows_of(params.dv));
}

inline size_t backward_scratch_floats(const core::BackwardParams& params) {
  return BackwardTiles(nullptr, params.head_dim, params.head_dim_v,
                       uses_bf16_products(params.dtype))
      .floats;
}

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
