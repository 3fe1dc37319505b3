// The shared-memory layout of a [Rows][D] tile of 16-bit elements (Q, K, V and the output
// staging), swizzled so that ldmatrix and cp.async run without bank conflicts.
//
// The tile is stored as D / P column panels of P elements each (P = 64 when D % 64 == 0, else
// 32); panel p holds rows 0 .. Rows-1 of columns [pP, pP + P) contiguously. Inside a panel
// the unit is the 16-byte chunk (8 elements) and the 128-byte line (8 chunks, all 32 banks):
//   P = 64: line = row,     chunk-in-line = c,                 stored at chunk c ^ (row % 8)
//   P = 32: line = row / 2, chunk-in-line = 4 (row % 2) + c,   stored at that ^ (line % 8)
// Any 8 consecutive rows starting at a multiple of 8 and reading the same column chunk (one
// ldmatrix phase) thus land on 8 distinct chunk positions, i.e. on all 32 banks once.
//
// The XOR makes an address non-affine in the column, so the ldmatrix loops use a split form:
// for rows R0 + r (R0 a multiple of 16, r < 16) and chunks C0 + c (C0 even, c < 2),
//   chunk_offset(R0 + r, C0 + c) = lane_offset[(C0 % kSwizzleSpan) / 2] + fixed_offset(R0, C0)
// where lane_offset[k] = chunk_offset(r, 2k + c) depends on the lane only (a few registers)
// and fixed_offset is a compile-time constant in unrolled loops.
#pragma once

#include <cstdint>

namespace flashattn::cuda {

template <int Rows, int D>
struct SmemTile {
  static_assert(D % 32 == 0, "tile width must be a multiple of 32 elements");
  static_assert(Rows % 8 == 0, "tile height must be a multiple of 8 rows");
  static constexpr int kPanel = D % 64 == 0 ? 64 : 32;
  static constexpr int kChunksPerPanelRow = kPanel / 8;
  static constexpr int kChunksPerRow = D / 8;
  static constexpr int kElements = Rows * D;
  static constexpr int kBytes = kElements * 2;

  static constexpr int kSwizzleSpan = kPanel == 64 ? 8 : 4;  // chunks before the XOR repeats
  static constexpr int kLaneOffsets = kSwizzleSpan / 2;

  // Element offset of chunk `c` (columns 8c .. 8c+7) of row `row`.
  static __device__ __forceinline__ int chunk_offset(int row, int c) {
    const int panel = c / kChunksPerPanelRow;
    const int cc = c % kChunksPerPanelRow;
    if constexpr (kPanel == 64) {
      return panel * Rows * 64 + row * 64 + ((cc ^ (row & 7)) << 3);
    } else {
      const int line = row >> 1;
      const int in_line = ((row & 1) << 2) | cc;
      return panel * Rows * 32 + line * 64 + ((in_line ^ (line & 7)) << 3);
    }
  }

  static __device__ __forceinline__ void lane_offsets(int r, int c, int (&offset)[kLaneOffsets]) {
#pragma unroll
    for (int k = 0; k < kLaneOffsets; ++k) offset[k] = chunk_offset(r, 2 * k + c);
  }

  static constexpr int fixed_offset(int row0, int chunk0) {
    return (chunk0 / kChunksPerPanelRow) * Rows * kPanel + row0 * kPanel;
  }

  // The same from one lane offset, chunk_offset(r, c) for c < 2: inside a swizzle span the
  // even chunk index only flips bits of the chunk field, so
  //   chunk_offset(r, c + 2k) = chunk_offset(r, c) ^ (2k << 3)   (c + 2k < kSwizzleSpan),
  // and a warp keeps one register per operand instead of kLaneOffsets (the backward, whose
  // five products leave few registers). Bytes of chunk_offset(row0 + r, chunk0 + c).
  static __device__ __forceinline__ uint32_t xor_offset_bytes(int offset, int row0, int chunk0) {
    return 2 * ((offset ^ ((chunk0 % kSwizzleSpan) << 3)) + fixed_offset(row0, chunk0));
  }

  // chunk_offset(row0 + r, chunk0 + c) from the lane offsets of (r, c), in bytes.
  static __device__ __forceinline__ uint32_t split_offset_bytes(const int (&offset)[kLaneOffsets],
                                                                int row0, int chunk0) {
    return 2 * (offset[(chunk0 % kSwizzleSpan) / 2] + fixed_offset(row0, chunk0));
  }
};

}  // namespace flashattn::cuda
