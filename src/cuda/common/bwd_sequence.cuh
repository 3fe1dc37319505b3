// What a backward main-kernel block (either backward kernel) knows of its sequence: its query
// rows, all its key rows (dK/dV are written for each of them, zero past seqused_k), the keys it
// attends, where its rows start in the operands, and which query blocks visit its key block.
// The set is the forward's mask policy (VisibilityMask::blocks) with the backward's tile: a query
// block is visited iff the forward would visit this key block for it, and masked iff the
// forward masks it.
#pragma once

#include <math_constants.h>

#include <cstdint>

#include "core/params.hpp"
#include "cuda/backward_workspace.hpp"
#include "cuda/common/bwd_block_order.cuh"
#include "cuda/common/block_mask.cuh"
#include "cuda/common/tile_copy.cuh"

namespace flashattn::cuda {

template <class T, int kBlockM, int kBlockN>
struct BwdSequence {
  bool varlen;
  int b;  // batch entry
  int n;  // key block
  int seqlen_q, key_rows, seqlen_k;
  int64_t q_start, k_start;  // varlen: first row in the packed operands
  int64_t q_row0;            // first packed query row (the workspace's row index)
  int m_blocks;
  int m_blocks_max;  // of the longest sequence: the workspace's turn counters per head
  VisibilityMask mask;
  int turn_group_blocks;  // deterministic turn groups (bwd_block_order.cuh), 0 for none
  // The deterministic rotated order (bwd_block_order.cuh), if use_rotated_order took it: the
  // key blocks that visit each query block, and where this one starts.
  bool rotated = false;
  int rotated_keys = 0;
  int rotated_start = 0;

  __device__ __forceinline__ BwdSequence(const core::BackwardParams& p, int b_, int n_,
                                         int turn_group_blocks_ = 0)
      : varlen(p.cu_seqlens_q != nullptr),
        b(b_),
        n(n_),
        seqlen_q(p.seqlen_q),
        key_rows(p.seqlen_k),
        q_start(0),
        k_start(0),
        turn_group_blocks(turn_group_blocks_) {
    if (varlen) {
      q_start = p.cu_seqlens_q[b];
      k_start = p.cu_seqlens_k[b];
      seqlen_q = p.cu_seqlens_q[b + 1] - static_cast<int>(q_start);
      key_rows = p.cu_seqlens_k[b + 1] - static_cast<int>(k_start);
    }
    seqlen_k = p.seqused_k != nullptr ? p.seqused_k[b] : key_rows;
    q_row0 = varlen ? q_start : static_cast<int64_t>(b) * p.seqlen_q;
    m_blocks = (seqlen_q + kBlockM - 1) / kBlockM;
    m_blocks_max = (p.seqlen_q + kBlockM - 1) / kBlockM;
    mask = VisibilityMask{seqlen_q, seqlen_k, p.window_left, p.window_right};
  }

  // The key block has no key rows: the block has nothing to do.
  __device__ __forceinline__ bool empty() const { return n * kBlockN >= key_rows; }

  // Row 0 of `head` of this sequence in `op` (`start`: q_start or k_start).
  __device__ __forceinline__ const T* base(const core::Operand& op, int head,
                                           int64_t start) const {
    return static_cast<const T*>(op.ptr) + (varlen ? start * op.row_stride : b * op.batch_stride) +
           head * op.head_stride;
  }

  __device__ __forceinline__ KeyBlocks blocks_of(int m) const {
    return mask.blocks(m * kBlockM, min(kBlockM, seqlen_q - m * kBlockM), kBlockN);
  }

  // This key block's K and V rows of KV head hk into the tiles at k_tile / v_tile (cp.async by
  // all Threads threads; rows past seqlen_k zero-filled). The caller commits.
  template <int D, int Threads>
  __device__ __forceinline__ void copy_kv_async(const core::BackwardParams& p, int hk,
                                                uint32_t k_tile, uint32_t v_tile,
                                                int tid) const {
    const int n0 = n * kBlockN;
    const T* k = base(p.k, hk, k_start) + n0 * p.k.row_stride;
    const T* v = base(p.v, hk, k_start) + n0 * p.v.row_stride;
    block::copy_tile_async<kBlockN, D, Threads>(k_tile, k, p.k.row_stride, seqlen_k - n0, tid);
    block::copy_tile_async<kBlockN, D, Threads>(v_tile, v, p.v.row_stride, seqlen_k - n0, tid);
  }

