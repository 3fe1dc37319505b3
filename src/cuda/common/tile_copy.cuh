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
#include "cuda/common/smem_tile.cuh"

namespace flashattn::cuda::block {

// The walk above, shared by every tile copy (this one, the KV kernel's row copy, the paged
// forward's): thread `tid` owns chunk `chunk` of rows `row` + i * kRowsPerPass.
template <int Rows, int D, int Threads>
struct TileCopyWalk {
  using Tile = SmemTile<Rows, D>;
  static constexpr int kPanel = Tile::kPanel;
  static constexpr int kChunks = Tile::kChunksPerPanelRow;
  static constexpr int kRowsPerPass = Threads / kChunks;
  static_assert(Threads % kChunks == 0 && Rows % kRowsPerPass == 0, "uneven tile copy");
  static_assert(kRowsPerPass % 16 == 0, "a pass must keep each thread's swizzle phase");

  int row;
  int chunk;
  uint32_t dst_bytes;  // this thread's chunk of its first row, from the tile's start

  __device__ __forceinline__ explicit TileCopyWalk(int tid)
      : row(tid / kChunks),
        chunk(tid % kChunks),
        dst_bytes(2 * Tile::chunk_offset(row, chunk)) {}

  // Bytes from dst_bytes to the thread's chunk in panel `panel` of its i-th row.
  __host__ __device__ static constexpr uint32_t step_bytes(int panel, int i) {
    return 2 * (panel * Rows * kPanel + i * kRowsPerPass * kPanel);
  }
};

template <int Rows, int D, int Threads, class T>
__device__ __forceinline__ void copy_tile_async(uint32_t smem_base, const T* gmem,
                                                int64_t row_stride, int rows_valid, int tid) {
  using Walk = TileCopyWalk<Rows, D, Threads>;
  constexpr int kPanel = Walk::kPanel;
  constexpr int kRowsPerPass = Walk::kRowsPerPass;
  const Walk walk(tid);
  const int row = walk.row;
  const int chunk = walk.chunk;
  const uint32_t dst = smem_base + walk.dst_bytes;
  const T* src = gmem + row * row_stride + chunk * 8;
  const int64_t pass_stride = kRowsPerPass * row_stride;
#pragma unroll
  for (int panel = 0; panel < D / kPanel; ++panel) {
#pragma unroll
    for (int i = 0; i < Rows / kRowsPerPass; ++i) {
      const bool valid = row + i * kRowsPerPass < rows_valid;
      const T* from = valid ? src + i * pass_stride + panel * kPanel : gmem;
      prim::thread::cp_async_16(dst + Walk::step_bytes(panel, i), from, valid);
    }
  }
}

}  // namespace flashattn::cuda::block
