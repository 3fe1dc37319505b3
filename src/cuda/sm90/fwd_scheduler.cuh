// The Hopper forward's tile scheduler: which tile a persistent block takes next, and what a
// tile covers (FwdTileWork), computed the same way by the producer and the MMA warpgroups so
// that both walk the same tiles and key blocks without talking to each other.
//
// A tile is one block of block_m query rows of one (batch entry, query head). The grid has at
// most one block per SM, and block i takes the units i, i + grid, i + 2 grid, ... of an order
// in which the tiles of a head are consecutive, so the blocks running at once share the K
// and V of few heads, which stay in L2 (without it, short sequences re-read K and V from
// memory for every query block). A unit is one tile, except when later query blocks see more
// keys (a causal mask, or a right window without a left one): then it is the pair of query
// blocks k and m_blocks - 1 - k of a head, the longest with the shortest, whose costs add up
// to about the same for every pair, so the blocks stay balanced.
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

// Where a block is in its list of tiles: its unit, and which tile of a pair.
struct FwdTileCursor {
  int unit;
  bool second = false;
};

template <int BlockM, int BlockN>
struct FwdTileScheduler {
  int m_blocks;
  int tiles;
  bool paired;  // units are pairs of query blocks (see above)

  __device__ __forceinline__ int units_per_head() const {
    return paired ? (m_blocks + 1) / 2 : m_blocks;
  }
  __device__ __forceinline__ FwdTileCursor first() const {
    return {static_cast<int>(blockIdx.x), false};
  }
  __device__ __forceinline__ bool valid(const FwdTileCursor& c) const {
    return c.unit < tiles / m_blocks * units_per_head();
  }
  // The query block of the cursor's tile (from the last to the first within a head).
  __device__ __forceinline__ int m_block(const FwdTileCursor& c) const {
    const int k = c.unit % units_per_head();
    if (!paired) return m_blocks - 1 - k;
    return c.second ? k : m_blocks - 1 - k;
  }
  __device__ __forceinline__ void advance(FwdTileCursor& c) const {
    if (paired && !c.second) {
      const int k = c.unit % units_per_head();
      if (k < m_blocks - 1 - k) {
        c.second = true;
        return;
      }
    }
    c.unit += static_cast<int>(gridDim.x);
    c.second = false;
  }

  __device__ __forceinline__ FwdTileWork work(const core::AttentionParams& p,
                                              const FwdTileCursor& c) const {
    FwdTileWork w;
    const int batch_head = c.unit / units_per_head();
    w.b = batch_head / p.nheads;
    w.h = batch_head - w.b * p.nheads;
    w.hk = w.h / (p.nheads / p.nheads_k);
    w.seq = core::sequence_rows(p, w.b);
    w.m0 = m_block(c) * BlockM;
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
