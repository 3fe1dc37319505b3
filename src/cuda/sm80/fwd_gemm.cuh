// warp:: the two products of a forward key block, for the MT x 16 query rows one warp owns.
//   scores: s[MT][NT][4] += Q[rows, :D] . K[block, :D]^T   (Q and K from shared memory)
//   output: o[MT][DT][4] += P[rows, block] . V[block, :D]    (P from registers: the score
//           accumulator packed to 16 bits; V from shared memory through ldmatrix.trans)
// Fragment layouts are those of prim/mma.cuh; tiles are SmemTile layouts. Each ldmatrix_x4
// fetches two 8-column B tiles (both k halves), which two mma per row tile consume.
#pragma once

#include <cstdint>

#include "cuda/prim/ldmatrix.cuh"
#include "cuda/prim/math.cuh"
#include "cuda/prim/mma.cuh"

namespace flashattn::cuda::sm80::warp {

// Lane offsets (SmemTile::lane_offsets) of the two ldmatrix patterns, computed once. They do
// not depend on the tile height, so the Q and V patterns (the same one) share registers.
template <class QTile, class KVTile>
struct LaneOffsets {
  static_assert(QTile::kPanel == KVTile::kPanel, "Q and K/V tiles share one swizzle");
  int qv[QTile::kLaneOffsets];  // Q (A) and V (B, transposed): rows lane % 16, chunks + lane / 16
  int k[KVTile::kLaneOffsets];  // K (B): rows lane % 8 + 8 (lane / 16), chunks + (lane / 8) % 2

  __device__ __forceinline__ explicit LaneOffsets(int lane) {
    QTile::lane_offsets(lane % 16, lane / 16, qv);
    KVTile::lane_offsets(lane % 8 + 8 * (lane / 16), (lane / 8) % 2, k);
  }
};

// `q_smem` points at the first query row of this warp (a multiple of 16) in the Q tile.
template <class T, int MT, int NT, int D, class QTile, class KTile>
__device__ __forceinline__ void qk_scores(float (&s)[MT][NT][4], uint32_t q_smem, uint32_t k_smem,
                                          const LaneOffsets<QTile, KTile>& lanes) {
  static_assert(NT % 2 == 0, "key blocks are consumed 16 keys at a time");
#pragma unroll
  for (int kt = 0; kt < D / 16; ++kt) {
    uint32_t a[MT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      // Matrices: rows 0-7 / 8-15 of the row tile, columns 16kt + 0-7 / 8-15.
      prim::warp::ldmatrix_x4(a[m], q_smem + QTile::split_offset_bytes(lanes.qv, 16 * m, 2 * kt));
    }
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
      // Matrices: keys 16j + 0-7 at d chunk 2kt, 2kt+1, then keys 16j + 8-15 likewise.
      uint32_t b[4];
      prim::warp::ldmatrix_x4(b, k_smem + KTile::split_offset_bytes(lanes.k, 16 * j, 2 * kt));
      const uint32_t b0[2] = {b[0], b[1]};
      const uint32_t b1[2] = {b[2], b[3]};
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        prim::warp::mma_m16n8k16<T>(s[m][2 * j], a[m], b0);
        prim::warp::mma_m16n8k16<T>(s[m][2 * j + 1], a[m], b1);
      }
    }
  }
}

template <class T, int MT, int NT, int DT, class QTile, class VTile>
__device__ __forceinline__ void pv_output(float (&o)[MT][DT][4], const float (&p)[MT][NT][4],
                                          uint32_t v_smem, const LaneOffsets<QTile, VTile>& lanes) {
  static_assert(DT % 2 == 0, "head dims are consumed 16 columns at a time");
#pragma unroll
  for (int kt = 0; kt < NT / 2; ++kt) {
    uint32_t a[MT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      a[m][0] = prim::thread::pack2<T>(p[m][2 * kt][0], p[m][2 * kt][1]);
      a[m][1] = prim::thread::pack2<T>(p[m][2 * kt][2], p[m][2 * kt][3]);
      a[m][2] = prim::thread::pack2<T>(p[m][2 * kt + 1][0], p[m][2 * kt + 1][1]);
      a[m][3] = prim::thread::pack2<T>(p[m][2 * kt + 1][2], p[m][2 * kt + 1][3]);
    }
#pragma unroll
    for (int j = 0; j < DT / 2; ++j) {
      // Matrices (transposed): keys 16kt + 0-7 / 8-15 at d chunk 2j, then at 2j+1.
      uint32_t b[4];
      prim::warp::ldmatrix_x4_trans(b, v_smem + VTile::split_offset_bytes(lanes.qv, 16 * kt, 2 * j));
      const uint32_t b0[2] = {b[0], b[1]};
      const uint32_t b1[2] = {b[2], b[3]};
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        prim::warp::mma_m16n8k16<T>(o[m][2 * j], a[m], b0);
        prim::warp::mma_m16n8k16<T>(o[m][2 * j + 1], a[m], b1);
      }
    }
  }
}

}  // namespace flashattn::cuda::sm80::warp
