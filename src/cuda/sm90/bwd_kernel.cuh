// The FlashAttention-2 backward main kernel on Hopper's warpgroup MMA (wgmma, sm_90a).
//
// The same algorithm and schedule as sm80/bwd_kernel.cuh (read it first): one block per
// (key block, KV head, batch entry) keeps dK and dV of its keys in registers and loops over the
// query blocks (and the query heads of its KV head) that see it; dQ is added into the fp32
// workspace accumulator; the deterministic mode (an instantiation of its own) takes turns per
// query block in the same order (or, with the tiles taken from tickets, in the rotated order of
// bwd_block_order.cuh), in one of two accumulator slices where bwd_deterministic_plan.hpp says.
// What changes is who multiplies what. Two warpgroups split the work in one of two ways
// (backward_tuning.hpp's bwd_sm90_tile):
//
//   key split (block_n = 128): warpgroup w owns keys [64w, 64w + 64), the M of
//     S^T  = K Q^T,  dP^T = V dO^T   A = K / V rows from shared memory, B = Q / dO (K-major)
//     P^T, dS^T                      element-wise (thread::bwd_element) in the
//                                    accumulator registers, packed to 16 bits: the
//                                    accumulator layout is the register-A layout of a next
//                                    product (wgmma_fragments.cuh), so they stay in registers
//     dV += P^T dO,  dK += dS^T Q    A = P^T / dS^T from registers, B = dO / Q (MN-major)
//   column split (block_n = 64, head dim 256): both own all 64 keys; warpgroup w computes
//     S^T and dP^T for queries [w block_m / 2, ...), stores P^T and dS^T to shared memory,
//     and takes head-dim columns [w d / 2, ...) of dV and dK (A = P^T / dS^T from there).
//   dQ = dS K, either way with dS^T through shared memory (the other warpgroup's part is
//     needed): A = dS^T read MN-major, B = K (MN-major); warpgroup w takes query rows
//     [64w, 64w + 64) when the block has 128 of them, else head-dim columns [w d / 2, ...).
//
// Q and dO are double-buffered with cp.async as in the sm80 kernel (its tile copy writes the
// 128-byte-swizzle layout wgmma reads), the rows' lse and D staged through registers into a
// double-buffered array; each buffer is made visible to the async proxy (fence.proxy.async)
// before the barrier that publishes it. Per query block the MMA warpgroups meet at two named
// barriers (after the copy landed, after dS^T is stored), plus, with the dQ writer, the stash
// handoff (below). Without the writer each warp adds its own dQ rows, regrouped through a
// small shared-memory scratch so that its atomics cover whole 128-byte lines
// (BwdShape::kScratchBytes), and in the deterministic mode takes its turns itself.
//
// Parts: bwd_shape.cuh (the shape, the register budgets, shared memory as a struct),
// bwd_scheduler.cuh (the order of a block's steps), bwd_dq_writer.cuh (the third warpgroup)
// and bwd_epilogue.cuh (dK and dV out); this file holds the MMA warpgroups' step.
//
// The body is compiled in the sm_90a device pass only; the dispatch (backward.cu) runs this
// kernel only on a device whose code for it came from that pass (DeviceLimits::sm90a).
#pragma once

#include <math_constants.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/params.hpp"
#include "cuda/backward_tuning.hpp"
#include "cuda/backward_workspace.hpp"
#include "cuda/common/bwd_block_order.cuh"
#include "cuda/bwd_deterministic_plan.hpp"
#include "cuda/prim/atomics.cuh"
#include "cuda/prim/cp_async.cuh"
#include "cuda/prim/math.cuh"
#include "cuda/prim/named_barrier.cuh"
#include "cuda/prim/shared_access.cuh"
#include "cuda/common/bwd_elementwise.cuh"
#include "cuda/common/bwd_sequence.cuh"
#include "cuda/common/dropout.cuh"
#include "cuda/common/block_mask.cuh"
#include "cuda/common/score_transform.cuh"
#include "cuda/common/tile_copy.cuh"
#include "cuda/sm90/bwd_dq_writer.cuh"
#include "cuda/sm90/bwd_epilogue.cuh"
#include "cuda/sm90/bwd_scheduler.cuh"
#include "cuda/sm90/bwd_shape.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/registers.cuh"
#include "cuda/sm90/swizzle128_tile.cuh"
#include "cuda/sm90/wgmma.cuh"
#include "cuda/sm90/wgmma_descriptor.cuh"

