// Dropout on the mma accumulator fragments: the keep-test of core/philox.hpp (the same pure
// function of (seed, offset, b * nheads + h, query row, key column) the CPU backends call),
// evaluated for the elements one thread holds. A Philox draw gives the keep bits of eight
// neighbouring keys of one query; each draw is computed by one lane only and its bits are
// passed by shuffles to the lanes holding those elements, so a lane draws once per eight
// of its elements.
//
// The fragments (prim/mma.cuh): lane (g = lane / 4, t = lane % 4) holds rows g and g + 8 and
// columns 8 j + 2 t, 8 j + 2 t + 1 of each 16 x 8 tile.
//   forward (rows = queries, columns = keys): the draw of (row half, tile j) covers the tile's
//     eight keys, held two each by the four lanes of a quad. For each pair of tiles the quad
//     needs four draws; lane t makes the one of row half t % 2 and tile 2 jj + t / 2, and
//     each lane takes its two bits of all four (four shuffles per 16-row tile).
//   backward (S^T: rows = keys, columns = queries): the draw of (query, row half) covers the
//     eight keys g = 0..7 of that half, one per lane with the same t. Per pair of tiles the
//     32 lanes make the 32 draws (query c = lane % 8 of tile 2 jj + lane / 16, half
//     (lane / 8) % 2), and each lane takes bit g of the eight draws of its elements (eight
//     shuffles per 16-key tile).
// Both give exactly the keep-test of every element; only the work is split.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/params.hpp"
#include "core/philox.hpp"

namespace flashattn::cuda {

// The dropout parameters of one (batch entry, query head).
struct DropoutHead {
  uint64_t seed;
  uint64_t offset;
  uint32_t bh;  // b * nheads + h: the Philox counter's head coordinate
  uint32_t threshold;
  float rescale;  // 1 / (1 - p)

  __device__ __forceinline__ DropoutHead(const core::AttentionParams& p, int b, int h)
      : DropoutHead(p, core::dropout_key(p), b, h) {}
  __device__ __forceinline__ DropoutHead(const core::AttentionParams& p, core::DropoutKey key,
                                         int b, int h)
      : seed(key.seed),
        offset(key.offset),
        bh(static_cast<uint32_t>(b) * static_cast<uint32_t>(p.nheads) + static_cast<uint32_t>(h)),
        threshold(p.drop_threshold),
        rescale(p.dropout_rescale) {}

  __device__ __forceinline__ uint32_t keep_bits(int row, int col) const {
    return core::dropout_keep_bits(seed, offset, bh, static_cast<uint32_t>(row),
                                   static_cast<uint32_t>(col), threshold);
  }
};

// thread:: the forward's keep mask of one key block: rows row0 + 16 m + 8 half, columns
// key0 + 8 j + 2 (lane % 4) + e of s[MT][NT][4], drawn and applied after the softmax update
// (the row sums and lse are those of the undropped weights). Both forward kernels use it: the
// mma.sync kernel's fragments and the wgmma accumulator seen as row tiles
// (sm90/fwd_mainloop.cuh's as_row_tiles) have this layout.
// (Drawn before S = Q K^T instead, its bits stay live through the product and ptxas spills
// far more at d = 128.)
template <int MT, int NT>
struct FwdDropoutMask {
  static_assert(2 * NT <= 64, "two keep bits per column tile in one word");
  using Bits = std::conditional_t<(2 * NT <= 32), uint32_t, uint64_t>;
  Bits bits[MT][2];  // [m][half]: bit 2 j + e set iff element [m][j][2 half + e] is kept
  float rescale;

  // For query head h of batch entry b; row0 includes the lane's row g, key0 (a multiple of 8)
  // does not include its column. The whole warp must call it (shuffles).
  __device__ __forceinline__ void draw(const core::AttentionParams& p, int b, int h, int row0,
                                       int key0, int lane) {
    draw(DropoutHead(p, b, h), row0, key0, lane);
  }
  __device__ __forceinline__ void draw(const DropoutHead& d, int row0, int key0, int lane) {
    static_assert(NT % 2 == 0, "tiles drawn in pairs");
    constexpr int kPairs = NT / 2;
    constexpr int kWords = (kPairs + 3) / 4;  // 8 keep bits per pair
    rescale = d.rescale;
    const int t = lane % 4;
    const int quad = lane - t;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      uint32_t drawn[kWords];  // byte jj: the draw of (row half t % 2, tile 2 jj + t / 2)
      // One draw at a time: ptxas -v at d = 128 (sm_90a) spills 236 B so, 364 B with two in
      // flight and 732 B with four (the output accumulators are live here). The words are
      // unrolled so that none is indexed at run time (which would put them in local memory).
#pragma unroll
      for (int w = 0; w < kWords; ++w) {
        uint32_t word = 0;
#pragma unroll 1
        for (int k = 0; k < 4 && 4 * w + k < kPairs; ++k) {
          const int jj = 4 * w + k;
          const uint32_t bits8 =
              d.keep_bits(row0 + 16 * m + 8 * (t % 2), key0 + 8 * (2 * jj + t / 2));
          word |= bits8 << (8 * k);
        }
        drawn[w] = word;
      }
      bits[m][0] = bits[m][1] = 0;
#pragma unroll
      for (int source = 0; source < 4; ++source) {
        const int half = source % 2;
#pragma unroll
        for (int w = 0; w < kWords; ++w) {
          const uint32_t got = __shfl_sync(0xffffffffu, drawn[w], quad + source);
#pragma unroll
          for (int jj = 4 * w; jj < 4 * w + 4 && jj < kPairs; ++jj) {
            const int j = 2 * jj + source / 2;
            bits[m][half] |= static_cast<Bits>((got >> (8 * (jj % 4) + 2 * t)) & 3u) << (2 * j);
          }
        }
      }
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
  __device__ __forceinline__ void draw(const DropoutHead&, int, int, int) {}
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
  // key0: the tile's first key (a multiple of 16); query0: the share's first query.
  __device__ __forceinline__ BwdDropoutMask(const DropoutHead& d, int key0, int query0, int lane)
      : bits(0), rescale(d.rescale) {
    static_assert(NT % 2 == 0 && NT <= 8, "tiles drawn in pairs, four pairs per word");
    constexpr int kPairs = NT / 2;
    // This lane's draws: query c of tile 2 jj + parity, keys of row half `half`.
    const int c = lane % 8, half = (lane / 8) % 2, parity = lane / 16;
    uint32_t drawn = 0;  // byte jj: the eight keep bits of pair jj's draw
#pragma unroll
    for (int jj = 0; jj < kPairs; ++jj) {
      drawn |= d.keep_bits(query0 + 8 * (2 * jj + parity) + c, key0 + 8 * half) << (8 * jj);
    }
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int source = 0; source < 8; ++source) {
      // Element (half h, column parity e) of tile 2 jj + p was drawn by lane 2 t + e + 8 h + 16 p.
      const int e = source % 2, h = (source / 2) % 2, p = source / 4;
      const uint32_t got = __shfl_sync(0xffffffffu, drawn, 2 * t + e + 8 * h + 16 * p);
#pragma unroll
      for (int jj = 0; jj < kPairs; ++jj) {
        bits |= static_cast<Bits>((got >> (8 * jj + g)) & 1u) << ((2 * h + e) * NT + 2 * jj + p);
      }
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

}  // namespace flashattn::cuda
