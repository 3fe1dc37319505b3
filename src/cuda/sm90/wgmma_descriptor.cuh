// The 64-bit shared-memory matrix descriptor through which wgmma reads an operand tile
// (PTX ISA, "Matrix Descriptor Format"), for Swizzle128Tile operands.
//
// Fields, each a byte quantity divided by 16:
//   bits  0-13  start address (shared-window address, 18 bits, >> 4)
//   bits 16-29  leading-dimension byte offset (LBO)
//   bits 32-45  stride-dimension byte offset (SBO)
//   bits 49-51  base offset: 0, since every tile starts on a 1024-byte swizzle atom
//   bits 62-63  swizzle mode: 1 = 128-byte swizzle
// What LBO and SBO mean depends on the operand's major-ness (the canonical layouts, in
// 16-bit elements, before the swizzle XOR that the hardware applies to address bits 4-6
// from bits 7-9):
//   K-major:  (row, k) -> start + (row / 8) * SBO + (row % 8) * 128 + k * 2
//             k stays inside one 128-byte line for a k16 step, so LBO is never used (the
//             same with 8-bit elements: k * 1, a k32 step).
//   MN-major: (k, mn) -> start + (mn / 64) * LBO + (k / 8) * SBO + (k % 8) * 128 + (mn % 64) * 2
// With a Swizzle128Tile both cases have SBO = 1024 (one 8-line atom); the MN-major LBO is
// the tile's panel size.
//
// Advancing along K by one step (16 elements of 16 bits, or 32 of 8 bits: one instruction's K)
// moves only the start address: by 32 bytes inside a panel line (K-major; the XOR is taken
// from the absolute address bits, so a start inside the line still reads the swizzled chunks
// right) or by 16 lines (MN-major, 16-bit only: 8-bit operands must be K-major). Since the start
// field is the low field, a kernel builds the descriptor of step 0 once and adds
// k_step_bytes(step) / 16, a compile-time constant, to it.
#pragma once

#include <cstdint>

#include "core/platform.hpp"
#include "cuda/sm90/swizzle128_tile.cuh"

namespace flashattn::cuda::sm90 {

enum class Major { kK, kMN };

enum class Swizzle : uint64_t { kNone = 0, k128B = 1 };

constexpr FA_HOST_DEVICE uint64_t encode_descriptor(uint32_t start_addr, uint32_t leading_bytes,
                                                    uint32_t stride_bytes,
                                                    Swizzle swizzle = Swizzle::k128B) {
  return static_cast<uint64_t>((start_addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32) |
         (static_cast<uint64_t>(swizzle) << 62);
}

// How an operand stored as `Tile` is read: as a K-major operand (tile rows = M or N) or as an
// MN-major one (tile rows = K), by steps of kStepK (32 bytes of K: k16 for 16-bit elements,
// k32 for 8-bit ones).
template <class Tile, Major kMajor>
struct WgmmaOperand {
  static_assert(kMajor == Major::kK || Tile::kElemBytes == 2, "8-bit operands are K-major");
  static constexpr int kStepK = 32 / Tile::kElemBytes;
  static constexpr int kKSteps = (kMajor == Major::kK ? Tile::kCols : Tile::kRows) / kStepK;
  static constexpr uint32_t kLeadingBytes = kMajor == Major::kK ? 16 : Tile::kPanelBytes;
  static constexpr uint32_t kStrideBytes = Tile::kAtomBytes;

  // Bytes from the tile's start to the first element of k-step `step` (row 0 or column 0,
  // where the swizzle XOR is zero).
  static constexpr FA_HOST_DEVICE uint32_t k_step_bytes(int step) {
    return kMajor == Major::kK ? Tile::byte_offset(0, kStepK * step)
                               : Tile::byte_offset(kStepK * step, 0);
  }

  // Descriptor of k-step `step` of the tile at shared address `tile_addr` (1024-aligned).
  static constexpr FA_HOST_DEVICE uint64_t descriptor(uint32_t tile_addr, int step = 0) {
    return encode_descriptor(tile_addr + k_step_bytes(step), kLeadingBytes, kStrideBytes);
  }

  // Descriptor of k-step `step` from the descriptor of step 0, without re-encoding (the
  // start field cannot carry into LBO: shared addresses stay below 2^18 bytes).
  static constexpr FA_HOST_DEVICE uint64_t advance(uint64_t step0_descriptor, int step) {
    return step0_descriptor + (k_step_bytes(step) >> 4);
  }
};

}  // namespace flashattn::cuda::sm90