namespace flashattn::cuda::sm90 {

// Stores a warp's 16-bit register-A fragment set (a[s]: k-step s, i.e. columns
// [col0 + 16s, col0 + 16s + 16) of rows [row0, row0 + 16)) into a Swizzle128Tile; each store
// phase covers 32 banks once.
template <class Tile, int KSteps>
__device__ __forceinline__ void store_fragments(uint32_t tile, const uint32_t (&a)[KSteps][4],
                                                int row0, int col0, int lane) {
#pragma unroll
  for (int s = 0; s < KSteps; ++s) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = row0 + lane / 4 + 8 * (r % 2);
      const int col = col0 + 16 * s + 8 * (r / 2) + 2 * (lane % 4);
      prim::store_shared(tile + Tile::byte_offset(row, col), a[s][r]);
    }
  }
}

template <class T, int D, bool kDropout, bool kDeterministic>
__global__ void __launch_bounds__(BwdShape<D>::kThreads, 1)
    bwd_kernel(const __grid_constant__ core::BackwardParams p, const ScoreScales sc,
               const BwdWorkspace w) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = BwdShape<D, kDeterministic>;
  using QTile = typename S::QTile;
  using KTile = typename S::KTile;
  using PTile = typename S::PTile;
  constexpr int kBlockM = S::kBlockM, kBlockN = S::kBlockN;
  constexpr int kNT = S::kSdpQueries / 8;      // 8-query tiles of a warp's S^T rows
  constexpr int kMSteps = S::kSdpQueries / 16;  // k16 steps over those queries
  namespace wg = warpgroup;
  extern __shared__ unsigned char smem_raw[];

  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int group_index = tid / 128;  // this thread's warpgroup
  // The tile: from the grid index, or in the rotated order from a ticket (bwd_block_order.cuh).
  BwdBlock block = bwd_block(kDeterministic, p.window_left >= 0 || p.window_right >= 0,
                             kDeterministic ? w.turn_group_blocks : 0);
  // The rotated order: only with the dQ writer (bwd_deterministic_plan.hpp).
  constexpr bool kMayRotate = kDeterministic && S::kDqWriter;
  if constexpr (kMayRotate) {
    if (w.rotated) {
      __shared__ int ticket;
      if (tid == 0) ticket = atomicAdd(w.ticket, 1);
      __syncthreads();
      block = bwd_ticket_block(ticket, gridDim.x, gridDim.y);
    }
  }
  const int n = block.n;
  // GQA split among blocks (BwdWorkspace::kv_splits): the grid's y index is (KV head, split).
  const int hk = block.hk / w.kv_splits;
  const int kv_split = block.hk % w.kv_splits;
  const int b = block.b;

  BwdSequence<T, kBlockM, kBlockN> seq(p, b, n,  // bwd_sequence.cuh
                                              kDeterministic ? w.turn_group_blocks : 0);
  if (seq.empty()) return;
  if (kMayRotate && w.rotated) seq.use_rotated_order(p);
  const int seqlen_q = seq.seqlen_q, seqlen_k = seq.seqlen_k;
  const int64_t q_row0 = seq.q_row0;
  const int m_blocks = seq.m_blocks;
  const int n0 = n * kBlockN;
  const int group = p.nheads / p.nheads_k;
  // This block's query heads of the group: all of them, or those of its split.
  const int g_begin = kv_split * group / w.kv_splits;
  const int g_end = (kv_split + 1) * group / w.kv_splits;

  // BwdStorage's members in the shared window, from its base on the 1024-byte swizzle atom.
  using Storage = BwdStorage<S>;
  using DqStorage = BwdDqStorage<S>;
  const uint32_t raw_addr = prim::smem_addr(smem_raw);
  const uint32_t base = (raw_addr + QTile::kAlignment - 1) & ~uint32_t(QTile::kAlignment - 1);
  const uint32_t q_smem = base + offsetof(Storage, q);
  const uint32_t do_smem = base + offsetof(Storage, dout);
  const uint32_t k_smem = base + offsetof(Storage, k);
  const uint32_t v_smem = base + offsetof(Storage, v);
  const uint32_t ds_smem = base + offsetof(Storage, ds_pt);
  const uint32_t pt_smem = ds_smem + PTile::kBytes;  // column split only
  float* stats = reinterpret_cast<float*>(smem_raw + (base + offsetof(Storage, stats) - raw_addr));
  const uint32_t dq_smem = base + offsetof(Storage, dq);
  uint32_t stash_smem = 0, stash_bars = 0, scratch_smem = 0;
  if constexpr (S::kDqWriter) {
    stash_smem = dq_smem + offsetof(DqStorage, stash);            // [2]
    stash_bars = dq_smem + offsetof(DqStorage, stash_full);       // full[2], empty[2]
    static_assert(offsetof(DqStorage, stash_empty) == offsetof(DqStorage, stash_full) + 16);
  } else {
    scratch_smem = dq_smem + offsetof(DqStorage, scratch);  // [warp]
  }
  auto stash_full = [&](int buffer) { return stash_bars + 8 * buffer; };
  auto stash_empty = [&](int buffer) { return stash_bars + 16 + 8 * buffer; };
  if constexpr (S::kDqWriter) {
    if (tid == 0) {
      for (int buffer = 0; buffer < 2; ++buffer) {
        mbarrier::init(stash_full(buffer), S::kMmaThreads);
        mbarrier::init(stash_empty(buffer), S::kWriterHalfThreads);
      }
      mbarrier::fence_init();
    }
    __syncthreads();
  }

  auto load_q_do = [&](int g, int m, int buffer) {
    seq.template copy_q_do_async<D, S::kMmaThreads>(p, hk * group + g, m,
                                                    q_smem + buffer * QTile::kBytes,
                                                    do_smem + buffer * QTile::kBytes, tid);
  };
  auto load_stats = [&](int g, int m) { return seq.row_stat(p, w, hk * group + g, m, tid); };

  // This warpgroup's shares (the rows of each are 64): keys [key0, key0 + 64) of S^T / dP^T
  // against queries [sdp_query0, + kSdpQueries); keys [key0, ...) of dK / dV at columns
  // [kv_col0, + kKvCols); dQ rows [dq_query0, + 64) at columns [dq_col0, + kDqCols).
  const int key0 = S::kKeySplit ? 64 * group_index : 0;
  const int sdp_query0 = S::kKeySplit ? 0 : S::kSdpQueries * group_index;
  const int kv_col0 = S::kKeySplit ? 0 : S::kKvCols * group_index;
  const int dq_query0 = S::kDqSplitsQueries ? 64 * group_index : 0;
  const int dq_col0 = S::kDqSplitsQueries ? 0 : S::kDqCols * group_index;

  // Operand views (wgmma_descriptor.cuh), by k16 steps.
  using KRows = WgmmaOperand<KTile, Major::kK>;   // A of S^T / dP^T: keys x head dim
  using QRows = WgmmaOperand<QTile, Major::kK>;   // B of S^T / dP^T: queries x head dim
  using PRows = WgmmaOperand<PTile, Major::kK>;   // A of dV / dK (column split): keys x queries
  using QCols = WgmmaOperand<QTile, Major::kMN>;  // B of dV / dK: k = queries, n = head dim
  using PCols = WgmmaOperand<PTile, Major::kMN>;  // A of dQ: k = keys, m = queries
  using KCols = WgmmaOperand<KTile, Major::kMN>;  // B of dQ: k = keys, n = head dim
  const uint64_t k_rows_desc = KRows::descriptor(k_smem + KTile::byte_offset(key0, 0));
  const uint64_t v_rows_desc = KRows::descriptor(v_smem + KTile::byte_offset(key0, 0));
  const uint32_t q_cols_offset = QTile::byte_offset(0, kv_col0);
  const uint64_t ds_cols_desc = PCols::descriptor(ds_smem + PTile::byte_offset(0, dq_query0));
  const uint64_t k_cols_desc = KCols::descriptor(k_smem + KTile::byte_offset(0, dq_col0));

  // This thread's fragment rows (of the warpgroup's 64) and columns (wgmma_fragments.cuh).
  const int warp_row0 = (tid % 128) / 32 * 16;
  const int frag_row = warp_row0 + lane / 4;  // + 8 * half
  const int frag_col = 2 * (lane % 4);        // + 8 * tile + e
  const int key_shift = seqlen_k - seqlen_q;
  const int64_t accum_row_stride = static_cast<int64_t>(p.nheads) * D;

  float dk[S::kKvCols / 2], dv[S::kKvCols / 2];
