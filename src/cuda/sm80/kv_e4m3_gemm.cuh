// warp:: the two products of a decode key block read straight from an e4m3 ring slot, for the
// KV kernel's decode tile (each warp owns its keys): the fragments are loaded from the cache's
// bytes with ldmatrix and converted in registers (kv_convert.cuh's e4m3x2_to), so a block is
// neither written back to shared memory in q's type nor waited for by a second fence.
//
// The ring slot is an SmemTile<Rows, D / 2> of 16-bit units, a unit holding two e4m3 values,
// a 16-byte chunk 16 of them. ldmatrix reads 8 rows of one chunk as an 8x8 matrix of units:
//   - scores, K (no .trans): lane l gets row l / 4, units 2t, 2t+1 (t = l % 4), i.e. the four
//     bytes of d = 16c + 4t .. 16c + 4t + 3 of one key. A k16 step over chunk c pairs them as
//     k = 2t, 2t+1 (d 4t, 4t+1) and k = 2t+8, 2t+9 (d 4t+2, 4t+3): the reduction runs over d
//     in another order, so Q's A fragment is read in that same order (8 bytes per row and
//     step, two 16-bit values for a[0] / a[1] and two for a[2] / a[3]), and the sum is q.k.
//   - output, V (.trans): lane l gets keys 2t, 2t+1 of unit g = l / 4, i.e. bytes
//     V[2t][16c+2g], V[2t][16c+2g+1], V[2t+1][16c+2g], V[2t+1][16c+2g+1]. A byte permute makes
//     the key pairs of d = 16c + 2g (the even column) and of 16c + 2g + 1 (the odd one): chunk
//     c feeds two 8-column output tiles, 2c with d = 16c + 2n and 2c + 1 with d = 16c + 2n + 1
//     for tile column n. output_column() gives a fragment element's d.
#pragma once

#include <cstdint>

#include "cuda/common/kv_convert.cuh"
#include "cuda/prim/ldmatrix.cuh"
#include "cuda/prim/math.cuh"
#include "cuda/prim/mma.cuh"
#include "cuda/prim/shared_access.cuh"

namespace flashattn::cuda::sm80::warp {

// Lane offsets (SmemTile::lane_offsets), computed once: the ring's two ldmatrix patterns and
// the rows g, g + 8 of Q at chunk t / 2 (the 8 bytes of d = 4t .. 4t+3 of a 16-wide step).
template <class QTile, class RingTile>
struct E4m3LaneOffsets {
  int k[RingTile::kLaneOffsets];  // rows lane % 8 + 8 (lane / 16), chunks + (lane / 8) % 2
  int v[RingTile::kLaneOffsets];  // rows lane % 16, chunks + lane / 16
  int q[2][QTile::kLaneOffsets];  // rows g and g + 8, chunk t / 2
  uint32_t q_byte;                // 8 (t % 2): the second 8 bytes of that chunk

