// The Hopper backward's producer warp (BwdSchedule::kStaggered): it walks the block's steps
// ahead of the MMA warpgroups and fills each step's Q / dO buffer and its rows' lse and D,
// so that nothing joins the two warpgroups at a step's start. Per buffer an mbarrier "full"
// (the warp's 32 lanes arrive after their statistics stores; the TMA copies complete on it)
// and "empty" (each MMA thread arrives once its products and reads of the step are complete).
//
// Q and dO come as BwdQdoLoads brings them: by TMA where the launcher mapped both and the
// block lies inside its sequence (bwd_issue_q_do_tma), else by cp.async from the warp's lanes (each the share of four threads of the tile copy), which then wait
// for their copies and fence them for the async proxy before they arrive (wgmma reads the
// buffer through it).
#pragma once

#include <cstdint>

#include "core/params.hpp"
#include "cuda/backward_workspace.hpp"
#include "cuda/prim/cp_async.cuh"
#include "cuda/sm90/bwd_q_do_loads.cuh"
#include "cuda/sm90/bwd_scheduler.cuh"
#include "cuda/sm90/bwd_shape.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/tma_load.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace flashattn::cuda::sm90 {

template <class S, class Sequence>
struct BwdProducer {
  using QTile = typename S::QTile;
  static constexpr int kBlockM = S::kBlockM;

  const BwdTmaMaps& maps;
  const core::BackwardParams& p;
  const BwdWorkspace& w;
  const Sequence& seq;
  const BwdStepOrder<Sequence>& order;
  int hk, group;             // the KV head, and its query heads
  uint32_t q_smem, do_smem;  // buffer 0 of each; buffer i at + i * QTile::kBytes
  float* stats;              // BwdStorage::stats, generic
  uint32_t q_do_bars;        // BwdStorage::q_do_full (bwd_q_do_full / bwd_q_do_empty)

  __device__ __forceinline__ void run(int lane) const {
    int g = order.g_begin, m = order.m_first;
    for (int iteration = 0; m < order.m_blocks; ++iteration) {
      const int buffer = iteration % 2;
      // The MMA warps' step iteration - 2 read this buffer last.
      if (iteration >= 2) {
        mbarrier::wait(bwd_q_do_empty(q_do_bars, buffer), (iteration / 2 - 1) & 1);
      }
      const int h = hk * group + g;
      float* row_stats = stats + buffer * 2 * kBlockM;
      float values[2 * kBlockM / 32];
#pragma unroll
      for (int i = 0; i < 2 * kBlockM / 32; ++i) {
        values[i] = seq.row_stat(p, w, h, m, lane + 32 * i);
      }
#pragma unroll
      for (int i = 0; i < 2 * kBlockM / 32; ++i) row_stats[lane + 32 * i] = values[i];
      const uint32_t bar = bwd_q_do_full(q_do_bars, buffer);
      const uint32_t q_dst = q_smem + buffer * QTile::kBytes;
      const uint32_t do_dst = do_smem + buffer * QTile::kBytes;
      if (maps.ok && seq.block_inside(m)) {
        if (lane == 0) {
          bwd_issue_q_do_tma<QTile>(maps, seq, h, m, q_dst, do_dst, bar);
        } else {
          mbarrier::arrive(bar);
        }
      } else {
        // The tile copy's walk needs 128 threads: each lane does the share of four.
#pragma unroll
        for (int share = 0; share < 4; ++share) {
          seq.template copy_q_do_async<S::kHeadDim, 128>(p, h, m, q_dst, do_dst,
                                                         lane + 32 * share);
        }
        prim::thread::cp_async_commit();
        prim::thread::cp_async_wait<0>();
        warpgroup::fence_proxy_async_shared();
        mbarrier::arrive(bar);
      }
      order.advance(g, m);
    }
  }
};

}  // namespace flashattn::cuda::sm90