#pragma unroll
  for (int i = 0; i < S::kKvCols / 2; ++i) dk[i] = dv[i] = 0.f;
  // Deterministic, without the writer: each warp waits for the turn and passes it on for its
  // own rows, so that no barrier joins the warps there; a block's turn is over once all its
  // warps added (the counter advances by kTile.warps per block; a counter per warp was no
  // faster). The warp's __syncwarp orders its lanes' additions before lane 0's
  // release, whose wait for them to land stalls the warp: a step gives it once its first
  // products are issued, while they run.
  int32_t* unreleased = nullptr;  // the dQ turn this warp has yet to pass on
  // The release also waits for the loads the warp has in flight: the next step's row
  // statistics, needed only at the end of the step, are loaded after it, which lowered the
  // deterministic mode's cost at d = 256 (bench/RESULTS.md).
  constexpr bool kStatsAfterRelease = kDeterministic && !S::kDqWriter;
  // The accumulator slice this block adds into (bwd_deterministic_plan.hpp).
  const int dq_slice = kDeterministic ? bwd_dq_slice(n, w.dq_slice_bits) : 0;
  const int64_t accum_row0 = q_row0 + dq_slice * static_cast<int64_t>(p.total_q);
  auto release_turn = [&]() {
    if (unreleased != nullptr) {
      __syncwarp();
      if (lane == 0) prim::add_release(unreleased, 1);
    }
    unreleased = nullptr;
  };

  auto step = [&](auto masked, int h, int m, int iteration, int turn, auto&& stage_next_stats) {
    const int buffer = iteration % 2;
    const int m0 = m * kBlockM;
    const uint32_t q_buf = q_smem + buffer * QTile::kBytes;
    const uint32_t do_buf = do_smem + buffer * QTile::kBytes;
    const float alibi_raw =
        p.alibi_slopes == nullptr ? 0.f : p.alibi_slopes[b * p.alibi_batch_stride + h] / sc.unit;
    const float* lse2 = stats + buffer * 2 * kBlockM;
    const float* dsum = lse2 + kBlockM;

    const uint64_t do_cols_desc = QCols::descriptor(do_buf + q_cols_offset);
    const uint64_t q_cols_desc = QCols::descriptor(q_buf + q_cols_offset);
    // dS^T's fragments of a pass, declared here because the key split's last pass's dK
    // product is issued after dQ's (so that the dQ stash is stored while dK multiplies).
    uint32_t dst[kMSteps][4];
#pragma unroll
    for (int part = 0; part < S::kSdpParts; ++part) {
      // S^T and dP^T of this warpgroup's share: queries [query0, query0 + kSdpQueries).
      const int query0 = sdp_query0 + S::kSdpQueries * part;
      float s[S::kSdpQueries / 2], dp[S::kSdpQueries / 2];
      const uint64_t q_rows_desc = QRows::descriptor(q_buf + QTile::byte_offset(query0, 0));
      const uint64_t do_rows_desc = QRows::descriptor(do_buf + QTile::byte_offset(query0, 0));
      wg::fence();
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        wg::mma_ss<S::kSdpQueries, T, false, false>(s, KRows::advance(k_rows_desc, ks),
                                                    QRows::advance(q_rows_desc, ks), ks > 0);
      }
      wg::commit_group();
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        wg::mma_ss<S::kSdpQueries, T, false, false>(dp, KRows::advance(v_rows_desc, ks),
                                                    QRows::advance(do_rows_desc, ks), ks > 0);
      }
      wg::commit_group();
      if (part == 0) {
        release_turn();  // the previous step's, after this step's first barrier
        if constexpr (kStatsAfterRelease) stage_next_stats();
      }
      // Register i of s / dp is element [i / 4][i % 4] of kNT mma.sync-shaped 16 x 8 tiles:
      // key key0 + frag_row + 8 * (i / 2 % 2), query query0 + 8 * (i / 4) + frag_col + i % 2.
      // Dropout: one mask per 64 (or 32) queries, applied to dP^T before the element-wise step
      // and to P^T after it, as in the sm80 kernel.
      constexpr int kMaskNT = kNT < 8 ? kNT : 8;
      using DropMask =
          std::conditional_t<kDropout, BwdDropoutMask<kMaskNT>, NoDropoutMask>;
      DropMask drop[kNT / kMaskNT];
      if constexpr (kDropout) {
#pragma unroll
        for (int mask_part = 0; mask_part < kNT / kMaskNT; ++mask_part) {
          drop[mask_part] = BwdDropoutMask<kMaskNT>(DropoutHead(p, b, h),
                                                     n0 + key0 + warp_row0,
                                                     m0 + query0 + 8 * kMaskNT * mask_part, lane);
        }
      }
      auto dropout_apply = [&](float(&x)[S::kSdpQueries / 2]) {
#pragma unroll
        for (int mask_part = 0; mask_part < kNT / kMaskNT; ++mask_part) {
          drop[mask_part].apply(
              *reinterpret_cast<float(*)[kMaskNT][4]>(&x[4 * kMaskNT * mask_part]));
        }
      };
      // Where (key, query) element i of the share stands: its distance to the query's diagonal
      // and whether the mask shows it.
      auto element_at = [&](int i, int& column, int& distance) {
        const int key = n0 + key0 + frag_row + 8 * (i / 2 % 2);
        column = query0 + 8 * (i / 4) + frag_col + i % 2;
        distance = m0 + column + key_shift - key;
        if constexpr (std::decay_t<decltype(masked)>::value) {
          return core::key_visible_at_distance(distance, key, seqlen_k, p.window_left,
                                               p.window_right);
        }
        return true;
      };
      if (sc.softcap_pre == 0.f) {
        // P^T while dP^T is still being multiplied.
        wg::wait_group<1>();
        wg::fence_operands(s);
#pragma unroll
        for (int i = 0; i < S::kSdpQueries / 2; ++i) {
          int column, distance;
          const bool visible = element_at(i, column, distance);
          s[i] = thread::bwd_probability(s[i], lse2[column], sc, alibi_raw, distance,
                                               visible);
        }
        wg::wait_group<0>();
        wg::fence_operands(dp);
        dropout_apply(dp);
#pragma unroll
        for (int i = 0; i < S::kSdpQueries / 2; ++i) {
          dp[i] = s[i] * (dp[i] - dsum[query0 + 8 * (i / 4) + frag_col + i % 2]);
        }
      } else {
        wg::wait_group<0>();
        wg::fence_operands(s);
        wg::fence_operands(dp);
        dropout_apply(dp);
#pragma unroll
        for (int i = 0; i < S::kSdpQueries / 2; ++i) {
          int column, distance;
          const bool visible = element_at(i, column, distance);
          const thread::BwdElement el = thread::bwd_element(
              s[i], dp[i], lse2[column], dsum[column], sc, alibi_raw, distance, visible);
          s[i] = el.p;
          dp[i] = el.ds;
        }
      }
      dropout_apply(s);
      uint32_t pt[kMSteps][4];
