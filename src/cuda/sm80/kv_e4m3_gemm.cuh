// warp:: the two products of a decode key block read straight from an e4m3 ring slot, for the
// KV kernel's decode tile (each warp owns its keys): the fragments are loaded from the cache's
// bytes with ldmatrix and converted in registers, so a block is neither written back to shared
// memory in q's type nor waited for by a second fence.
//
// The products run in fp16 whatever q's type: an e4m3 value is exactly an fp16 value and one
// instruction converts two of them, where a bf16 pair takes four (through fp32). So before the
// loop e4m3_q_fragments rewrites the Q tile in place as fp16 A fragments of the score
// product, each row scaled by a power of two that brings its largest magnitude just under
// fp16's range (bf16 q has exponents fp16 lacks; the scaled row keeps all of bf16's bits but
// for values 2^-31 of its largest and below, which no score can tell apart), and the scores
// are scaled back per row after the product (q_row_factor). P is in [0, 1] and rounds to fp16
// more finely than to bf16.
//
// The ring slot is an SmemTile<Rows, D / 2> of 16-bit units, a unit holding two e4m3 values,
// a 16-byte chunk 16 of them. ldmatrix reads 8 rows of one chunk as an 8x8 matrix of units:
//   - scores, K (no .trans): lane l gets row l / 4, units 2t, 2t+1 (t = l % 4), i.e. the four
//     bytes of d = 16c + 4t .. 16c + 4t + 3 of one key. A k16 step over chunk c pairs them as
//     k = 2t, 2t+1 (d 4t, 4t+1) and k = 2t+8, 2t+9 (d 4t+2, 4t+3): the reduction runs over d
//     in another order, so Q's A fragment holds d in that same order (rows g and g + 8, d =
//     16c + 4t, +1 in registers 0 / 1 and 16c + 4t + 2, +3 in registers 2 / 3), and the sum is
//     q.k. The fragments are stored in that order, one 16-byte load per lane and step.
//   - output, V (.trans): lane l gets keys 2t, 2t+1 of unit g = l / 4, i.e. bytes
//     V[2t][16c+2g], V[2t][16c+2g+1], V[2t+1][16c+2g], V[2t+1][16c+2g+1]. A byte permute makes
//     the key pairs of d = 16c + 2g (the even column) and of 16c + 2g + 1 (the odd one): chunk
//     c feeds two 8-column output tiles, 2c with d = 16c + 2n and 2c + 1 with d = 16c + 2n + 1
//     for tile column n. output_column() gives a fragment element's d.
#pragma once

#include <math_constants.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/kv_convert.cuh"
#include "cuda/prim/ldmatrix.cuh"
#include "cuda/prim/math.cuh"
#include "cuda/prim/mma.cuh"
#include "cuda/prim/shared_access.cuh"

namespace flashattn::cuda::sm80 {
namespace warp {

// Lane offsets (SmemTile::lane_offsets) of the ring's two ldmatrix patterns, computed once.
template <class RingTile>
struct E4m3LaneOffsets {
  int k[RingTile::kLaneOffsets];  // rows lane % 8 + 8 (lane / 16), chunks + (lane / 8) % 2
  int v[RingTile::kLaneOffsets];  // rows lane % 16, chunks + lane / 16

