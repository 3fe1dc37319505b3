// The Hopper backward's dQ writer (BwdShape::kDqWriter): a third warpgroup, with few
// registers, that takes each step's dQ from the MMA warpgroups' double-buffered fp32 stash
// (BwdDqStorage) and adds it into the workspace's accumulator with 16-byte atomics (with its
// 128 threads, or the 96 beside the staggered schedule's producer warp), so that
// the MMA warpgroups neither issue the atomics nor, in the deterministic mode, wait for turns.
//
// Each step of its half: wait for the stash (and, deterministic, first for the turn: the
// half's thread 0 spins before the half's barrier that releases the other threads), add it into
// the accumulator, free the stash, and pass the turn on once the additions are issued by every
// thread of the half. With two halves (BwdShape::kWriterHalves) they take alternate steps, half
// i always stash buffer i.
#pragma once

#include <cstdint>

#include "core/params.hpp"
#include "cuda/backward_workspace.hpp"
#include "cuda/bwd_deterministic_plan.hpp"
#include "cuda/prim/atomics.cuh"
#include "cuda/prim/named_barrier.cuh"
#include "cuda/sm90/bwd_scheduler.cuh"
#include "cuda/sm90/bwd_shape.cuh"
#include "cuda/sm90/mbarrier.cuh"

namespace flashattn::cuda::sm90 {

template <class S, bool kDeterministic, class Sequence>
struct BwdDqWriter {
  static constexpr int D = S::kHeadDim;
  static constexpr int kBlockM = S::kBlockM;
  // Rows a pass of the half's threads covers, 16 bytes per thread.
  static constexpr int kRowStep = S::kWriterHalfThreads / (D / 4);
  static_assert(S::kWriterHalfThreads % (D / 4) == 0, "a pass covers whole rows");

  const core::BackwardParams& p;
  const BwdWorkspace& w;
  const Sequence& seq;
  const BwdStepOrder<Sequence>& order;
  int hk, group;             // the KV head, and its query heads
  int dq_slice;              // the accumulator slice (bwd_deterministic_plan.hpp)
  int64_t accum_row0;        // the sequence's first row in that slice
  int64_t accum_row_stride;  // nheads x D floats
  const unsigned char* smem_raw;  // the dynamic shared memory, generic, at raw_addr
  uint32_t raw_addr;
  uint32_t stash_smem, stash_bars;  // BwdDqStorage::stash and ::stash_full

  // tid: the block's thread index (the writer's threads follow the MMA warpgroups').
  __device__ __forceinline__ void run(int tid) const {
    // The adders follow the MMA warpgroups and, staggered, the producer warp.
    const int writer_tid = tid - S::kMmaThreads - S::kProducerThreads;
    const int m_blocks = order.m_blocks;
    const int writer_half = S::kWriterHalves == 2 ? writer_tid / S::kWriterHalfThreads : 0;
    const int half_tid =
        S::kWriterHalves == 2 ? writer_tid % S::kWriterHalfThreads : writer_tid;
    int g = order.g_begin, m = order.m_first;
    if (S::kWriterHalves == 2 && writer_half == 1) order.advance(g, m);  // from the second step
    for (int iteration = writer_half; m < m_blocks; iteration += S::kWriterHalves) {
      const int buffer = iteration % S::kStashBuffers;
      const int h = hk * group + g;
      const int m0 = m * kBlockM;
      int32_t* counter = nullptr;
      if constexpr (kDeterministic) {
        counter = seq.turn_counter(p, w, h, m, dq_slice);
        const int turn = bwd_slice_turn(seq.turn(m, seq.blocks_of(m)), w.dq_slice_bits);
        if (half_tid == 0) {
          while (prim::load_acquire(counter) != turn) {
          }
        }
        prim::named_sync(kWriterBarrier + writer_half, S::kWriterHalfThreads);
      }
      mbarrier::wait(bwd_stash_full<S>(stash_bars, buffer), (iteration / S::kStashBuffers) & 1);
      // This thread's 16-byte column of rows row0, row0 + kRowStep, ...: the addresses advance
      // by constants, so that the loop fits the writer's 24 registers (indexing each addition
      // from its position made ptxas precompute the addresses and spill them).
      const int row0 = half_tid / (D / 4), col = 4 * (half_tid % (D / 4));
      const float* stash = reinterpret_cast<const float*>(
                               smem_raw + (stash_smem + buffer * S::kStashBytes - raw_addr)) +
                           row0 * S::kStashStride + col;
      float* accum = w.dq_accum +
                     ((accum_row0 + m0) * p.nheads + h) * static_cast<int64_t>(D) +
                     row0 * accum_row_stride + col;
      const int rows = min(kBlockM, seq.seqlen_q - m0);
#pragma unroll 4
      for (int row = row0; row < rows; row += kRowStep) {
        atomicAdd(reinterpret_cast<float4*>(accum), *reinterpret_cast<const float4*>(stash));
        stash += kRowStep * S::kStashStride;
        accum += kRowStep * accum_row_stride;
      }
      mbarrier::arrive(bwd_stash_empty<S>(stash_bars, buffer));
      if constexpr (kDeterministic) {
        prim::named_sync(kWriterBarrier + writer_half, S::kWriterHalfThreads);
        if (half_tid == 0) prim::add_release(counter, 1);
      }
      order.advance(g, m);
      if (S::kWriterHalves == 2 && m < m_blocks) order.advance(g, m);
    }
  }
};

}  // namespace flashattn::cuda::sm90