#pragma unroll
      for (int ks = 0; ks < kMSteps; ++ks) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          pt[ks][r] = prim::thread::pack2<T>(s[8 * ks + 2 * r], s[8 * ks + 2 * r + 1]);
          dst[ks][r] = prim::thread::pack2<T>(dp[8 * ks + 2 * r], dp[8 * ks + 2 * r + 1]);
        }
      }

      // dS^T (and P^T) to shared memory: their last readers, the previous step's products,
      // finished before this step's first barrier; visible to the async proxy after the next.
      store_fragments<PTile>(ds_smem, dst, key0 + warp_row0, query0, lane);
      if constexpr (!S::kKeySplit) store_fragments<PTile>(pt_smem, pt, warp_row0, query0, lane);

      // dV += P^T dO, dK += dS^T Q; completed by a later wait (ptxas keeps the register
      // operands of an mma in flight until then). The key split multiplies from registers, pass
      // by pass, the column split from shared memory after the barrier.
      if constexpr (S::kKeySplit) {
        wg::fence_operands(dv);
        wg::fence_operands(dk);
        wg::fence();
#pragma unroll
        for (int ks = 0; ks < kMSteps; ++ks) {
          wg::mma_rs<S::kKvCols, T, true>(dv, pt[ks],
                                          QCols::advance(do_cols_desc, kMSteps * part + ks), true);
        }
        if (part + 1 < S::kSdpParts) {
#pragma unroll
          for (int ks = 0; ks < kMSteps; ++ks) {
            wg::mma_rs<S::kKvCols, T, true>(dk, dst[ks],
                                            QCols::advance(q_cols_desc, kMSteps * part + ks), true);
          }
        }
        wg::commit_group();
      }
    }
    wg::fence_proxy_async_shared();
    int32_t* turn_counter = nullptr;
    int seen = -1;
    if (!S::kDqWriter && kDeterministic) {
      turn_counter = seq.turn_counter(p, w, h, m, dq_slice);
      if (lane == 0) seen = prim::load_acquire(turn_counter);  // in flight during dQ
    }
    prim::named_sync(kMmaBarrier, S::kMmaThreads);  // dS^T (and P^T) complete

    wg::fence();
    if constexpr (!S::kKeySplit) {
      const uint64_t pt_rows_desc = PRows::descriptor(pt_smem);
      const uint64_t ds_rows_desc = PRows::descriptor(ds_smem);
#pragma unroll
      for (int ks = 0; ks < kBlockM / 16; ++ks) {
        wg::mma_ss<S::kKvCols, T, false, true>(dv, PRows::advance(pt_rows_desc, ks),
                                               QCols::advance(do_cols_desc, ks), true);
      }
#pragma unroll
      for (int ks = 0; ks < kBlockM / 16; ++ks) {
        wg::mma_ss<S::kKvCols, T, false, true>(dk, PRows::advance(ds_rows_desc, ks),
                                               QCols::advance(q_cols_desc, ks), true);
      }
    }
    float dq[S::kDqCols / 2];
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks) {
      wg::mma_ss<S::kDqCols, T, true, true>(dq, PCols::advance(ds_cols_desc, ks),
                                            KCols::advance(k_cols_desc, ks), ks > 0);
    }
    wg::commit_group();
    if constexpr (S::kKeySplit) {
      // dK of the last pass behind dQ: the wait below leaves it multiplying while dQ is added
      // or stashed (the step's last wait, at its end, completes it).
#pragma unroll
      for (int ks = 0; ks < kMSteps; ++ks) {
        wg::mma_rs<S::kKvCols, T, true>(
            dk, dst[ks], QCols::advance(q_cols_desc, kMSteps * (S::kSdpParts - 1) + ks), true);
      }
      wg::commit_group();
      wg::wait_group<1>();
    } else {
      wg::wait_group<0>();
      wg::fence_operands(dv);
      wg::fence_operands(dk);
    }
    wg::fence_operands(dq);

    if constexpr (S::kDqWriter) {
      // To the stash the writer read two steps ago (its use iteration / 2 - 1 is then over),
      // then tell it.
      const uint32_t stash = stash_smem + buffer * S::kStashBytes;
      if (iteration >= 2) mbarrier::wait(stash_empty(buffer), (iteration / 2 - 1) & 1);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = dq_query0 + frag_row + 8 * half;
#pragma unroll
        for (int j = 0; j < S::kDqCols / 8; ++j) {
          const int col = dq_col0 + 8 * j + frag_col;
          prim::store_shared(stash + 4 * (row * S::kStashStride + col), dq[4 * j + 2 * half],
                             dq[4 * j + 2 * half + 1]);
        }
      }
      mbarrier::arrive(stash_full(buffer));
    } else {
      if constexpr (kDeterministic) {
        if (lane == 0) {
          const int slice_turn = bwd_slice_turn(turn, w.dq_slice_bits);
          while (seen < slice_turn * S::kTile.warps) seen = prim::load_acquire(turn_counter);
        }
        __syncwarp();  // this warp's turn to add into dQ
      }
      // This warp's 16 dQ rows, 32 columns at a time: fragments into the scratch, then 4 rows
      // per 16-byte atomic instruction. The 16-byte chunks are XOR-swizzled by row % 8 for the
      // fragment stores: over the warp every bank is hit twice, the minimum for 256 bytes (if
      // the hardware split 8-byte stores by half-warp, a swizzle by
      // ((row & 3) << 1) | (row >> 2 & 1) would keep each half conflict-free; not measured).
      // The row reads are conflict-free under any per-row permutation.
      const int query0 = m0 + dq_query0 + warp_row0;
      float* accum = w.dq_accum +
                     ((accum_row0 + query0) * p.nheads + h) * static_cast<int64_t>(D) + dq_col0;
      const int rows = seqlen_q - query0;
      const uint32_t scratch = scratch_smem + tid / 32 * S::kScratchBytes;
      auto scratch_at = [&](int row, int col) {
        return scratch + row * S::kScratchRowBytes + ((col / 4) ^ (row % 8)) * 16 +
               col % 4 * 4;
      };
#pragma unroll
      for (int col0 = 0; col0 < S::kDqCols; col0 += 32) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int i = 4 * (col0 / 8 + j) + 2 * half;
            prim::store_shared(scratch_at(lane / 4 + 8 * half, 8 * j + frag_col), dq[i],
                               dq[i + 1]);
          }
        }
        __syncwarp();
