// block:: TMA (cp.async.bulk.tensor, sm_90) loads of a Swizzle128Tile. The tensor map
// (tensor_map.hpp) describes the global matrix with [box_rows][64]-element boxes and the
// 128-byte swizzle, so one box lands as exactly one panel of the tile; a tile of Cols
// columns takes Cols / 64 copies. One thread issues them; they complete on an mbarrier
// (mbarrier.cuh) that the same thread armed BEFORE issuing any copy, with the bytes of every
// tile of the phase in one arrive_expect_tx: arming per tile would let the phase complete
// when the first tile lands, before the second one was announced.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace flashattn::cuda::sm90::tma {

// One box: columns [x, x + 64) of rows [y, y + box_rows) to `smem_dst` (1024-aligned).
// `map` must be a kernel parameter (const __grid_constant__) or in global memory.
__device__ __forceinline__ void load_box(uint32_t smem_dst, const CUtensorMap* map, int x, int y,
                                         uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

// The whole tile whose element (0, 0) is the global matrix's (row0, col0); Tile::kBytes
// land on `bar`, which the caller has armed for them.
template <class Tile>
__device__ __forceinline__ void load_tile(uint32_t tile_addr, const CUtensorMap* map, int row0,
                                          int col0, uint32_t bar) {
#pragma unroll
  for (int p = 0; p < Tile::kPanels; ++p) {
    load_box(tile_addr + p * Tile::kPanelBytes, map, col0 + p * Tile::kPanelCols, row0, bar);
  }
}

}  // namespace flashattn::cuda::sm90::tma
