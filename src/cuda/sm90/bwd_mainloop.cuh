// One step of the Hopper backward's MMA warpgroups: a query block (of one query head) against
// the block's keys. S^T and dP^T (the key split: pass by pass of 64 queries), P^T and dS^T
// element-wise in registers, dS^T (and P^T) to shared memory, dV and dK, dQ = dS K, and dQ
// handed to the writer's stash or added by the warps (bwd_kernel.cuh's header has the
// schedule). A BwdMmaStep holds what every step of a block reads (positions, descriptors,
// addresses) and references to what the steps accumulate, which the kernel owns: dK, dV and
// the deterministic turn not yet passed on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/mask.hpp"
#include "core/params.hpp"
#include "cuda/backward_workspace.hpp"
#include "cuda/bwd_deterministic_plan.hpp"
#include "cuda/common/bwd_elementwise.cuh"
#include "cuda/common/dropout.cuh"
#include "cuda/common/score_transform.cuh"
#include "cuda/prim/atomics.cuh"
#include "cuda/prim/math.cuh"
#include "cuda/prim/named_barrier.cuh"
#include "cuda/prim/shared_access.cuh"
#include "cuda/prim/uniform.cuh"
#include "cuda/sm90/bwd_shape.cuh"
#include "cuda/sm90/mbarrier.cuh"
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

template <class T, int D, bool kDropout, bool kDeterministic, class Sequence>
struct BwdMmaStep {
  using S = BwdShape<D, kDeterministic, kDropout>;
  using QTile = typename S::QTile;
  using KTile = typename S::KTile;
  using PTile = typename S::PTile;
  static constexpr int kBlockM = S::kBlockM, kBlockN = S::kBlockN;
  static constexpr int kNT = S::kSdpQueries / 8;      // 8-query tiles of a warp's S^T rows
  static constexpr int kMSteps = S::kSdpQueries / 16;  // k16 steps over those queries
  // Operand views (wgmma_descriptor.cuh), by k16 steps.
  using KRows = WgmmaOperand<KTile, Major::kK>;   // A of S^T / dP^T: keys x head dim
  using QRows = WgmmaOperand<QTile, Major::kK>;   // B of S^T / dP^T: queries x head dim
  using PRows = WgmmaOperand<PTile, Major::kK>;   // A of dV / dK (column split): keys x queries
  using QCols = WgmmaOperand<QTile, Major::kMN>;  // B of dV / dK: k = queries, n = head dim
  using PCols = WgmmaOperand<PTile, Major::kMN>;  // A of dQ: k = keys, m = queries
  using KCols = WgmmaOperand<KTile, Major::kMN>;  // B of dQ: k = keys, n = head dim
  using KvFragments = float[S::kKvCols / 2];

  const core::BackwardParams& p;
  const ScoreScales& sc;
  const BwdWorkspace& w;
  const Sequence& seq;
  int b, n0, seqlen_q, seqlen_k, key_shift;
  // This warpgroup's shares (bwd_kernel.cuh) and this thread's fragment position.
  int key0, sdp_query0, kv_col0, dq_query0, dq_col0;
  int warp_row0, frag_row, frag_col, lane, tid;
  // Shared memory (BwdStorage) in the shared window; stats generic.
  uint32_t q_smem, do_smem, ds_smem, pt_smem;
  float* stats;
  uint32_t stash_smem, stash_bars, scratch_smem;
  // The descriptors that do not change from step to step.
  uint64_t k_rows_desc, v_rows_desc;
  uint32_t q_cols_offset;
  uint64_t ds_cols_desc, k_cols_desc;
  // The dQ accumulator: the deterministic slice, the sequence's first row in it, a row's floats.
  int dq_slice;
  int64_t accum_row0, accum_row_stride;
  KvFragments& dk;
  KvFragments& dv;
  int32_t*& unreleased;  // the dQ turn this warp has yet to pass on

  __device__ __forceinline__ void release_turn() const {
    if (unreleased != nullptr) {
      __syncwarp();
      if (lane == 0) prim::add_release(unreleased, 1);
    }
    unreleased = nullptr;
  }

