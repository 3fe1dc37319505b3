// Dropout on the mma accumulator fragments: the keep-test of core/philox.hpp (the same pure
// function of (seed, offset, b * nheads + h, query row, key column) the CPU backends call),
// evaluated for the elements one thread holds, with each Philox draw computed by one lane
// only and its four keep bits passed to the lanes that hold the other columns of the draw.
//
// A draw covers keys 4c .. 4c + 3 of one query row. The fragments (prim/mma.cuh): lane
// (g = lane / 4, t = lane % 4) holds rows g and g + 8 and columns 8 j + 2 t, 8 j + 2 t + 1 of
// each 16 x 8 tile.
//   forward (rows = queries, columns = keys): a draw's four keys are held by lanes t and t ^ 1,
//     two each, for both rows; lane t draws for row g + 8 (t % 2) and the pair swaps halves
//     (one shuffle per row tile).
//   backward (S^T: rows = keys, columns = queries): a draw's four keys are rows held by the
//     four lanes with the same t and g / 4, one each, for four (row half, column) pairs; lane
//     r = g % 4 draws the pair (half r / 2, column parity r % 2) and the four lanes exchange
//     bits (three shuffles).
// Both give exactly the keep-test of every element; only the work is split.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/params.hpp"
#include "core/philox.hpp"

namespace flashattn::cuda::sm80 {

// The dropout parameters of one (batch entry, query head).
struct DropoutHead {
  uint64_t seed;
  uint64_t offset;
  uint32_t bh;  // b * nheads + h: the Philox counter's head coordinate
  uint32_t threshold;
  float rescale;  // 1 / (1 - p)

  __device__ __forceinline__ DropoutHead(const core::AttentionParams& p, int b, int h)
      : seed(p.seed),
        offset(p.offset),
        bh(static_cast<uint32_t>(b) * static_cast<uint32_t>(p.nheads) + static_cast<uint32_t>(h)),
        threshold(p.drop_threshold),
        rescale(p.dropout_rescale) {}

  __device__ __forceinline__ uint32_t keep_bits(int row, int col) const {
    return core::dropout_keep_bits(seed, offset, bh, static_cast<uint32_t>(row),
                                   static_cast<uint32_t>(col), threshold);
  }
};

// thread:: the forward's keep mask of one key block: rows row0 + 16 m + 8 half, columns
// key0 + 8 j + 2 (lane % 4) + e of s[MT][NT][4], drawn and applied after the softmax update.
// (Drawn before S = Q K^T instead, its bits stay live through the product and ptxas spills
// far more at d = 128.)
template <int MT, int NT>
struct FwdDropoutMask {
  static_assert(2 * NT <= 32, "two keep bits per column tile in one word");
  uint32_t bits[MT][2];  // [m][half]: bit 2 j + e set iff element [m][j][2 half + e] is kept
  float rescale;

  // For query head h of batch entry b. The whole warp must call it (shuffles).
  __device__ __forceinline__ void draw(const core::AttentionParams& p, int b, int h, int row0,
                                       int key0, int lane) {
    const DropoutHead d(p, b, h);
    rescale = d.rescale;
    const int t = lane % 4;
    const int own = t % 2;         // the row half this lane draws for
    const int col = key0 + 2 * t;  // its first column; col % 4 == 2 own
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      uint32_t mine = 0, theirs = 0;  // two keep bits per j: own columns, the partner's
      // Four draws in flight: 6% faster than one at a time at d = 64 on the H200 (the
      // multiply chains overlap), and about the same ptxas spills at d = 128 (192 bytes,
      // 136 with one, 832 with all eight).
#pragma unroll 4
      for (int j = 0; j < NT; ++j) {
        const uint32_t drawn = d.keep_bits(row0 + 16 * m + 8 * own, col + 8 * j);
        mine |= ((drawn >> (2 * own)) & 3u) << (2 * j);
        theirs |= ((drawn >> (2 - 2 * own)) & 3u) << (2 * j);
      }
      const uint32_t other = __shfl_xor_sync(0xffffffffu, theirs, 1);  // the other half's bits
      bits[m][0] = own == 0 ? mine : other;
      bits[m][1] = own == 0 ? other : mine;
    }
  }

