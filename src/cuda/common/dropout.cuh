// Dropout on the mma accumulator fragments: the keep-test of core/philox.hpp (the same pure
// function of (seed, offset, b * nheads + h, query row, key column) the CPU backends call),
// evaluated for the elements one thread holds. A Philox draw gives the keep bits of sixteen
// neighbouring keys of one query (a group: keys 16 c .. 16 c + 15), in quad order
// (core::dropout_keep_quads: nibble w = the four keys that lane t = w of a quad holds); each
// draw is computed by one lane only and its bits are passed by shuffles to the lanes holding
// those elements, so a lane draws about once per sixteen of its elements.
//
// The fragments (prim/mma.cuh): lane (g = lane / 4, t = lane % 4) holds rows g and g + 8 and
// columns 8 j + 2 t, 8 j + 2 t + 1 of each 16 x 8 tile.
//   forward (rows = queries, columns = keys): a group is the pair of tiles 2 c, 2 c + 1 of
//     one row; lane t's four keys of it are nibble t of the draw. For two groups the quad
//     needs four draws; lane t makes the one of row half t % 2 and group 2 k + t / 2, and each
//     lane takes its nibble of all four (four shuffles per two words of draws).
//   backward (S^T: rows = keys, columns = queries): a group is the 16 keys of the tile, rows
//     g and g + 8 of every lane; the draw of one query covers one column of the tile. Lane
//     (c = lane % 8, p = lane / 8) draws query c of tiles 4 k + p, and each lane takes the bits
//     of keys g and g + 8 (bits 2 h + g % 2 of nibble g / 2) of the draws of its columns
//     (eight shuffles per mask).
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

  __device__ __forceinline__ uint32_t keep_quads(int row, int col) const {
    return core::dropout_keep_quads(seed, offset, bh, static_cast<uint32_t>(row),
                                    static_cast<uint32_t>(col), threshold);
  }
};

// thread:: the forward's keep mask of one key block: rows row0 + 16 m + 8 half, columns
// key0 + 8 j + 2 (lane % 4) + e of s[MT][NT][4], drawn and applied after the softmax update
// (the row sums and lse are those of the undropped weights). Both forward kernels use it: the
// mma.sync kernel's fragments and the wgmma accumulator seen as row tiles
// (sm90/fwd_mainloop.cuh's as_row_tiles) have this layout.
// kAllInFlight: every draw of a row tile unrolled, so that the Philox chains (ten dependent
// rounds each) overlap one another; without it one draw is in flight at a time, which the
// mma.sync kernel needs to stay out of local memory at d = 128 (its accumulators are live).
template <int MT, int NT, bool kAllInFlight = false>
struct FwdDropoutMask {
  static_assert(2 * NT <= 64, "two keep bits per column tile in one word");
  static_assert(NT % 2 == 0, "key blocks of whole sixteen-key groups");
  using Bits = std::conditional_t<(2 * NT <= 32), uint32_t, uint64_t>;
  Bits bits[MT][2];  // [m][half]: bit 2 j + e set iff element [m][j][2 half + e] is kept
  float rescale;

