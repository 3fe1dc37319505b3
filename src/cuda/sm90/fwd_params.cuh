// What the Hopper forward kernel receives (one `const __grid_constant__` parameter): the
// call's params, the score conversions, the TMA maps of Q, K and V (encoded on the host by
// fwd_launch.cuh), where the keys live (contiguous rows or a paged cache), and the size of the
// tile space the persistent grid walks.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/params.hpp"
#include "cuda/common/score_transform.cuh"

namespace flashattn::cuda::sm90 {

// The pages of a paged KV cache (the kernel's kPaged instantiation): key j of batch entry b is
// row j % page_size of page block_table[b][j / page_size]. K and V are then loaded in boxes of
// box_rows keys, which divides both page_size and the tile's block_n, so that no box crosses a
// page and a key block is a whole number of boxes.
struct FwdPageTable {
  const int32_t* block_table = nullptr;
  int64_t table_batch_stride = 0;
  int page_size = 0;
  int box_rows = 0;
};

struct FwdSm90Params {
  CUtensorMap q_map;  // [box block_m rows][64 columns] boxes of (col, row, head, batch)
  CUtensorMap k_map;  // [block_n][64]; paged: [box_rows][64] boxes of (col, row, head, page)
  CUtensorMap v_map;  // like k_map
  FwdPageTable pages;  // paged instantiation only
  core::AttentionParams p;
  ScoreScales scores;
  int m_blocks;  // row blocks per (batch entry, head): ceil(seqlen_q / block_m)
  int tiles;     // batch * nheads * m_blocks
  // Packed GQA (FwdShape::kPackGqa): log2 of the query heads per KV head, whose rows one tile
  // holds; m_blocks and tiles then count blocks of (query, head) rows per (batch entry, KV head).
  int group_shift;
  bool paired_tiles;  // the scheduler's units (fwd_scheduler.cuh)
  // Keys past a sequence's end are not zero-filled by TMA (varlen rows run into the next
  // sequence; seqused_k leaves rows in the tensor; a paged load skips the boxes past the end,
  // which keep what the buffer held before): V's rows there are zeroed in shared memory so that
  // a NaN or Inf there cannot reach the output through 0 * NaN.
  bool zero_v_tail;
};

}  // namespace flashattn::cuda::sm90
