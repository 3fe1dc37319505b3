// The FlashAttention-2 backward main kernel on mma.sync (sm_80 and newer).
//
// Tile scheduler: one block per (key block, KV head, batch entry); it keeps dK and dV of its
// block_n keys in registers for the whole kernel, spread over its warps (each warp a
// kv-share: some keys x some columns); K and V stay in shared memory. GQA/MQA: the block loops
// over the query heads of its KV head, so dK and dV sum the group in registers and are written
// once, without atomics or extra workspace.
//
// Mainloop over the query blocks that see this key block: the set is defined by the forward's
// mask policy (VisibilityMask::blocks with the backward's tile), so a query block is visited iff the
// forward would visit this key block for it, and it is masked iff the forward masks it. Per
// query block (Q and dO double-buffered with cp.async, prefetched one block ahead):
//   S^T = K Q^T, dP^T = V dO^T     each warp an sdp-share (keys x queries) of the block
//   P^T, dS^T                      thread::bwd_element (bwd_elementwise.cuh), stored to
//                                  shared memory: the dK/dV and dQ shares need other
//                                  warps' elements
//   dV += P^T dO, dK += dS^T Q     each warp its kv-share
//   dQ  = dS K                     each warp a dq-share, fp32 atomics into the workspace
//                                  accumulator
// Two barriers per query block: after the Q/dO copy landed, and after P^T / dS^T are stored.
// Dropout (the kDropout instantiation; the other carries no dropout code): the forward's
// keep-test (dropout.cuh) gives Z = 0 or 1/(1-p) per element; dV takes P^T Z and dS^T is
// P^T o (Z dP^T - D), as the reference's backward.
// The scale is applied once: to dK here, to dQ by bwd_convert_dq.
//
// Deterministic mode: before adding into dQ of query block m, the block waits for its turn, so
// every accumulator element receives its additions in one fixed order: the key blocks
// visiting m in decreasing order. With a causal or sliding-window mask the highest of them is
// the first to reach m (it starts nearest the diagonal), so the turns follow the arrival
// order and nobody waits long; without a mask every block reaches m at the same step, and
// blocks of one (head, batch) that started together would wait in a staircase of one dQ
// addition per key block: bwd_block_order.cuh starts them far apart instead. The block computes
// its dQ share before waiting (thread 0's first look at the turn counter is in flight
// meanwhile): the wait covers only the atomics; it passes the turn on at the next barrier it
// meets anyway. A block only waits for blocks of the same (head, batch) started before it
// (bwd_block_order.cuh), which are resident or done.
#pragma once

#include <math_constants.h>

#include <cstdint>
#include <type_traits>

#include "core/mask.hpp"
#include "core/params.hpp"
#include "cuda/common/bwd_block_order.cuh"
#include "cuda/backward_tuning.hpp"
#include "cuda/backward_workspace.hpp"
#include "cuda/prim/atomics.cuh"
#include "cuda/prim/cp_async.cuh"
#include "cuda/prim/math.cuh"
#include "cuda/prim/mma.cuh"
#include "cuda/common/bwd_elementwise.cuh"
#include "cuda/sm80/bwd_gemm.cuh"
#include "cuda/common/bwd_sequence.cuh"
#include "cuda/common/dropout.cuh"
#include "cuda/common/block_mask.cuh"
#include "cuda/common/score_transform.cuh"
#include "cuda/common/smem_tile.cuh"
#include "cuda/common/tile_copy.cuh"