  __device__ __forceinline__ explicit E4m3LaneOffsets(int lane) {
    RingTile::lane_offsets(lane % 8 + 8 * (lane / 16), (lane / 8) % 2, k);
    RingTile::lane_offsets(lane % 16, lane / 16, v);
    QTile::lane_offsets(lane / 4, (lane % 4) / 2, q[0]);
    QTile::lane_offsets(lane / 4 + 8, (lane % 4) / 2, q[1]);
    q_byte = 8 * (lane % 2);
  }
};

// The d of element e of lane `lane`'s output fragment o[m][j] (both row halves alike).
__device__ __forceinline__ int output_column(int j, int e, int lane) {
  return 16 * (j / 2) + 4 * (lane % 4) + 2 * e + j % 2;
}

// The two e4m3 values of the low and the high half of `word` as packed pairs of T.
template <class T>
__device__ __forceinline__ void e4m3x4_to(uint32_t word, uint32_t& low, uint32_t& high) {
  low = e4m3x2_to<T>(static_cast<uint16_t>(word & 0xFFFFu));
  high = e4m3x2_to<T>(static_cast<uint16_t>(word >> 16));
}

// s[MT][NT][4] += Q[rows, :D] . K[keys, :D]^T with K the e4m3 ring rows of this warp's keys.
// `q_smem` points at this warp's first query row in the Q tile, `k_ring` at its first key row
// in the ring slot.
template <class T, int MT, int NT, int D, class QTile, class RingTile>
__device__ __forceinline__ void qk_scores_e4m3(float (&s)[MT][NT][4], uint32_t q_smem,
                                               uint32_t k_ring,
                                               const E4m3LaneOffsets<QTile, RingTile>& lanes) {
  static_assert(NT % 2 == 0 && D % 32 == 0, "16 keys and 32 columns at a time");
#pragma unroll
  for (int c2 = 0; c2 < D / 32; ++c2) {
    // Matrices: keys 16j + 0-7 at chunks 2c2, 2c2+1, then keys 16j + 8-15 likewise.
    uint32_t b[NT / 2][4];
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
      prim::warp::ldmatrix_x4(b[j], k_ring + RingTile::split_offset_bytes(lanes.k, 16 * j, 2 * c2));
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = 2 * c2 + h;  // the k16 step: d 16c .. 16c + 15
      uint32_t a[MT][4];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const uint2 pair = prim::load_shared_u2(
              q_smem + QTile::split_offset_bytes(lanes.q[half], 16 * m, 2 * c) + lanes.q_byte);
          a[m][half] = pair.x;      // d 16c + 4t, +1
          a[m][2 + half] = pair.y;  // d 16c + 4t + 2, +3
        }
      }
#pragma unroll
      for (int j = 0; j < NT / 2; ++j) {
        uint32_t b0[2], b1[2];
        e4m3x4_to<T>(b[j][h], b0[0], b0[1]);
        e4m3x4_to<T>(b[j][2 + h], b1[0], b1[1]);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          prim::warp::mma_m16n8k16<T>(s[m][2 * j], a[m], b0);
          prim::warp::mma_m16n8k16<T>(s[m][2 * j + 1], a[m], b1);
        }
      }
    }
  }
}

// o[MT][DT][4] += P[rows, keys] . V[keys, :D] with V the e4m3 ring rows of this warp's keys,
// o's tiles in output_column()'s order.
template <class T, int MT, int NT, int DT, class QTile, class RingTile>
__device__ __forceinline__ void pv_output_e4m3(float (&o)[MT][DT][4], const float (&p)[MT][NT][4],
                                               uint32_t v_ring,
                                               const E4m3LaneOffsets<QTile, RingTile>& lanes) {
  static_assert(DT % 4 == 0, "head dims are consumed 32 columns at a time");
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
    for (int c2 = 0; c2 < DT / 4; ++c2) {
      // Matrices (transposed): keys 16kt + 0-7 / 8-15 at chunk 2c2, then at 2c2+1.
      uint32_t b[4];
      prim::warp::ldmatrix_x4_trans(b, v_ring + RingTile::split_offset_bytes(lanes.v, 16 * kt, 2 * c2));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int c = 2 * c2 + h;
        // Bytes 0, 2 (keys 2t, 2t+1 at the even column) and 1, 3 (the odd column).
        const uint32_t low_keys = __byte_perm(b[2 * h], 0, 0x3120);
        const uint32_t high_keys = __byte_perm(b[2 * h + 1], 0, 0x3120);
        uint32_t even[2], odd[2];
        e4m3x4_to<T>(low_keys, even[0], odd[0]);
        e4m3x4_to<T>(high_keys, even[1], odd[1]);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          prim::warp::mma_m16n8k16<T>(o[m][2 * c], a[m], even);
          prim::warp::mma_m16n8k16<T>(o[m][2 * c + 1], a[m], odd);
        }
      }
    }
  }
}

}  // namespace flashattn::cuda::sm80::warp
