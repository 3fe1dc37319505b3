// The Hopper forward's tile scheduler: which tile a persistent block takes next, and what a
// tile covers (FwdTileWork), computed the same way by the producer and the MMA warpgroups so
// that both walk the same tiles and key blocks without talking to each other.
//
// A tile is one block of block_m query rows of one (batch entry, query head). The grid has at
// most as many blocks as run at once (the tile's blocks_per_sm per SM), and block i takes the
// units i, i + grid, i + 2 grid, ... of an order in which the tiles of a head are
// consecutive, so the blocks running at once share the K and V of few heads, which stay in
// L2 (without it, short sequences re-read K and V from memory for every query block). A unit
// is one tile, except when later query blocks see more keys (a causal mask, or a right window
// without a left one): then it is the pair of query blocks k and m_blocks - 1 - k of a head,
// the longest with the shortest, whose costs add up to about the same for every pair, so the
// blocks stay balanced.
//
// Packed GQA (kPacked): the tiles of a (batch entry, KV head) hold its query heads' rows
// together, G = 2^group_shift of them: packed row r is query r >> group_shift of query head
// h + (r & (G - 1)), h the KV head's first. A block of block_m packed rows starts at a multiple
// of G (G divides block_m), so it is block_m / G whole queries of every head of the group.
#pragma once

#include <cstdint>

#include "core/params.hpp"
#include "core/sequence.hpp"
#include "cuda/common/block_mask.cuh"
#include "cuda/sm90/fwd_params.cuh"

namespace flashattn::cuda::sm90 {

struct FwdTileWork {
  int b, h, hk;  // h: the query head of the tile's rows (packed: of its first row)
  core::SequenceRows seq;
  int m0;    // the tile's first row in its sequence (packed: its first packed row)
  int rows;  // its rows inside the sequence; <= 0: the tile lies past the sequence
  int group_shift;  // packed: log2 of the query heads per KV head; 0 otherwise
  KeyBlocks kb;
  // TMA coordinates: the tile's first Q row, the row of the sequence's key 0, and the batch
  // index (0 for varlen operands, whose rows are packed into one batch entry).
  int q_row;
  int k_row0;
  int batch;

  __device__ __forceinline__ bool has_rows() const { return rows > 0; }
  __device__ __forceinline__ bool has_keys() const { return kb.end > kb.begin; }
  // The query and the query head of the tile's row `row` (m0 + row in the sequence's rows).
  __device__ __forceinline__ int query_of(int row) const { return (m0 + row) >> group_shift; }
  __device__ __forceinline__ int head_of(int row) const {
    return h + ((m0 + row) & ((1 << group_shift) - 1));
  }
};

// Where a block is in its list of tiles: its unit, and which tile of a pair.
struct FwdTileCursor {
  int unit;
  bool second = false;
};

template <int BlockM, int BlockN, bool kPacked = false>
struct FwdTileScheduler {
  int m_blocks;
  int tiles;
  bool paired;  // units are pairs of query blocks (see above)
  int group_shift;  // kPacked only

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
    const int heads = kPacked ? p.nheads_k : p.nheads;  // of a batch entry's tiles
    const int batch_head = c.unit / units_per_head();
    w.b = batch_head / heads;
    const int head = batch_head - w.b * heads;
    w.group_shift = kPacked ? group_shift : 0;
    w.h = head << w.group_shift;
    w.hk = kPacked ? head : w.h / (p.nheads / p.nheads_k);
    w.seq = core::sequence_rows(p, w.b);
    w.m0 = m_block(c) * BlockM;
    const int seq_rows = w.seq.seqlen_q << w.group_shift;
    w.rows = seq_rows - w.m0 < BlockM ? seq_rows - w.m0 : BlockM;
    const VisibilityMask mask{w.seq.seqlen_q, w.seq.seqlen_k, p.window_left, p.window_right};
    const int query0 = w.query_of(0);
    w.kb = w.has_rows() ? mask.blocks(query0, w.query_of(w.rows - 1) - query0 + 1, BlockN)
                        : KeyBlocks{0, 0, 0, 0};
    w.q_row = static_cast<int>(w.seq.q_row0) + query0;
    w.k_row0 = static_cast<int>(w.seq.k_row0);
    w.batch = static_cast<int>(w.seq.batch);
    return w;
  }
};

// The scheduler of a kernel of `Shape` (producer and MMA warpgroups build the same one).
template <class Shape>
__device__ __forceinline__ FwdTileScheduler<Shape::kBlockM, Shape::kBlockN, Shape::kPackGqa>
tile_scheduler(const FwdSm90Params& params) {
  return {params.m_blocks, params.tiles, params.paired_tiles, params.group_shift};
}

}  // namespace flashattn::cuda::sm90