#pragma unroll 1
        for (int row = lane / 8; row < 16; row += 4) {
          const int col = 4 * (lane % 8);
          const float4 sum = prim::load_shared_float4(scratch_at(row, col));
          if (row < rows) {
            atomicAdd(reinterpret_cast<float4*>(accum + row * accum_row_stride + col0 + col), sum);
          }
        }
        __syncwarp();
      }
    }
    if constexpr (S::kKeySplit) {
      wg::wait_group<0>();
      wg::fence_operands(dv);
      wg::fence_operands(dk);
    }
    unreleased = turn_counter;
  };

  // The steps, in order (bwd_scheduler.cuh).
  const BwdStepOrder<decltype(seq)> order(seq, g_begin, g_end);
  const int m_first = order.m_first;
  auto advance = [&](int& g, int& m) { order.advance(g, m); };

  if constexpr (S::kDqWriter) {
    if (group_index == 2) {
      wg::lower_registers<S::kWriterRegisters>();
      const BwdDqWriter<S, kDeterministic, decltype(seq)> writer{
          p, w, seq, order, hk, group, dq_slice, accum_row0, accum_row_stride,
          smem_raw, raw_addr, stash_smem, stash_bars};
      writer.run(tid);
      return;
    }
    wg::raise_registers<S::kMmaRegisters>();
  }

  seq.template copy_kv_async<D, S::kMmaThreads>(p, hk, k_smem, v_smem, tid);
  if (m_first < m_blocks) {
    load_q_do(g_begin, m_first, 0);
    if (tid < 2 * kBlockM) stats[tid] = load_stats(g_begin, m_first);
  }
  prim::thread::cp_async_commit();

  constexpr std::true_type masked{};
  constexpr std::false_type unmasked{};
  int g = g_begin, m = m_first, iteration = 0;
  while (m < m_blocks) {
    int next_g = g, next_m = m;
    advance(next_g, next_m);
    prim::thread::cp_async_wait<0>();
    wg::fence_proxy_async_shared();
    // This block's Q, dO landed; every warpgroup is done with the other buffer.
    prim::named_sync(kMmaBarrier, S::kMmaThreads);
    if (next_m < m_blocks) load_q_do(next_g, next_m, (iteration + 1) % 2);
    prim::thread::cp_async_commit();
    float staged = 0.f;
    auto stage_next_stats = [&]() {
      staged = next_m < m_blocks ? load_stats(next_g, next_m) : 0.f;
    };
    if constexpr (!kStatsAfterRelease) stage_next_stats();
    const KeyBlocks kb = seq.blocks_of(m);
    const int h = hk * group + g;
    const int turn = seq.turn(m, kb);
    if (n >= kb.unmasked_begin && n < kb.unmasked_end) {
      step(unmasked, h, m, iteration, turn, stage_next_stats);
    } else {
      step(masked, h, m, iteration, turn, stage_next_stats);
    }
    if (tid < 2 * kBlockM) stats[((iteration + 1) % 2) * 2 * kBlockM + tid] = staged;
    g = next_g;
    m = next_m;
    ++iteration;
  }
  prim::thread::cp_async_wait<0>();
  if constexpr (!S::kDqWriter) release_turn();

  const BwdEpilogue<T, S> epilogue{p, n0, key0, kv_col0, frag_row, frag_col, tid};
  if (w.kv_splits > 1) {
    epilogue.store_partial(w, seq, b, kv_split, hk, dk, dv);
    return;
  }
  epilogue.store(seq, hk, q_smem, smem_raw + (q_smem - raw_addr), dk, dv);
#endif
}

}  // namespace flashattn::cuda::sm90
