// warp:: the product of the backward that reads both operands from shared memory:
//   dq[4][4] = dS[16 queries, block] . K[block, 32 columns]
// for one 16 x 32 piece of a query block's dQ. dS is stored transposed (DsTile: rows are
// keys, columns queries, the layout its producer writes from the dS^T accumulators), so the
// A fragments come from ldmatrix.trans; K is a row-major [key][d] tile, read as the B operand
// with ldmatrix.trans too (as V in fwd_gemm.cuh's pv_output). Layouts: prim/mma.cuh.
#pragma once

#include <cstdint>

#include "cuda/prim/ldmatrix.cuh"
#include "cuda/prim/mma.cuh"

namespace flashattn::cuda::sm80::warp {

// Lane offsets of the two ldmatrix.trans patterns of dq_piece.
template <class DsTile, class KTile>
struct DqLaneOffsets {
  int ds[DsTile::kLaneOffsets];  // rows (keys) lane % 8 + 8 (lane / 16), chunks + (lane / 8) % 2
  int k[KTile::kLaneOffsets];    // rows (keys) lane % 16, chunks + lane / 16

  __device__ __forceinline__ explicit DqLaneOffsets(int lane) {
    DsTile::lane_offsets(lane % 8 + 8 * (lane / 16), (lane / 8) % 2, ds);
    KTile::lane_offsets(lane % 16, lane / 16, k);
  }
};

// `row_tile`: the 16 queries 16 row_tile .. + 15 of the block; `col_piece`: d columns
// 32 col_piece .. + 31. Keys: the BlockN rows of both tiles.
template <class T, int BlockN, class DsTile, class KTile>
__device__ __forceinline__ void dq_piece(float (&dq)[4][4], uint32_t ds_smem, uint32_t k_smem,
                                         int row_tile, int col_piece,
                                         const DqLaneOffsets<DsTile, KTile>& lanes) {
#pragma unroll
  for (int kt = 0; kt < BlockN / 16; ++kt) {
    // Matrices (transposed): keys 16kt + 0-7 at query chunks 2 row_tile, 2 row_tile + 1,
    // then keys 16kt + 8-15 likewise: A[query][key] for both k halves.
    uint32_t a[4];
    prim::warp::ldmatrix_x4_trans(a, ds_smem + DsTile::split_offset_bytes(lanes.ds, 16 * kt,
                                                                          2 * row_tile));
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      uint32_t b[4];
      prim::warp::ldmatrix_x4_trans(
          b, k_smem + KTile::split_offset_bytes(lanes.k, 16 * kt, 4 * col_piece + 2 * j));
      const uint32_t b0[2] = {b[0], b[1]};
      const uint32_t b1[2] = {b[2], b[3]};
      prim::warp::mma_m16n8k16<T>(dq[2 * j], a, b0);
      prim::warp::mma_m16n8k16<T>(dq[2 * j + 1], a, b1);
    }
  }
}

}  // namespace flashattn::cuda::sm80::warp
