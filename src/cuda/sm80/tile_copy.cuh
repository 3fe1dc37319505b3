// block:: cooperative cp.async copy of a [Rows][D] tile of 16-bit elements from global memory
// (rows `row_stride` elements apart, the row itself contiguous) into an SmemTile. All Threads
// threads of the block call it. The copy walks the tile panel by panel (SmemTile's column
// panels of 32 or 64 elements): thread `tid` owns chunk tid % CP of rows tid / CP + i * RP,
// RP = Threads / CP, so consecutive threads read consecutive 16-byte chunks of a row and each
// thread needs one address register per tile (the swizzle of its rows repeats every RP rows).
// Rows at or past `rows_valid` are zero-filled without being read. The caller commits and waits.
#pragma once

#include <cstdint>

#include "cuda/prim/cp_async.cuh"
#include "cuda/sm80/smem_tile.cuh"

namespace flashattn::cuda::sm80::block {

template <int Rows, int D, int Threads, class T>
__device__ __forceinline__ void copy_tile_async(uint32_t smem_base, const T* gmem,
                                                int64_t row_stride, int rows_valid, int tid) {
  using Tile = SmemTile<Rows, D>;
  constexpr int kPanel = Tile::kPanel;
  constexpr int kChunks = Tile::kChunksPerPanelRow;
  constexpr int kRowsPerPass = Threads / kChunks;
  static_assert(Threads % kChunks == 0 && Rows % kRowsPerPass == 0, "uneven tile copy");
  static_assert(kRowsPerPass % 16 == 0, "a pass must keep each thread's swizzle phase");
  const int row = tid / kChunks;
  const int chunk = tid % kChunks;
  const uint32_t dst = smem_base + 2 * Tile::chunk_offset(row, chunk);
  const T* src = gmem + row * row_stride + chunk * 8;
  const int64_t pass_stride = kRowsPerPass * row_stride;
#pragma unroll
  for (int panel = 0; panel < D / kPanel; ++panel) {
#pragma unroll
    for (int i = 0; i < Rows / kRowsPerPass; ++i) {
      const bool valid = row + i * kRowsPerPass < rows_valid;
      const T* from = valid ? src + i * pass_stride + panel * kPanel : gmem;
      prim::thread::cp_async_16(dst + 2 * (panel * Rows * kPanel + i * kRowsPerPass * kPanel), from,
                                valid);
    }
  }
}

}  // namespace flashattn::cuda::sm80::block
