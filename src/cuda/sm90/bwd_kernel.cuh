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
// Q and dO are double-buffered, loaded by TMA on an mbarrier per buffer, or where TMA cannot
// (bwd_q_do_loads.cuh) with cp.async as in the sm80 kernel (its tile copy writes the
// 128-byte-swizzle layout wgmma reads); the rows' lse and D are staged through registers into a
// double-buffered array; each buffer is made visible to the async proxy (fence.proxy.async)
// before the barrier that publishes it. Per query block the MMA warpgroups meet at two named
// barriers (after the copy landed, after dS^T is stored), plus, with the dQ writer, the stash
// handoff (below). Without the writer each warp adds its own dQ rows, regrouped through a
// small shared-memory scratch so that its atomics cover whole 128-byte lines
// (BwdShape::kScratchBytes), and in the deterministic mode takes its turns itself.
//
// That is the lock-step schedule. Where the shape says (BwdSchedule::kStaggered: the default
// mode's kernel with dropout at d = 128) the writer warpgroup's first warp is a producer
// (bwd_producer.cuh) that loads each step's Q, dO and row statistics on full / empty
// mbarriers, dS^T has a buffer per step parity, and the MMA warpgroups take turns at dQ: at
// step i warpgroup i % 2 waits for the other's dS^T half and multiplies the whole 64 x D dQ,
// while the other goes on to step i + 1, so that one's element-wise phase overlaps the other's
// products.
//
// Parts: bwd_shape.cuh (the shape, the register budgets, shared memory as a struct),
// bwd_scheduler.cuh (the order of a block's steps), bwd_q_do_loads.cuh (Q and dO into their
// buffers), bwd_producer.cuh (the staggered schedule's loads), bwd_mainloop.cuh (the MMA
// warpgroups' step), bwd_dq_writer.cuh (the third warpgroup) and bwd_epilogue.cuh (dK and dV
// out); this file sets a block up and runs its loop.
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
#include "cuda/prim/uniform.cuh"
#include "cuda/common/bwd_sequence.cuh"
#include "cuda/common/block_mask.cuh"
#include "cuda/common/score_transform.cuh"
#include "cuda/common/tile_copy.cuh"
#include "cuda/sm90/bwd_dq_writer.cuh"
#include "cuda/sm90/bwd_epilogue.cuh"
#include "cuda/sm90/bwd_mainloop.cuh"
#include "cuda/sm90/bwd_producer.cuh"
#include "cuda/sm90/bwd_q_do_loads.cuh"
#include "cuda/sm90/bwd_scheduler.cuh"
#include "cuda/sm90/bwd_shape.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/registers.cuh"
#include "cuda/sm90/swizzle128_tile.cuh"
#include "cuda/sm90/tma_load.cuh"
#include "cuda/sm90/wgmma.cuh"
#include "cuda/sm90/wgmma_descriptor.cuh"

