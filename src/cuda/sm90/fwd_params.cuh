// What the Hopper forward kernel receives (one `const __grid_constant__` parameter): the
// call's params, the score conversions, the TMA maps of Q, K and V (encoded on the host by
// fwd_launch.cuh), and the size of the tile space the persistent grid walks.
#pragma once

#include <cuda.h>

#include "core/params.hpp"
#include "cuda/common/score_transform.cuh"

namespace flashattn::cuda::sm90 {

struct FwdSm90Params {
  CUtensorMap q_map;  // [box block_m rows][64 columns] boxes of (col, row, head, batch)
  CUtensorMap k_map;  // [block_n][64]
  CUtensorMap v_map;  // [block_n][64]
  core::AttentionParams p;
  ScoreScales scores;
  int m_blocks;  // query blocks per (batch entry, head): ceil(seqlen_q / block_m)
  int tiles;     // batch * nheads * m_blocks
  bool paired_tiles;  // the scheduler's units (fwd_scheduler.cuh)
  // Keys past a sequence's end are not zero-filled by TMA (varlen rows run into the next
  // sequence; seqused_k leaves rows in the tensor): V's rows there are zeroed in shared memory
  // so that a NaN or Inf stored there cannot reach the output through 0 * NaN.
  bool zero_v_tail;
};

}  // namespace flashattn::cuda::sm90