  // For query head h of batch entry b; row0 includes the lane's row g, key0 (a multiple of
  // 16) does not include its column. The whole warp must call it (shuffles).
  __device__ __forceinline__ void draw(const core::AttentionParams& p, int b, int h, int row0,
                                       int key0, int lane) {
    draw(DropoutHead(p, b, h), row0, key0, lane);
  }
  __device__ __forceinline__ void draw(const DropoutHead& d, int row0, int key0, int lane) {
    constexpr int kGroups = NT / 2;               // sixteen keys each
    constexpr int kRounds = (kGroups + 1) / 2;    // draws per lane (per row tile)
    constexpr int kWords = (kRounds + 1) / 2;     // two draws per word
    rescale = d.rescale;
    const int t = lane % 4;
    const int quad = lane - t;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      // Half k % 2 of word k / 2: the draw of (row half t % 2, group 2 k + t / 2). With an odd
      // kGroups the last draw of lanes t >= 2 lies past the block; nobody reads its bits.
      // The words are unrolled so that none is indexed at run time (local memory).
      uint32_t drawn[kWords];
#pragma unroll
      for (int w = 0; w < kWords; ++w) {
        uint32_t word = 0;
#pragma unroll (kAllInFlight ? 2 : 1)
        for (int kk = 0; kk < 2 && 2 * w + kk < kRounds; ++kk) {
          const int group = 2 * (2 * w + kk) + t / 2;
          word |= d.keep_quads(row0 + 16 * m + 8 * (t % 2), key0 + 16 * group) << (16 * kk);
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
          for (int kk = 0; kk < 2; ++kk) {
            const int group = 2 * (2 * w + kk) + source / 2;
            if (group >= kGroups) continue;
            // This lane's nibble: keys 2 t + e of tile 2 group and of tile 2 group + 1.
            const uint32_t nibble = (got >> (16 * kk + 4 * t)) & 0xFu;
            bits[m][half] |= static_cast<Bits>(nibble) << (4 * group);
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

  // Zeroes the dropped weights of P packed two 16-bit weights per register in row tile 0:
  // register r of step ks holds elements e = 0, 1 of tile 2 ks + r / 2, row half r % 2 (the
  // wgmma A operand, sm90/fwd_mainloop.cuh's pack). The kept ones are not scaled: the caller
  // scales O by 1 / (1 - p) once instead. A nibble's bits spread to the high bits of four bytes
  // (one multiply), and a byte permute with sign replication makes each half-word mask.
  template <int kSteps>
  __device__ __forceinline__ void zero_dropped_packed(uint32_t (&p)[kSteps][4]) const {
    static_assert(MT == 1 && kSteps == NT / 2, "one row tile, one step per sixteen keys");
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const uint32_t nibble = static_cast<uint32_t>(bits[0][half] >> (4 * ks)) & 0xFu;
        const uint32_t high = nibble * 0x10204080u;  // bit b to bit 8 b + 7
        uint32_t tile0, tile1;
        asm("prmt.b32 %0, %1, 0, 0x9988;" : "=r"(tile0) : "r"(high));
        asm("prmt.b32 %0, %1, 0, 0xBBAA;" : "=r"(tile1) : "r"(high));
        p[ks][half] &= tile0;
        p[ks][2 + half] &= tile1;
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
  template <int kSteps>
  __device__ __forceinline__ void zero_dropped_packed(uint32_t (&)[kSteps][4]) const {}
};

template <bool kDropout, int MT, int NT, bool kAllInFlight = false>
using FwdDropout = std::conditional_t<kDropout, FwdDropoutMask<MT, NT, kAllInFlight>,
                                      FwdNoDropoutMask<MT, NT>>;

// thread:: the backward's keep mask of one S^T tile of 16 keys (rows key0 + lane / 4 + 8 half)
// by 8 NT queries (columns query0 + 8 j + 2 (lane % 4) + e), computed once per tile by
// the whole warp (shuffles), then applied where P^T (dV's operand) and dP^T are formed.
template <int NT>
struct BwdDropoutMask {
  uint32_t bits;  // bit 4 j + i: element [j][i] kept
  float rescale;

  BwdDropoutMask() = default;
  // key0: the tile's first key (a multiple of 16); query0: the share's first query.
  __device__ __forceinline__ BwdDropoutMask(const DropoutHead& d, int key0, int query0, int lane)
      : bits(0), rescale(d.rescale) {
    static_assert(NT % 2 == 0 && NT <= 8, "at most two draws per lane, in one word");
    constexpr int kRounds = (NT + 3) / 4;  // draws per lane
    // Half k of `drawn`: the sixteen keep bits of query c of tile 4 k + p (with NT = 2,
    // lanes p >= 2 draw past the tile; nobody reads those bits).
    const int c = lane % 8, p = lane / 8;
    uint32_t drawn = 0;
#pragma unroll
    for (int k = 0; k < kRounds; ++k) {
      drawn |= d.keep_quads(query0 + 8 * (4 * k + p) + c, key0) << (16 * k);
    }
    const int g = lane / 4, t = lane % 4;
    const int key_g = 4 * (g / 2) + g % 2;  // key g's bit in a draw; key g + 8's is 2 further
    // Bits 16 k + 2 h of a draw's word, h = 0, 1, for each of its kRounds halves.
    constexpr uint32_t kHalves = kRounds > 1 ? 0x00050005u : 0x5u;
#pragma unroll
    for (int source = 0; source < 8; ++source) {
      // Column parity e of tiles 4 k + pp was drawn by lane 2 t + e + 8 pp. Shifted down by
      // key_g, bit 16 k + 2 h of its word is element [4 k + pp][2 h + e], which lands at bit
      // 4 (4 k + pp) + 2 h + e of `bits` when shifted up by 4 pp + e: one shift, one mask
      // and one or per source, the eight sources' bits disjoint. With NT < 8 the bits of
      // tiles past NT are never read.
      const int e = source % 2, pp = source / 2;
      const uint32_t got = __shfl_sync(0xffffffffu, drawn, 2 * t + e + 8 * pp) >> key_g;
      bits |= (got << (4 * pp + e)) & (kHalves << (4 * pp + e));
    }
  }

  __device__ __forceinline__ bool kept(int j, int half, int e) const {
    return (bits >> (4 * j + 2 * half + e)) & 1u;
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