  __device__ __forceinline__ explicit E4m3LaneOffsets(int lane) {
    RingTile::lane_offsets(lane % 8 + 8 * (lane / 16), (lane / 8) % 2, k);
    RingTile::lane_offsets(lane % 16, lane / 16, v);
  }
};

// The d of element e of lane `lane`'s output fragment o[m][j] (both row halves alike).
__device__ __forceinline__ int output_column(int j, int e, int lane) {
  return 16 * (j / 2) + 4 * (lane % 4) + 2 * e + j % 2;
}

// The two e4m3 values of the low and the high half of `word` as packed fp16 pairs.
__device__ __forceinline__ void e4m3x4_to_half(uint32_t word, uint32_t& low, uint32_t& high) {
  low = e4m3x2_half_to_half<false>(word);
  high = e4m3x2_half_to_half<true>(word);
}

// Byte offset of Q's A fragment for row tile m, k16 step c and lane l in the fragment array
// that e4m3_q_fragments writes over the Q tile.
template <int D>
__device__ __forceinline__ uint32_t q_fragment_offset(int m, int c, int l) {
  return 16u * static_cast<uint32_t>((m * (D / 16) + c) * 32 + l);
}

// s[MT][NT][4] += Q[rows, :D] . K[keys, :D]^T with K the e4m3 ring rows of this warp's keys;
// `q_fragments` points at this warp's first row tile in the fragment array (fp16, each row
// scaled by its factor: the caller scales the scores back).
template <int MT, int NT, int D, class RingTile>
__device__ __forceinline__ void qk_scores_e4m3(float (&s)[MT][NT][4], uint32_t q_fragments,
                                               uint32_t k_ring,
                                               const E4m3LaneOffsets<RingTile>& lanes, int lane) {
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
        const uint4 f = prim::load_shared_u4(q_fragments + q_fragment_offset<D>(m, c, lane));
        a[m][0] = f.x;
        a[m][1] = f.y;
        a[m][2] = f.z;
        a[m][3] = f.w;
      }
#pragma unroll
      for (int j = 0; j < NT / 2; ++j) {
        uint32_t b0[2], b1[2];
        e4m3x4_to_half(b[j][h], b0[0], b0[1]);
        e4m3x4_to_half(b[j][2 + h], b1[0], b1[1]);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          prim::warp::mma_m16n8k16<__half>(s[m][2 * j], a[m], b0);
          prim::warp::mma_m16n8k16<__half>(s[m][2 * j + 1], a[m], b1);
        }
      }
    }
  }
}

// o[MT][DT][4] += P[rows, keys] . V[keys, :D] with V the e4m3 ring rows of this warp's keys,
// o's tiles in output_column()'s order; P rounded to fp16.
template <int MT, int NT, int DT, class RingTile>
__device__ __forceinline__ void pv_output_e4m3(float (&o)[MT][DT][4], const float (&p)[MT][NT][4],
                                               uint32_t v_ring,
                                               const E4m3LaneOffsets<RingTile>& lanes) {
  static_assert(DT % 4 == 0, "head dims are consumed 32 columns at a time");
#pragma unroll
  for (int kt = 0; kt < NT / 2; ++kt) {
    uint32_t a[MT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      a[m][0] = prim::thread::pack2<__half>(p[m][2 * kt][0], p[m][2 * kt][1]);
      a[m][1] = prim::thread::pack2<__half>(p[m][2 * kt][2], p[m][2 * kt][3]);
      a[m][2] = prim::thread::pack2<__half>(p[m][2 * kt + 1][0], p[m][2 * kt + 1][1]);
      a[m][3] = prim::thread::pack2<__half>(p[m][2 * kt + 1][2], p[m][2 * kt + 1][3]);
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
        e4m3x4_to_half(low_keys, even[0], odd[0]);
        e4m3x4_to_half(high_keys, even[1], odd[1]);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          prim::warp::mma_m16n8k16<__half>(o[m][2 * c], a[m], even);
          prim::warp::mma_m16n8k16<__half>(o[m][2 * c + 1], a[m], odd);
        }
      }
    }
  }
}

}  // namespace warp

// The power of two by which a q row whose largest magnitude is `amax` is scaled on its way to
// fp16: the largest then lies in [2^14, 2^15). A row of zeros or with an inf or NaN is left
// as it is (inf and NaN convert as they are, and reach the scores as in the reference). The
// exponent lies in [-113, 140] for finite rows and is capped at 126, so that 2^-e, which
// scales the scores back, stays a normal float (a row below 2^-112 then lands under 2^14,
// still exactly: fp16 holds bf16's eight significant bits down to 2^-17).
__device__ __forceinline__ int q_row_exponent(float amax) {
  if (!(amax > 0.f) || !(amax < CUDART_INF_F)) return 0;
  const int binary_exponent = static_cast<int>((__float_as_uint(amax) >> 23) & 0xFFu) - 127;
  const int e = 14 - binary_exponent;
  return e > 126 ? 126 : e;
}

// 2^e for e in [-126, 127], exactly.
__device__ __forceinline__ float exact_power_of_two(int e) {
  return __uint_as_float(static_cast<uint32_t>(e + 127) << 23);
}

