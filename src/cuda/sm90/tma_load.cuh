// block:: TMA (cp.async.bulk.tensor, sm_90) loads of a Swizzle128Tile. The tensor map
// (tensor_map.hpp) describes the global tensor with [box_rows][64]-element boxes and the
// 128-byte swizzle, so one box lands as exactly one panel of the tile; a tile of Cols
// columns takes Cols / 64 copies. One thread issues them; they complete on an mbarrier
// (mbarrier.cuh) that the same thread armed BEFORE issuing any copy, with the bytes of every
// tile of the phase in one arrive_expect_tx: arming per tile would let the phase complete
// when the first tile lands, before the second one was announced. Boxes that reach past the
// tensor's dimensions land zero-filled and still count their full bytes.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace flashattn::cuda::sm90::tma {

// L2 eviction priority of a load's lines: K and V are read by every query tile of a head,
// Q once.
enum class CacheHint : uint64_t {
  kEvictFirst = 0x12F0000000000000ull,
  kEvictLast = 0x14F0000000000000ull,
};

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

// One box of an attention operand's map (encode_operand_tensor_map): columns [x, x + 64) of
// rows [row, row + box_rows) of (head, batch).
__device__ __forceinline__ void load_operand_box(uint32_t smem_dst, const CUtensorMap* map, int x,
                                                 int row, int head, int batch, uint32_t bar,
                                                 CacheHint hint) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(smem_dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(row), "r"(head), "r"(batch), "r"(bar),
      "l"(static_cast<uint64_t>(hint))
      : "memory");
}

// Rows [row0, row0 + Tile::kRows) of (head, batch), every panel of the tile.
template <class Tile>
__device__ __forceinline__ void load_operand_tile(uint32_t tile_addr, const CUtensorMap* map,
                                                  int row0, int head, int batch, uint32_t bar,
                                                  CacheHint hint) {
#pragma unroll
  for (int p = 0; p < Tile::kPanels; ++p) {
    load_operand_box(tile_addr + p * Tile::kPanelBytes, map, p * Tile::kPanelCols, row0, head,
                     batch, bar, hint);
  }
}

// Fetches the map's descriptor into the cache ahead of the first load that uses it.
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace flashattn::cuda::sm90::tma