namespace flashattn::cuda::sm80 {

template <int D, class TileT>
struct BwdShape {
  static constexpr BwdTile kTile = TileT::value;
  static_assert(bwd_tile_valid(D, kTile, kBwdSmemMax), "invalid backward tile");
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kWarps = kTile.warps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMinBlocks = kTile.min_blocks_per_sm;
  // The three shares of a warp (backward_tuning.hpp): rows x columns of each product.
  static constexpr int kSdpKeys = kBlockN / kTile.sdp_warps_n;
  static constexpr int kSdpQueries = kBlockM / (kWarps / kTile.sdp_warps_n);
  static constexpr int kKvKeys = kBlockN / kTile.kv_warps_n;
  static constexpr int kKvCols = D / (kWarps / kTile.kv_warps_n);
  static constexpr int kDqQueries = kBlockM / kTile.dq_warps_m;
  static constexpr int kDqCols = D / (kWarps / kTile.dq_warps_m);
  using QTile = SmemTile<kBlockM, D>;        // Q and dO
  using KTile = SmemTile<kBlockN, D>;        // K and V
  using PTile = SmemTile<kBlockN, kBlockM>;  // P^T and dS^T: rows keys, columns queries
  // Per query block, double-buffered: lse in log2 units and D of its rows (fp32).
  static constexpr int kStatsBytes = 2 * 2 * kBlockM * 4;
  static constexpr int kSmemBytes =
      4 * QTile::kBytes + 2 * KTile::kBytes + 2 * PTile::kBytes + kStatsBytes;
  static_assert(kSmemBytes == bwd_smem_bytes(D, kTile), "smem size disagrees with the table");
};

// The lane index, read afresh where it is called (volatile: never hoisted). The query-block
// step derives its ldmatrix, store and atomic addresses from it, so they are recomputed per
// block rather than held across the mainloop, where ptxas had spilled them to local memory.
__device__ __forceinline__ int fresh_lane_id() {
  int lane;
  asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(lane));
  return lane;
}

// Stores a warp's accumulator share (rows row0.., 8-column tiles from chunk chunk0) to a
// PTile as 16-bit elements; each 8-row phase of the stores covers all 32 banks once.
template <class T, class Tile, int MT, int NT>
__device__ __forceinline__ void store_share(unsigned char* tile, const float (&acc)[MT][NT][4],
                                            int row0, int chunk0, int lane) {
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + 16 * m + lane / 4 + 8 * half;
        const int offset = Tile::chunk_offset(row, chunk0 + j) + 2 * (lane % 4);
        *reinterpret_cast<uint32_t*>(tile + offset * 2) =
            prim::thread::pack2<T>(acc[m][j][2 * half], acc[m][j][2 * half + 1]);
      }
    }
  }
}

