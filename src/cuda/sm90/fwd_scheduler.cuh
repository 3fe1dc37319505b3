// The Hopper forward's tile scheduler: which tile a persistent block takes next, and what a
// tile covers (FwdTileWork), computed the same way by the producer and the MMA warpgroups so
// that both walk the same tiles and key blocks without talking to each other.
//
// A tile is one block of block_m query rows of one (batch entry, query head). The grid has at
// most one block per SM; block i takes tiles i, i + grid, i + 2 grid, ... of the order
// (batch entry, head, query block from the last to the first). Under a causal mask the last
// query blocks are the longest, so each head's longest tiles start first and the short ones
// fill the tail; and the blocks running at once work on the query blocks of few heads, whose
// K and V stay in L2 for all of them.
#pragma once

#include <cstdint>

#include "core/params.hpp"
#include "core/sequence.hpp"
#include "cuda/common/block_mask.cuh"

namespace flashattn::cuda::sm90 {

struct FwdTileWork {
  int b, h, hk;
  core::SequenceRows seq;
  int m0;    // the tile's first query row in its sequence
  int rows;  // its query rows inside the sequence; <= 0: the tile lies past the sequence
  KeyBlocks kb;
  // TMA coordinates: the tile's first Q row, the row of the sequence's key 0, and the batch
  // index (0 for varlen operands, whose rows are packed into one batch entry).
  int q_row;
  int k_row0;
  int batch;

  __device__ __forceinline__ bool has_rows() const { return rows > 0; }
  __device__ __forceinline__ bool has_keys() const { return kb.end > kb.begin; }
};

template <int BlockM, int BlockN>
struct FwdTileScheduler {
  int m_blocks;
  int tiles;

  __device__ __forceinline__ int first() const { return static_cast<int>(blockIdx.x); }
  __device__ __forceinline__ int next(int tile) const {
    return tile + static_cast<int>(gridDim.x);
  }
  __device__ __forceinline__ bool valid(int tile) const { return tile < tiles; }

  __device__ __forceinline__ FwdTileWork work(const core::AttentionParams& p, int tile) const {
    FwdTileWork w;
    const int per_batch = p.nheads * m_blocks;
    w.b = tile / per_batch;
    const int in_batch = tile - w.b * per_batch;
    w.h = in_batch / m_blocks;
    const int m_block = m_blocks - 1 - (in_batch - w.h * m_blocks);
    w.hk = w.h / (p.nheads / p.nheads_k);
    w.seq = core::sequence_rows(p, w.b);
    w.m0 = m_block * BlockM;
    w.rows = w.seq.seqlen_q - w.m0 < BlockM ? w.seq.seqlen_q - w.m0 : BlockM;
    const VisibilityMask mask{w.seq.seqlen_q, w.seq.seqlen_k, p.window_left, p.window_right};
    w.kb = w.has_rows() ? mask.blocks(w.m0, w.rows, BlockN) : KeyBlocks{0, 0, 0, 0};
    w.q_row = static_cast<int>(w.seq.q_row0) + w.m0;
    w.k_row0 = static_cast<int>(w.seq.k_row0);
    w.batch = static_cast<int>(w.seq.batch);
    return w;
  }
};

}  // namespace flashattn::cuda::sm90