  // Q and dO of query block m of query head h into the tiles at q_tile / do_tile (cp.async
  // by all Threads threads; rows past the sequence zero-filled). The caller commits.
  template <int D, int Threads>
  __device__ __forceinline__ void copy_q_do_async(const core::BackwardParams& p, int h, int m,
                                                  uint32_t q_tile, uint32_t do_tile,
                                                  int tid) const {
    const int m0 = m * kBlockM;
    block::copy_tile_async<kBlockM, D, Threads>(q_tile, base(p.q, h, q_start) + m0 * p.q.row_stride,
                                                p.q.row_stride, seqlen_q - m0, tid);
    block::copy_tile_async<kBlockM, D, Threads>(
        do_tile, base(p.dout, h, q_start) + m0 * p.dout.row_stride, p.dout.row_stride,
        seqlen_q - m0, tid);
  }

  // Where a TMA box of query block m starts in the q / dout maps (tensor_map.hpp: a varlen
  // operand is one batch entry of all its rows), and whether the block lies inside the
  // sequence (a box past a fixed-length sequence's end reads zeros; past a varlen sequence's,
  // the next sequence's rows).
  __device__ __forceinline__ int tma_row(int m) const {
    return static_cast<int>(q_start) + m * kBlockM;
  }
  __device__ __forceinline__ int tma_batch() const { return varlen ? 0 : b; }
  __device__ __forceinline__ bool block_inside(int m) const {
    return !varlen || (m + 1) * kBlockM <= seqlen_q;
  }

  // The row statistic thread `tid` stages for query block m of query head h: lse2
  // (tid < block_m) or D of row tid - block_m; rows past the end get lse2 = +inf, D = 0, so
  // their P and dS are 0.
  __device__ __forceinline__ float row_stat(const core::BackwardParams& p, const BwdWorkspace& w,
                                            int h, int m, int tid) const {
    const int query = m * kBlockM + tid % kBlockM;
    const bool is_lse = tid < kBlockM;
    if (tid >= 2 * kBlockM || query >= seqlen_q) return is_lse ? CUDART_INF_F : 0.f;
    const int64_t row = h * static_cast<int64_t>(p.total_q) + q_row0 + query;
    return is_lse ? w.lse_log2[row] : w.dsum[row];
  }

  // Deterministic mode: the turn counter of query block m of query head h in accumulator slice
  // `slice` (the workspace holds [batch][heads][query blocks of p.seqlen_q] of them per slice)
  // and this key block's turn at query block m, which key blocks [kb.begin, kb.end) visit: the
  // higher ones add first (in turn groups: the lower groups first), or in the rotated order
  // the earlier arrivals (bwd_block_order.cuh; within an accumulator slice: bwd_slice_turn).
  __device__ __forceinline__ int32_t* turn_counter(const core::BackwardParams& p,
                                                   const BwdWorkspace& w, int h, int m,
                                                   int slice = 0) const {
    const int64_t pair = static_cast<int64_t>(b + slice * p.batch) * p.nheads + h;
    return w.turns + (pair * m_blocks_max + m) * kBwdTurnStride;
  }
  __device__ __forceinline__ int turn(int m, const KeyBlocks& kb) const {
    return rotated ? bwd_rotated_turn(n, m, rotated_keys, m_blocks)
                   : bwd_grouped_turn(n, kb.begin, kb.end, turn_group_blocks);
  }

  // For a block of the ticketed launch (bwd_block_order.cuh): the rotated order, where it
  // applies (every query block sees the same key blocks, at most one per query block). The
  // plan takes the launch only for such problems (bwd_deterministic_plan.hpp); this test keeps
  // any other block in the fixed order, which the tickets also keep free of deadlock.
  __device__ __forceinline__ void use_rotated_order(const core::BackwardParams& p) {
    const int visiting = (seqlen_k + kBlockN - 1) / kBlockN;
    rotated = p.window_left < 0 && p.window_right < 0 && n < visiting && visiting <= m_blocks;
    if (rotated) {
      rotated_keys = visiting;
      rotated_start = bwd_rotated_start(n, visiting, m_blocks);
    }
  }

  // The query blocks that visit this key block, in the order the block takes them: the first,
  // and the one after m (m_blocks when m was the last).
  __device__ __forceinline__ int first_query_block() const {
    return rotated ? rotated_start : first_visited(0);
  }
  __device__ __forceinline__ int next_query_block(int m) const {
    if (!rotated) return first_visited(m + 1);
    const int next = m + 1 == m_blocks ? 0 : m + 1;
    return next == rotated_start ? m_blocks : next;
  }

 private:
  // The first query block from m on that visits this key block (m_blocks if none).
  __device__ __forceinline__ int first_visited(int m) const {
    for (; m < m_blocks; ++m) {
      const KeyBlocks kb = blocks_of(m);
      if (n >= kb.begin && n < kb.end) break;
    }
    return m;
  }
};

}  // namespace flashattn::cuda