  // Zeroes the dropped weights and scales the kept ones by 1 / (1 - p).
  __device__ __forceinline__ void apply(float (&s)[MT][NT][4]) const {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[m][j][2 * half + e];
            x = (bits[m][half] >> (2 * j + e)) & 1u ? x * rescale : 0.f;
          }
        }
      }
    }
  }
};

// The forward mask of an instantiation without dropout: nothing to draw, nothing to drop.
template <int MT, int NT>
struct FwdNoDropoutMask {
  __device__ __forceinline__ void draw(const core::AttentionParams&, int, int, int, int, int) {}
  __device__ __forceinline__ void apply(float (&)[MT][NT][4]) const {}
};

template <bool kDropout, int MT, int NT>
using FwdDropout = std::conditional_t<kDropout, FwdDropoutMask<MT, NT>, FwdNoDropoutMask<MT, NT>>;

// thread:: the backward's keep mask of one S^T tile of 16 keys (rows key0 + lane / 4 + 8 half)
// by 8 NT queries (columns query0 + 8 j + 2 (lane % 4) + e), computed once per tile by
// the whole warp (shuffles), then applied where P^T (dV's operand) and dP^T are formed.
template <int NT>
struct BwdDropoutMask {
  using Bits = std::conditional_t<(4 * NT <= 32), uint32_t, uint64_t>;
  Bits bits;  // bit (2 half + e) NT + j: element [j][2 half + e] kept
  float rescale;

  BwdDropoutMask() = default;
  // key0: the tile's first key (a multiple of 16).
  __device__ __forceinline__ BwdDropoutMask(const DropoutHead& d, int key0, int query0, int lane)
      : bits(0), rescale(d.rescale) {
    const int r = (lane / 4) % 4;  // this lane's key within its draws
    const int pair = r;            // the (half, column parity) pair it draws: 2 half + e
    const int key = key0 + 8 * (pair / 2) + 4 * (lane / 16);
    const int query = query0 + 2 * (lane % 4) + pair % 2;
    uint32_t drawn[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) drawn[j] = d.keep_bits(query + 8 * j, key);
    uint32_t own = 0;
#pragma unroll
    for (int j = 0; j < NT; ++j) own |= ((drawn[j] >> r) & 1u) << j;
    bits = static_cast<Bits>(own) << (pair * NT);
#pragma unroll
    for (int x = 1; x < 4; ++x) {
      // The lane r ^ x drew pair r ^ x; it sends bit r of each of its draws.
      uint32_t send = 0;
#pragma unroll
      for (int j = 0; j < NT; ++j) send |= ((drawn[j] >> (r ^ x)) & 1u) << j;
      const uint32_t got = __shfl_xor_sync(0xffffffffu, send, 4 * x);
      bits |= static_cast<Bits>(got) << ((pair ^ x) * NT);
    }
  }

  __device__ __forceinline__ bool kept(int j, int half, int e) const {
    return (bits >> ((2 * half + e) * NT + j)) & 1u;
  }
  // Multiplies every element of the tile by its Z: 0 (dropped) or 1 / (1 - p).
  __device__ __forceinline__ void apply(float (&x)[NT][4]) const {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) x[j][e] = kept(j, e / 2, e % 2) ? x[j][e] * rescale : 0.f;
    }
  }
};

// The mask of an instantiation without dropout: keeps everything, costs nothing.
struct NoDropoutMask {
  template <int NT>
  __device__ __forceinline__ void apply(float (&)[NT][4]) const {}
};

// The backward's mask of one S^T tile (BwdDropoutMask) for query head h of batch entry b, or
// NoDropoutMask when the instantiation has no dropout. Call it with the whole warp.
template <bool kDropout, int NT>
__device__ __forceinline__ auto bwd_dropout_mask(const core::AttentionParams& p, int b, int h,
                                                 int key0, int query0, int lane) {
  if constexpr (kDropout) {
    return BwdDropoutMask<NT>(DropoutHead(p, b, h), key0, query0, lane);
  } else {
    return NoDropoutMask{};
  }
}

}  // namespace flashattn::cuda::sm80