  // The step of query block m of head h (the block's iteration-th; turn: its deterministic
  // turn). issue_next(BwdNextLoadsAt<point>) issues the next step's loads that
  // S::kNextCopies / kNextStats place at that point of the step (lock step only).
  template <class Masked, class IssueNext>
  __device__ __forceinline__ void run(Masked masked, int h, int m, int iteration, int turn,
                                      IssueNext&& issue_next) const {
    namespace wg = warpgroup;
    const int buffer = iteration % 2;
    // Staggered: whether this warpgroup multiplies the step's dQ, and the step's dS^T buffer
    // (BwdSchedule).
    const bool dq_turn = !S::kStaggered || iteration % 2 == prim::warp_uniform(tid / 128);
    const uint32_t ds_buf = S::kStaggered ? ds_smem + buffer * PTile::kBytes : ds_smem;
    const int m0 = m * kBlockM;
    const uint32_t q_buf = q_smem + buffer * QTile::kBytes;
    const uint32_t do_buf = do_smem + buffer * QTile::kBytes;
    const float alibi_raw = alibi_raw_slope(p, b, h, sc);
    const float* lse2 = stats + buffer * 2 * kBlockM;
    const float* dsum = lse2 + kBlockM;

    const uint64_t do_cols_desc = QCols::descriptor(do_buf + q_cols_offset);
    const uint64_t q_cols_desc = QCols::descriptor(q_buf + q_cols_offset);
    // The K / V rows' and dS^T columns' descriptors: the block's, or with
    // BwdDescriptors::kPerStep derived again from a re-read thread index, so that nothing
    // holds them across steps (BwdShape::kDescriptors). K and V lie at fixed offsets from Q.
    uint64_t k_rows = k_rows_desc, v_rows = v_rows_desc, ds_cols = ds_cols_desc;
    if constexpr (S::kDescriptors == BwdDescriptors::kPerStep) {
      using Storage = BwdStorage<S>;
      const int group = prim::thread_index_fresh() / 128;
      const uint32_t k_smem = q_smem + (offsetof(Storage, k) - offsetof(Storage, q));
      const uint32_t v_smem = q_smem + (offsetof(Storage, v) - offsetof(Storage, q));
      k_rows = KRows::descriptor(k_smem + KTile::byte_offset(S::key0_of(group), 0));
      v_rows = KRows::descriptor(v_smem + KTile::byte_offset(S::key0_of(group), 0));
      ds_cols = PCols::descriptor(ds_smem + PTile::byte_offset(0, S::dq_query0_of(group)));
    }
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
        wg::mma_ss<S::kSdpQueries, T, false, false>(s, KRows::advance(k_rows, ks),
                                                    QRows::advance(q_rows_desc, ks), ks > 0);
        if (ks < S::kEarlyDpSteps) {
          wg::mma_ss<S::kSdpQueries, T, false, false>(dp, KRows::advance(v_rows, ks),
                                                      QRows::advance(do_rows_desc, ks), ks > 0);
        }
      }
      wg::commit_group();
      // Register i of s / dp is element [i / 4][i % 4] of kNT mma.sync-shaped 16 x 8 tiles:
      // key key0 + frag_row + 8 * (i / 2 % 2), query query0 + 8 * (i / 4) + frag_col + i % 2.
      // Dropout: one mask per 64 (or 32) queries, applied to dP^T before the element-wise step
      // and to P^T after it, as in the sm80 kernel; drawn where S::kDropoutDrawBeforeDp says.
      constexpr int kMaskNT = kNT < 8 ? kNT : 8;
      using DropMask =
          std::conditional_t<kDropout, BwdDropoutMask<kMaskNT>, NoDropoutMask>;
      DropMask drop[kNT / kMaskNT];
      auto draw_masks = [&] {
        if constexpr (kDropout) {
#pragma unroll
          for (int mask_part = 0; mask_part < kNT / kMaskNT; ++mask_part) {
            drop[mask_part] = BwdDropoutMask<kMaskNT>(
                DropoutHead(p, b, h), n0 + key0 + warp_row0,
                m0 + query0 + 8 * kMaskNT * mask_part, lane);
          }
        }
      };
      if constexpr (S::kDropoutDrawBeforeDp) draw_masks();
#pragma unroll
      for (int ks = S::kEarlyDpSteps; ks < D / 16; ++ks) {
        wg::mma_ss<S::kSdpQueries, T, false, false>(dp, KRows::advance(v_rows, ks),
                                                    QRows::advance(do_rows_desc, ks), ks > 0);
      }
      wg::commit_group();
      if (part == 0) {
        release_turn();  // the previous step's, after this step's first barrier
        issue_next(BwdNextLoadsAt<BwdNextLoads::kAfterSdp>{});
      }
      if constexpr (!S::kDropoutDrawBeforeDp) draw_masks();
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
      // finished before this step's first barrier (staggered: the dQ product two steps ago,
      // before the last kDsDone); visible to the async proxy after the next.
      if constexpr (S::kStaggered) {
        // The stores' addresses from a re-read thread index: kept across steps, with the
        // buffer's offset, ptxas spilled them.
        const int fresh = prim::thread_index_fresh();
        store_fragments<PTile>(ds_buf, dst, key0 + fresh % 128 / 32 * 16, query0, fresh % 32);
      } else {
        store_fragments<PTile>(ds_buf, dst, key0 + warp_row0, query0, lane);
      }
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
        if (part + 1 < S::kSdpParts || S::kStaggered) {
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
    if constexpr (S::kStaggered) {
      finish_staggered(dq_turn, iteration, ds_buf);
      return;
    }
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
      wg::mma_ss<S::kDqCols, T, true, true>(dq, PCols::advance(ds_cols, ks),
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
      issue_next(BwdNextLoadsAt<BwdNextLoads::kAfterDq>{});
      wg::wait_group<1>();
    } else {
      issue_next(BwdNextLoadsAt<BwdNextLoads::kAfterDq>{});
      wg::wait_group<0>();
      wg::fence_operands(dv);
      wg::fence_operands(dk);
    }
    wg::fence_operands(dq);

    if constexpr (S::kDqWriter) {
      stash_dq(dq, iteration);
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
  }

  // The writer's: this thread's dQ fragments to the stash the writer read kStashBuffers steps
  // ago (once its previous use is over), then tell it.
  __device__ __forceinline__ void stash_dq(const float (&dq)[S::kDqCols / 2],
                                           int iteration) const {
    constexpr int kBuffers = S::kStashBuffers;
    const int buffer = iteration % kBuffers;
    const uint32_t stash = stash_smem + buffer * S::kStashBytes;
    if (iteration >= kBuffers) {
      mbarrier::wait(bwd_stash_empty<S>(stash_bars, buffer), (iteration / kBuffers - 1) & 1);
    }
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
    mbarrier::arrive(bwd_stash_full<S>(stash_bars, buffer));
  }

  // The staggered schedule's end of a step, once this warpgroup's dS^T half is stored (in
  // ds_buf) and its dV and dK products issued. The other warpgroup's turn: say the half is
  // stored and complete the products. This one's: wait for the other half, complete the
  // products (their register operands would otherwise stay live beside dQ's 64 x D
  // accumulator), multiply dQ = dS K over the block's 128 keys and hand it to the writer.
  __device__ __forceinline__ void finish_staggered(bool dq_turn, int iteration,
                                                   uint32_t ds_buf) const {
    namespace wg = warpgroup;
    const int parity = iteration % 2;
    if (!dq_turn) {
      prim::named_arrive(kDsDoneBarrier + parity, S::kMmaThreads);
      wg::wait_group<0>();
      wg::fence_operands(dv);
      wg::fence_operands(dk);
      return;
    }
    prim::named_sync(kDsDoneBarrier + parity, S::kMmaThreads);
    wg::wait_group<0>();
    wg::fence_operands(dv);
    wg::fence_operands(dk);
    float dq[S::kDqCols / 2];
    const uint64_t ds_cols = PCols::descriptor(ds_buf);
    wg::fence();
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks) {
      wg::mma_ss<S::kDqCols, T, true, true>(dq, PCols::advance(ds_cols, ks),
                                            KCols::advance(k_cols_desc, ks), ks > 0);
    }
    wg::commit_group();
    wg::wait_group<0>();
    wg::fence_operands(dq);
    stash_dq(dq, iteration);
  }
};

}  // namespace flashattn::cuda::sm90