// Rewrites the [Rows][D] Q tile of type T at `q_smem` (landed, not yet read) as the fp16 A
// fragments warp::qk_scores_e4m3 loads, every row scaled by 2^e (q_row_exponent; e = 0 for
// fp16 q, which needs none), and leaves 2^-e of each row in `row_factor` (shared memory,
// Rows floats). Called by all Threads threads of the block once each has waited for its own
// copies of the tile; begins and ends with a barrier.
template <class T, int Rows, int D, class QTile, int Threads>
__device__ __forceinline__ void e4m3_q_fragments(uint32_t q_smem, float* row_factor, int tid) {
  static_assert(Rows % 16 == 0 && (Rows / 16) * (D / 16) * 32 % Threads == 0,
                "uneven fragment split");
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "16-bit q");
  constexpr bool kScale = std::is_same_v<T, __nv_bfloat16>;
  __syncthreads();  // every thread's copies of the tile
  auto pair_at = [&](int row, int col) {  // 4 elements: d = col .. col + 3
    return q_smem + 2 * (QTile::chunk_offset(row, col / 8) + col % 8);
  };
  if constexpr (kScale) {
    // The rows' largest magnitudes: Threads / Rows threads per row, then the group's lanes.
    constexpr int kPerRow = Threads / Rows;
    static_assert(Threads % Rows == 0 && kPerRow <= 32 && (D / 4) % kPerRow == 0,
                  "uneven row split");
    const int row = tid / kPerRow;
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < D / 4 / kPerRow; ++i) {
      const uint2 v = prim::load_shared_u2(pair_at(row, 4 * (tid % kPerRow + i * kPerRow)));
      const uint32_t words[2] = {v.x, v.y};
#pragma unroll
      for (int w = 0; w < 2; ++w) {
        amax = fmaxf(amax, fabsf(__uint_as_float(words[w] << 16)));
        amax = fmaxf(amax, fabsf(__uint_as_float(words[w] & 0xFFFF0000u)));
      }
    }
#pragma unroll
    for (int offset = kPerRow / 2; offset > 0; offset /= 2) {
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
    }
    if (tid % kPerRow == 0) row_factor[row] = exact_power_of_two(-q_row_exponent(amax));
  } else {
    if (tid < Rows) row_factor[tid] = 1.f;
  }
  __syncthreads();  // the factors; every thread done with its row reads

  // Each thread reads its fragments' values, then, after a barrier, writes them over the tile.
  constexpr int kEntries = (Rows / 16) * (D / 16) * 32 / Threads;
  uint32_t a[kEntries][4];
#pragma unroll
  for (int i = 0; i < kEntries; ++i) {
    const int entry = tid + i * Threads;
    const int l = entry % 32, c = (entry / 32) % (D / 16), m = entry / 32 / (D / 16);
    const int row = 16 * m + l / 4, col = 16 * c + 4 * (l % 4);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint2 v = prim::load_shared_u2(pair_at(row + 8 * half, col));
      if constexpr (kScale) {
        const float scale = __frcp_rn(row_factor[row + 8 * half]);  // a power of two: exact
        const uint32_t words[2] = {v.x, v.y};
#pragma unroll
        for (int w = 0; w < 2; ++w) {
          a[i][half + 2 * w] =
              prim::thread::pack2<__half>(__uint_as_float(words[w] << 16) * scale,
                                          __uint_as_float(words[w] & 0xFFFF0000u) * scale);
        }
      } else {
        a[i][half] = v.x;
        a[i][half + 2] = v.y;
      }
    }
  }
  __syncthreads();  // every value read
#pragma unroll
  for (int i = 0; i < kEntries; ++i) {
    const int entry = tid + i * Threads;
    const int l = entry % 32, c = (entry / 32) % (D / 16), m = entry / 32 / (D / 16);
    prim::store_shared(q_smem + warp::q_fragment_offset<D>(m, c, l),
                       make_uint4(a[i][0], a[i][1], a[i][2], a[i][3]));
  }
  __syncthreads();  // the fragments
}

}  // namespace flashattn::cuda::sm80