namespace flashattn::cuda::sm90 {

template <class T, int D, bool kDropout, bool kDeterministic>
__global__ void __launch_bounds__(BwdShape<D>::kThreads, 1)
    bwd_kernel(const __grid_constant__ core::BackwardParams p, const ScoreScales sc,
               const BwdWorkspace w, const __grid_constant__ BwdTmaMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = BwdShape<D, kDeterministic, kDropout>;
  using QTile = typename S::QTile;
  using KTile = typename S::KTile;
  using PTile = typename S::PTile;
  constexpr int kBlockM = S::kBlockM, kBlockN = S::kBlockN;
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
  const uint32_t q_do_full = base + offsetof(Storage, q_do_full);  // q_do_empty follows
  static_assert(offsetof(Storage, q_do_empty) == offsetof(Storage, q_do_full) + 16);
  const uint32_t dq_smem = base + offsetof(Storage, dq);
  uint32_t stash_smem = 0, stash_bars = 0, scratch_smem = 0;
  if constexpr (S::kDqWriter) {
    stash_smem = dq_smem + offsetof(DqStorage, stash);            // [kStashBuffers]
    stash_bars = dq_smem + offsetof(DqStorage, stash_full);       // full[], empty[]
    static_assert(offsetof(DqStorage, stash_empty) ==
                  offsetof(DqStorage, stash_full) + 8 * S::kStashBuffers);
  } else {
    scratch_smem = dq_smem + offsetof(DqStorage, scratch);  // [warp]
  }
  if (tid == 0) {
    for (int buffer = 0; buffer < 2; ++buffer) {
      mbarrier::init(bwd_q_do_full(q_do_full, buffer), S::kStaggered ? 32 : 1);
      if constexpr (S::kStaggered) {
        mbarrier::init(bwd_q_do_empty(q_do_full, buffer), S::kMmaThreads);
      }
      if (S::kDqWriter && buffer < S::kStashBuffers) {
        mbarrier::init(bwd_stash_full<S>(stash_bars, buffer), S::kDqThreads);
        mbarrier::init(bwd_stash_empty<S>(stash_bars, buffer), S::kWriterHalfThreads);
      }
    }
    mbarrier::fence_init();
    if (maps.ok) {
      tma::prefetch_map(&maps.q);
      tma::prefetch_map(&maps.dout);
    }
  }
  __syncthreads();

  // Q and dO by TMA or cp.async (bwd_q_do_loads.cuh).
  BwdQdoLoads<S, decltype(seq)> q_do_loads{maps, p, seq, q_smem, do_smem, q_do_full, tid};
  auto load_q_do = [&](int g, int m, int buffer) {
    q_do_loads.issue(hk * group + g, m, buffer);
  };
  auto load_stats = [&](int g, int m) {
    return seq.row_stat(p, w, hk * group + g, m,
                        S::kFreshStatsIndex ? prim::thread_index_fresh() : tid);
  };

  // This warpgroup's shares (the rows of each are 64): keys [key0, key0 + 64) of S^T / dP^T
  // against queries [sdp_query0, + kSdpQueries); keys [key0, ...) of dK / dV at columns
  // [kv_col0, + kKvCols); dQ rows [dq_query0, + 64) at columns [dq_col0, + kDqCols).
  const int key0 = S::kKeySplit ? 64 * group_index : 0;
  const int sdp_query0 = S::kKeySplit ? 0 : S::kSdpQueries * group_index;
  const int kv_col0 = S::kKeySplit ? 0 : S::kKvCols * group_index;
  const int dq_query0 = S::kDqSplitsQueries ? 64 * group_index : 0;
  const int dq_col0 = S::kDqSplitsCols ? S::kDqCols * group_index : 0;

  // The step's operand views (bwd_mainloop.cuh) of the descriptors that stay the same.
  using Step = BwdMmaStep<T, D, kDropout, kDeterministic, decltype(seq)>;
  using KRows = typename Step::KRows;
  using PCols = typename Step::PCols;
  using KCols = typename Step::KCols;
  // The descriptors from a warp-uniform copy of the warpgroup's index where the shape says
  // (BwdShape::kDescriptors).
  const int uniform_group = S::kDescriptors == BwdDescriptors::kUniform
                                ? prim::warp_uniform(group_index)
                                : group_index;
  const int desc_key0 = S::kKeySplit ? 64 * uniform_group : 0;
  const int desc_kv_col0 = S::kKeySplit ? 0 : S::kKvCols * uniform_group;
  const int desc_dq_query0 = S::kDqSplitsQueries ? 64 * uniform_group : 0;
  const int desc_dq_col0 = S::kDqSplitsCols ? S::kDqCols * uniform_group : 0;
  const uint64_t k_rows_desc = KRows::descriptor(k_smem + KTile::byte_offset(desc_key0, 0));
  const uint64_t v_rows_desc = KRows::descriptor(v_smem + KTile::byte_offset(desc_key0, 0));
  const uint32_t q_cols_offset = QTile::byte_offset(0, desc_kv_col0);
  const uint64_t ds_cols_desc =
      PCols::descriptor(ds_smem + PTile::byte_offset(0, desc_dq_query0));
  const uint64_t k_cols_desc = KCols::descriptor(k_smem + KTile::byte_offset(0, desc_dq_col0));

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
  // The accumulator slice this block adds into (bwd_deterministic_plan.hpp).
  const int dq_slice = kDeterministic ? bwd_dq_slice(n, w.dq_slice_bits) : 0;
  const int64_t accum_row0 = q_row0 + dq_slice * static_cast<int64_t>(p.total_q);
  const Step step{
      p, sc, w, seq, b, n0, seqlen_q, seqlen_k, key_shift,
      key0, sdp_query0, kv_col0, dq_query0, dq_col0,
      warp_row0, frag_row, frag_col, lane, tid,
      q_smem, do_smem, ds_smem, pt_smem, stats, stash_smem, stash_bars, scratch_smem,
      k_rows_desc, v_rows_desc, q_cols_offset, ds_cols_desc, k_cols_desc,
      dq_slice, accum_row0, accum_row_stride, dk, dv, unreleased};

  // The steps, in order (bwd_scheduler.cuh).
  const BwdStepOrder<decltype(seq)> order(seq, g_begin, g_end);
  const int m_first = order.m_first;
  auto advance = [&](int& g, int& m) { order.advance(g, m); };

  if constexpr (S::kDqWriter) {
    if (group_index == 2) {
      wg::lower_registers<S::kWriterRegisters>();
      if constexpr (S::kStaggered) {
        if (tid < S::kMmaThreads + S::kProducerThreads) {
          const BwdProducer<S, decltype(seq)> producer{
              maps, p, w, seq, order, hk, group, q_smem, do_smem, stats, q_do_full};
          producer.run(lane);
          return;
        }
      }
      const BwdDqWriter<S, kDeterministic, decltype(seq)> writer{
          p, w, seq, order, hk, group, dq_slice, accum_row0, accum_row_stride,
          smem_raw, raw_addr, stash_smem, stash_bars};
      writer.run(tid);
      return;
    }
    wg::raise_registers<S::kMmaRegisters>();
  }

  seq.template copy_kv_async<D, S::kMmaThreads>(p, hk, k_smem, v_smem, tid);
  if constexpr (S::kStaggered) {
    prim::thread::cp_async_commit();
    prim::thread::cp_async_wait<0>();
    wg::fence_proxy_async_shared();
    prim::named_sync(kMmaBarrier, S::kMmaThreads);  // K and V landed
  } else {
    if (m_first < m_blocks) {
      load_q_do(g_begin, m_first, 0);
      if (tid < 2 * kBlockM) stats[tid] = load_stats(g_begin, m_first);
    }
    prim::thread::cp_async_commit();
  }

  constexpr std::true_type masked{};
  constexpr std::false_type unmasked{};
  int g = g_begin, m = m_first, iteration = 0;
  while (m < m_blocks) {
    int next_g = g, next_m = m;
    advance(next_g, next_m);
    if constexpr (S::kStaggered) {
      // This step's Q, dO and statistics landed (the producer's copies are fenced already).
      mbarrier::wait(bwd_q_do_full(q_do_full, iteration % 2), (iteration / 2) & 1);
    } else {
      prim::thread::cp_async_wait<0>();
      q_do_loads.wait(iteration % 2);
      wg::fence_proxy_async_shared();
      // This block's Q, dO landed; every warpgroup is done with the other buffer.
      prim::named_sync(kMmaBarrier, S::kMmaThreads);
    }
    // Lock step: the next step's Q, dO (into the other buffer) and row statistics, each issued
    // where BwdShape::kNextCopies / kNextStats say (`at`: the point of the step calling).
    float staged = 0.f;
    auto issue_next = [&](auto at) {
      if constexpr (!S::kStaggered && S::kNextCopies == decltype(at)::value) {
        if (next_m < m_blocks) load_q_do(next_g, next_m, (iteration + 1) % 2);
        prim::thread::cp_async_commit();
      }
      if constexpr (!S::kStaggered && S::kNextStats == decltype(at)::value) {
        staged = next_m < m_blocks ? load_stats(next_g, next_m) : 0.f;
      }
    };
    issue_next(BwdNextLoadsAt<BwdNextLoads::kStepStart>{});
    const KeyBlocks kb = seq.blocks_of(m);
    const int h = hk * group + g;
    const int turn = seq.turn(m, kb);
    if (n >= kb.unmasked_begin && n < kb.unmasked_end) {
      step.run(unmasked, h, m, iteration, turn, issue_next);
    } else {
      step.run(masked, h, m, iteration, turn, issue_next);
    }
    if constexpr (S::kStaggered) {
      // This thread's products and statistics reads of the step are complete: the producer
      // may refill the buffer. (Every thread arrives: one arrival per warp after __syncwarp
      // left compute-sanitizer's racecheck without an order between the other lanes' reads
      // and the producer's next statistics stores.)
      mbarrier::arrive(bwd_q_do_empty(q_do_full, iteration % 2));
    } else if (tid < 2 * kBlockM) {
      stats[((iteration + 1) % 2) * 2 * kBlockM + tid] = staged;
    }
    g = next_g;
    m = next_m;
    ++iteration;
  }
  prim::thread::cp_async_wait<0>();
  if constexpr (!S::kDqWriter) step.release_turn();

  const BwdEpilogue<T, S> epilogue{p, n0, key0, kv_col0, frag_row, frag_col, tid};
  if (w.kv_splits > 1) {
    epilogue.store_partial(w, seq, b, kv_split, hk, dk, dv);
    return;
  }
  epilogue.store(seq, hk, q_smem, smem_raw + (q_smem - raw_addr), dk, dv);
#endif
}

}  // namespace flashattn::cuda::sm90
