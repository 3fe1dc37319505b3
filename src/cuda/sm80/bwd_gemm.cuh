// warp:: the backward's products, both operands from shared memory (SmemTile layouts):
//   acc[MT][NT][4] += A[MT*16 rows, K] . B[K, NT*8 columns]
// Each operand is stored either with its product's k index along the tile's columns
// ("k-minor": K and Q for S^T = K Q^T, P^T for dV = P^T dO) or along the tile's rows
// ("k-major": dO for dV, dS^T for dQ = dS K, K for dQ). The ldmatrix form follows from that:
//   A k-minor: ldmatrix       lanes at rows lane % 16,                 chunks + lane / 16
//   A k-major: ldmatrix.trans lanes at rows lane % 8 + 8 (lane / 16),  chunks + (lane / 8) % 2
//   B k-minor: ldmatrix       lanes at rows lane % 8 + 8 (lane / 16),  chunks + (lane / 8) % 2
//   B k-major: ldmatrix.trans lanes at rows lane % 16,                 chunks + lane / 16
// so two lane patterns serve all four (kRowPattern, kPairPattern). Fragment layouts:
// prim/mma.cuh.
//
// A warp's operand may start at a column chunk c0 of its tile (its share of the queries or of
// the head dim): the lane offset is taken at c0, and the loops add chunk offsets relative to
// c0 (by XOR inside a swizzle span, SmemTile::xor_offset_bytes). That is exact when the warp's
// columns cover whole panels (c0 a multiple of the swizzle span) or lie inside one panel
// (backward_tuning.hpp, bwd_columns_ok). Row offsets (multiples of 16) go into the base address.
#pragma once

#include <cstdint>

#include "cuda/prim/ldmatrix.cuh"
#include "cuda/prim/mma.cuh"

namespace flashattn::cuda::sm80::warp {

enum class LanePattern { kRows, kPairs };

// This lane's offset for `pattern` in a tile whose warp columns start at chunk `chunk0`: one
// register (SmemTile::xor_offset_bytes gives the other chunks of the span from it). The whole
// panels before chunk0 go into `panel_bytes` (added to the operand's base address), so warps
// whose columns start on a panel share the lane offset of chunk 0.
template <class Tile, LanePattern Pattern>
struct TileLanes {
  int offset;
  uint32_t panel_bytes;
  __device__ __forceinline__ TileLanes(int lane, int chunk0) {
    const int in_span = chunk0 % Tile::kSwizzleSpan;
    panel_bytes = 2 * Tile::fixed_offset(0, chunk0 - in_span);
    if constexpr (Pattern == LanePattern::kRows) {
      offset = Tile::chunk_offset(lane % 16, in_span + lane / 16);
    } else {
      offset = Tile::chunk_offset(lane % 8 + 8 * (lane / 16), in_span + (lane / 8) % 2);
    }
  }
};

template <bool KMajor>
inline constexpr LanePattern kAPattern = KMajor ? LanePattern::kPairs : LanePattern::kRows;
template <bool KMajor>
inline constexpr LanePattern kBPattern = KMajor ? LanePattern::kRows : LanePattern::kPairs;

template <class T, int MT, int NT, int K, bool AKMajor, bool BKMajor, class ATile, class BTile>
__device__ __forceinline__ void mma_smem(float (&acc)[MT][NT][4], uint32_t a_smem,
                                         const TileLanes<ATile, kAPattern<AKMajor>>& a_lanes,
                                         uint32_t b_smem,
                                         const TileLanes<BTile, kBPattern<BKMajor>>& b_lanes) {
  static_assert(K % 16 == 0 && NT % 2 == 0, "products run 16 x 16 at a time");
  a_smem += a_lanes.panel_bytes;
  b_smem += b_lanes.panel_bytes;
#pragma unroll
  for (int kt = 0; kt < K / 16; ++kt) {
    uint32_t a[MT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if constexpr (AKMajor) {
        // Matrices (transposed): k 0-7 at row chunks 2m, 2m + 1, then k 8-15 likewise.
        prim::warp::ldmatrix_x4_trans(
            a[m], a_smem + ATile::xor_offset_bytes(a_lanes.offset, 16 * kt, 2 * m));
      } else {
        // Matrices: rows 0-7 / 8-15 at k chunk 2kt, then at 2kt + 1.
        prim::warp::ldmatrix_x4(a[m],
                                a_smem + ATile::xor_offset_bytes(a_lanes.offset, 16 * m, 2 * kt));
      }
    }
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
      uint32_t b[4];
      if constexpr (BKMajor) {
        // Matrices (transposed): k 0-7 / 8-15 at column chunk 2j, then at 2j + 1.
        prim::warp::ldmatrix_x4_trans(
            b, b_smem + BTile::xor_offset_bytes(b_lanes.offset, 16 * kt, 2 * j));
      } else {
        // Matrices: columns 16j + 0-7 at k chunk 2kt, 2kt + 1, then columns 16j + 8-15.
        prim::warp::ldmatrix_x4(b,
                                b_smem + BTile::xor_offset_bytes(b_lanes.offset, 16 * j, 2 * kt));
      }
      const uint32_t b0[2] = {b[0], b[1]};
      const uint32_t b1[2] = {b[2], b[3]};
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        prim::warp::mma_m16n8k16<T>(acc[m][2 * j], a[m], b0);
        prim::warp::mma_m16n8k16<T>(acc[m][2 * j + 1], a[m], b1);
      }
    }
  }
}

}  // namespace flashattn::cuda::sm80::warp
