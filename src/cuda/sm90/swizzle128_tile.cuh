// The shared-memory layout of a wgmma operand: a row-major [Rows][Cols] matrix of 16-bit
// (or, with ElemBytes = 1, 8-bit) elements in the canonical 128-byte-swizzle layout that
// wgmma's matrix descriptors describe (and that TMA's CU_TENSOR_MAP_SWIZZLE_128B writes).
//
// The matrix is stored as column panels of one 128-byte line per row: 64 columns of 16-bit
// elements, 128 of 8-bit ones (kPanelCols); panel p holds columns [p kPanelCols, (p + 1)
// kPanelCols) of all Rows rows. Inside a line the unit is the 16-byte chunk (8 or 16
// elements), and chunk c of row r is stored at chunk position c ^ (r % 8). The hardware
// computes that XOR from address bits 7-9, so a tile must start on a 1024-byte boundary
// (8 lines) for the stored and the computed swizzle to agree.
//
// Which dimension is "rows" depends on the operand's major-ness, not on the product:
//   K-major operand (A of any product, B of S = Q K^T): rows = M or N, cols = K;
//   MN-major operand (B of O = P V, V stored [seq][d]): rows = K, cols = N.
// For 16-bit elements this is the layout of SmemTile<Rows, Cols> for Cols % 64 == 0 (bytes of
// its chunk_offset), so block::copy_tile_async fills these tiles as they are.
#pragma once

#include <cstdint>

#include "core/platform.hpp"

namespace flashattn::cuda::sm90 {

template <int Rows, int Cols, int ElemBytes = 2>
struct Swizzle128Tile {
  static_assert(ElemBytes == 1 || ElemBytes == 2, "8-bit or 16-bit elements");
  static constexpr int kElemBytes = ElemBytes;
  static constexpr int kLineBytes = 128;
  static constexpr int kPanelCols = kLineBytes / ElemBytes;
  static constexpr int kChunkCols = 16 / ElemBytes;
  static_assert(Cols % kPanelCols == 0, "a 128-byte-swizzle tile is made of 128-byte panels");
  static_assert(Rows % 8 == 0, "a 128-byte-swizzle tile is made of 8-row atoms");
  static constexpr int kRows = Rows;
  static constexpr int kCols = Cols;
  static constexpr int kAtomBytes = 8 * kLineBytes;  // one swizzle period: 8 lines
  static constexpr int kPanels = Cols / kPanelCols;
  static constexpr int kPanelBytes = Rows * kLineBytes;
  static constexpr int kBytes = kPanels * kPanelBytes;
  static constexpr int kAlignment = kAtomBytes;

  // Byte offset of element (row, col) from the tile's start.
  static constexpr FA_HOST_DEVICE uint32_t byte_offset(int row, int col) {
    const int panel = col / kPanelCols;
    const int chunk = (col % kPanelCols) / kChunkCols;
    return static_cast<uint32_t>(panel * kPanelBytes + row * kLineBytes +
                                 ((chunk ^ (row % 8)) * 16) + (col % kChunkCols) * ElemBytes);
  }
};

}  // namespace flashattn::cuda::sm90