template <class T, int D, class TileT, bool kDropout>
__global__ void __launch_bounds__(BwdShape<D, TileT>::kThreads, BwdShape<D, TileT>::kMinBlocks)
    bwd_kernel(const __grid_constant__ core::BackwardParams p, const ScoreScales sc,
               const BwdWorkspace w) {
  using S = BwdShape<D, TileT>;
  using QTile = typename S::QTile;
  using KTile = typename S::KTile;
  using PTile = typename S::PTile;
  constexpr int kBlockM = S::kBlockM, kBlockN = S::kBlockN;
  constexpr int kSdpMT = S::kSdpKeys / 16, kSdpNT = S::kSdpQueries / 8;
  constexpr int kKvMT = S::kKvKeys / 16, kKvNT = S::kKvCols / 8;
  constexpr int kDqMT = S::kDqQueries / 16, kDqNT = S::kDqCols / 8;
  extern __shared__ __align__(128) unsigned char smem[];

  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const BwdBlock block =  // bwd_block_order.cuh
      bwd_block(p.deterministic, p.window_left >= 0 || p.window_right >= 0, w.turn_group_blocks);
  const int n = block.n;
  const int hk = block.hk;
  const int b = block.b;

  const BwdSequence<T, kBlockM, kBlockN> seq(p, b, n, w.turn_group_blocks);  // bwd_sequence.cuh
  if (seq.empty()) return;
  const int seqlen_q = seq.seqlen_q, key_rows = seq.key_rows, seqlen_k = seq.seqlen_k;
  const int64_t q_start = seq.q_start, k_start = seq.k_start, q_row0 = seq.q_row0;
  const int m_blocks = seq.m_blocks;
  const int n0 = n * kBlockN;
  const int group = p.nheads / p.nheads_k;

  const uint32_t q_smem = prim::smem_addr(smem);
  const uint32_t do_smem = q_smem + 2 * QTile::kBytes;
  const uint32_t k_smem = do_smem + 2 * QTile::kBytes;
  const uint32_t v_smem = k_smem + KTile::kBytes;
  const uint32_t pt_smem = v_smem + KTile::kBytes;
  const uint32_t ds_smem = pt_smem + PTile::kBytes;
  unsigned char* pt_bytes = smem + (pt_smem - q_smem);
  unsigned char* ds_bytes = smem + (ds_smem - q_smem);
  float* stats = reinterpret_cast<float*>(ds_bytes + PTile::kBytes);  // [buffer][lse2 | D]

  auto load_q_do = [&](int g, int m, int buffer) {
    seq.template copy_q_do_async<D, S::kThreads>(p, hk * group + g, m,
                                                q_smem + buffer * QTile::kBytes,
                                                do_smem + buffer * QTile::kBytes, tid);
  };
  auto load_stats = [&](int g, int m) { return seq.row_stat(p, w, hk * group + g, m, tid); };

  // The warp's shares (backward_tuning.hpp): first rows and columns.
  const int sdp_key0 = (warp % S::kTile.sdp_warps_n) * S::kSdpKeys;
  const int sdp_query0 = (warp / S::kTile.sdp_warps_n) * S::kSdpQueries;
  const int kv_key0 = (warp % S::kTile.kv_warps_n) * S::kKvKeys;
  const int kv_col0 = (warp / S::kTile.kv_warps_n) * S::kKvCols;
  const int dq_query0 = (warp % S::kTile.dq_warps_m) * S::kDqQueries;
  const int dq_col0 = (warp / S::kTile.dq_warps_m) * S::kDqCols;

  const int key_shift = seqlen_k - seqlen_q;  // query + key_shift: the query's diagonal key
  const int64_t accum_row_stride = static_cast<int64_t>(p.nheads) * D;

  float dk[kKvMT][kKvNT][4], dv[kKvMT][kKvNT][4];
  prim::thread::zero(dk);
  prim::thread::zero(dv);
  int32_t* unreleased = nullptr;  // deterministic: the dQ turn this block has yet to pass on

  // One query block m of query head h, its Q and dO in `buffer`.
  auto step = [&](auto masked, int h, int m, int buffer, int turn) {
    const int lane = fresh_lane_id();
    const int m0 = m * kBlockM;
    const uint32_t q_buf = q_smem + buffer * QTile::kBytes;
    const uint32_t do_buf = do_smem + buffer * QTile::kBytes;
    const float alibi_raw = alibi_raw_slope(p, b, h, sc);
    const float* lse2 = stats + buffer * 2 * kBlockM;
    const float* dsum = lse2 + kBlockM;
    using warp::LanePattern;
    using warp::TileLanes;
    // S^T, dP^T: K / V k-minor A, Q / dO k-minor B.
    const TileLanes<KTile, LanePattern::kRows> kv_a_lanes(lane, 0);
    const TileLanes<QTile, LanePattern::kPairs> q_b_lanes(lane, 0);
    const uint32_t k_warp = k_smem + 2 * KTile::fixed_offset(sdp_key0, 0);
    const uint32_t v_warp = v_smem + 2 * KTile::fixed_offset(sdp_key0, 0);
    const uint32_t q_rows = 2 * QTile::fixed_offset(sdp_query0, 0);
    // dV, dK: P^T / dS^T k-minor A, dO / Q k-major B at the warp's columns.
    const TileLanes<PTile, LanePattern::kRows> pt_a_lanes(lane, 0);
    const TileLanes<QTile, LanePattern::kRows> q_kv_lanes(lane, kv_col0 / 8);
    const uint32_t pt_rows = 2 * PTile::fixed_offset(kv_key0, 0);
    // dQ: dS^T k-major A at the warp's queries, K k-major B at the warp's columns.
    const TileLanes<PTile, LanePattern::kPairs> ds_dq_lanes(lane, dq_query0 / 8);
    const TileLanes<KTile, LanePattern::kRows> k_dq_lanes(lane, dq_col0 / 8);

    {
      float s[kSdpMT][kSdpNT][4], dp[kSdpMT][kSdpNT][4];
      prim::thread::zero(s);
      prim::thread::zero(dp);
      warp::mma_smem<T, kSdpMT, kSdpNT, D, false, false>(s, k_warp, kv_a_lanes, q_buf + q_rows,
                                                         q_b_lanes);
      warp::mma_smem<T, kSdpMT, kSdpNT, D, false, false>(dp, v_warp, kv_a_lanes,
                                                         do_buf + q_rows, q_b_lanes);
      // Dropout: dP^T Z before the element-wise step (dS^T = P^T o (dP^T Z - D)), P^T Z
      // after it (dV's operand), on whole tiles. Applied per element inside the step instead,
      // the compiled kernel got one path wrong (bench/RESULTS.md); the CudaDropout backward
      // tests would catch it.
      using DropMask = decltype(bwd_dropout_mask<kDropout, kSdpNT>(p, b, h, 0, 0, lane));
      DropMask drop[kSdpMT];
#pragma unroll
      for (int i = 0; i < kSdpMT; ++i) {
        drop[i] = bwd_dropout_mask<kDropout, kSdpNT>(p, b, h, n0 + sdp_key0 + 16 * i,
                                                     m0 + sdp_query0, lane);
        drop[i].apply(dp[i]);
      }
#pragma unroll
      for (int i = 0; i < kSdpMT; ++i) {
#pragma unroll
        for (int j = 0; j < kSdpNT; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n0 + sdp_key0 + 16 * i + lane / 4 + 8 * (e / 2);
            const int column = sdp_query0 + 8 * j + 2 * (lane % 4) + e % 2;
            const int distance = m0 + column + key_shift - key;  // to the query's diagonal
            bool visible = true;
            if constexpr (std::decay_t<decltype(masked)>::value) {
              visible = core::key_visible_at_distance(distance, key, seqlen_k, p.window_left,
                                                    p.window_right);
            }
            const thread::BwdElement el =
                thread::bwd_element(s[i][j][e], dp[i][j][e], lse2[column], dsum[column], sc,
                                    alibi_raw, distance, visible);
            s[i][j][e] = el.p;
            dp[i][j][e] = el.ds;
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kSdpMT; ++i) drop[i].apply(s[i]);
      // Their previous readers finished before the step's first barrier.
      store_share<T, PTile>(pt_bytes, s, sdp_key0, sdp_query0 / 8, lane);
      store_share<T, PTile>(ds_bytes, dp, sdp_key0, sdp_query0 / 8, lane);
    }
    __syncthreads();  // P^T and dS^T complete

    warp::mma_smem<T, kKvMT, kKvNT, kBlockM, false, true>(dv, pt_smem + pt_rows, pt_a_lanes,
                                                          do_buf, q_kv_lanes);
    warp::mma_smem<T, kKvMT, kKvNT, kBlockM, false, true>(dk, ds_smem + pt_rows, pt_a_lanes,
                                                          q_buf, q_kv_lanes);
    int32_t* turn_counter = nullptr;
    int seen = -1;
    if (p.deterministic) {
      turn_counter = seq.turn_counter(p, w, h, m);
      if (tid == 0) seen = prim::load_acquire(turn_counter);  // issued before the dQ product
    }
    float dq[kDqMT][kDqNT][4];
    prim::thread::zero(dq);
    warp::mma_smem<T, kDqMT, kDqNT, kBlockN, true, true>(dq, ds_smem, ds_dq_lanes, k_smem,
                                                         k_dq_lanes);
    if (p.deterministic) {
      if (tid == 0) {
        while (seen != turn) seen = prim::load_acquire(turn_counter);
      }
      __syncthreads();  // our turn to add into dQ
    }
    float* accum = w.dq_accum + ((q_row0 + m0) * p.nheads + h) * static_cast<int64_t>(D);
#pragma unroll
    for (int i = 0; i < kDqMT; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = dq_query0 + 16 * i + lane / 4 + 8 * half;
        if (m0 + row < seqlen_q) {
#pragma unroll
          for (int j = 0; j < kDqNT; ++j) {
            prim::add_pair(accum + row * accum_row_stride + dq_col0 + 8 * j + 2 * (lane % 4),
                     dq[i][j][2 * half], dq[i][j][2 * half + 1]);
          }
        }
      }
    }
    unreleased = turn_counter;  // passed on at the next barrier
  };
  // The turn after our dQ additions, given at a barrier that follows them in every thread
  // (the next query block's first, or the one after the mainloop): the barrier orders the
  // additions before thread 0's release, which makes them visible to the next block's
  // acquire (cumulativity), without a fence or a barrier of its own.
  auto release_turn = [&]() {
    if (unreleased != nullptr && tid == 0) prim::add_release(unreleased, 1);
    unreleased = nullptr;
  };

  // Prologue: K, V and the first query block's Q, dO in one commit group.
  seq.template copy_kv_async<D, S::kThreads>(p, hk, k_smem, v_smem, tid);
  const int m_first = seq.first_query_block();
  if (m_first < m_blocks) {
    load_q_do(0, m_first, 0);
    if (tid < 2 * kBlockM) stats[tid] = load_stats(0, m_first);
  }
  prim::thread::cp_async_commit();

  constexpr std::true_type masked{};
  constexpr std::false_type unmasked{};
  int g = 0, m = m_first, iteration = 0;
  while (m < m_blocks) {
    int next_g = g, next_m = seq.next_query_block(m);
    if (next_m >= m_blocks) {
      next_g = g + 1;
      next_m = next_g < group ? m_first : m_blocks;
    }
    prim::thread::cp_async_wait<0>();
    __syncthreads();  // this block's Q, dO landed; every warp is done with the other buffer
    release_turn();
    if (next_m < m_blocks) load_q_do(next_g, next_m, (iteration + 1) % 2);
    prim::thread::cp_async_commit();
    const float staged = next_m < m_blocks ? load_stats(next_g, next_m) : 0.f;
    const KeyBlocks kb = seq.blocks_of(m);
    const int h = hk * group + g;
    const int turn = seq.turn(m, kb);
    if (n >= kb.unmasked_begin && n < kb.unmasked_end) {
      step(unmasked, h, m, iteration % 2, turn);
    } else {
      step(masked, h, m, iteration % 2, turn);
    }
    // The other buffer's last readers finished before this iteration's first barrier.
    if (tid < 2 * kBlockM) stats[((iteration + 1) % 2) * 2 * kBlockM + tid] = staged;
    g = next_g;
    m = next_m;
    ++iteration;
  }
  prim::thread::cp_async_wait<0>();
  if (unreleased != nullptr) {
    __syncthreads();
    release_turn();
  }

  // Epilogue: dK (scaled) and dV rows of this warp's share, zero for keys nobody attends.
  T* dk_out = const_cast<T*>(seq.base(p.dk, hk, k_start));
  T* dv_out = const_cast<T*>(seq.base(p.dv, hk, k_start));
#pragma unroll
  for (int i = 0; i < kKvMT; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int key = n0 + kv_key0 + 16 * i + lane / 4 + 8 * half;
      if (key < key_rows) {
#pragma unroll
        for (int j = 0; j < kKvNT; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = kv_col0 + 8 * j + 2 * (lane % 4) + e;
            dk_out[key * p.dk.row_stride + col] =
                static_cast<T>(dk[i][j][2 * half + e] * p.scale);
            dv_out[key * p.dv.row_stride + col] = static_cast<T>(dv[i][j][2 * half + e]);
          }
        }
      }
    }
  }
}

}  // namespace flashattn::cuda::sm80
