// The FP8 forward's transpose of V (FwdShape::kFp8): warps 1..3 of the producer warpgroup turn
// each key block of V, as TMA landed it ([keys][d_v], VRawTile), into the K-major B operand of
// O += P V ([d_v][keys], VTile) that e4m3 wgmma needs, while the MMA warpgroups compute.
//
// Keys go into VTile in fp8_key_at order (wgmma_fragments.cuh): then the S accumulator's
// registers, rounded to e4m3, are P's A fragment as they are. Key positions 4t .. 4t+3 of each 16
// hold keys {2t, 2t+1, 8+2t, 9+2t}. A warp takes 16 keys x 32 columns at a time: one ldmatrix
// .trans of four 8 x 8 matrices of 16-bit pairs (keys 0-7 and 8-15, columns 0-15 and 16-31)
// leaves lane (t = lane % 4, p = lane / 4) holding keys 2t, 2t+1 (and 8+2t, 9+2t) of column
// pairs 2p, 2p+1: two byte permutes per pair of registers make the words of positions 4t .. 4t+3
// of lines 2p and 2p+1, which one stmatrix of four 8 x 8 matrices stores (rows = lines, 16
// bytes = the 16 key positions). Lanes p >= 4 put their odd line in the first matrix of a pair
// and their even line in the second, so that each matrix's 8 lines fall on 8 different chunk
// positions of the swizzle (no bank conflict); the loads' 8 key rows do already.
//
// Keys past the sequence's last (seqlen_k) are written as zero: the mask hides their scores,
// but a NaN or Inf read from the rows TMA did not zero-fill (the next varlen sequence, rows past
// seqused_k) would reach O through 0 * NaN.
//
// The ring: V's block i of a tile lands in raw slot at (raw_full, from the producer's TMA); the
// warps wait for it and for the MMA warpgroups to have released transposed slot at (v_empty),
// transpose, and signal v_full (one arrival per warp) and raw_empty.
#pragma once

#include <cstdint>

#include "cuda/prim/ldmatrix.cuh"
#include "cuda/prim/math.cuh"
#include "cuda/sm90/fwd_params.cuh"
#include "cuda/sm90/fwd_scheduler.cuh"
#include "cuda/sm90/fwd_shape.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/ring.cuh"
#include "cuda/sm90/stmatrix.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace flashattn::cuda::sm90 {

template <class Shape>
struct FwdTransposeV {
  static_assert(Shape::kFp8, "only e4m3 V is transposed");
  using Storage = FwdStorage<Shape>;
  using RawTile = typename Shape::VRawTile;
  using VTile = typename Shape::VTile;
  using Ring = RingPosition<Shape::kStages>;
  static constexpr int kBlockN = Shape::kBlockN;
  static constexpr int kHeadDimV = Shape::kHeadDimV;
  static constexpr int kWarps = Shape::kTransposeWarps;
  // A warp takes a group of 16 keys (h) at a time, all its columns in groups of 32 (c).
  static constexpr int kKeyGroups = kBlockN / 16;
  static constexpr int kColumnGroups = kHeadDimV / 32;
  static_assert(kBlockN % 32 == 0 && kHeadDimV % 32 == 0, "whole groups");
  static_assert(RawTile::kPanelCols == 128 && VTile::kPanelCols == 128, "8-bit tiles");

  const FwdSm90Params& params;
  Storage& smem;
  const int warp;  // 0 .. kWarps - 1
  const int lane;

  __device__ __forceinline__ uint32_t addr(const void* p) const { return prim::smem_addr(p); }

  static __device__ __forceinline__ uint32_t permute(uint32_t a, uint32_t b, uint32_t selector) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
    return d;
  }

  // Raw slot -> transposed slot, keys at or past `valid` as zero (kMasked: the block has such
  // keys; full blocks skip the masking's ANDs). Lane (matrix i = lane / 8,
  // row r = lane % 8) names for the load key 16h + 8(i % 2) + r at columns 32c + 16(i / 2) ..
  // + 15, and for the store line 32c + 16(i / 2) + 2r + ((i % 2) ^ (r >= 4)) at key positions
  // 16h .. 16h + 15; Swizzle128Tile's offsets with what does not change along h or c taken out:
  //   raw: panel(c) + (16h + 8(i % 2) + r) * 128 + ((2(c % 4) + i / 2) ^ r) * 16,
  //        where the xor splits: 32(c % 4) ^ 16(i / 2 ^ r);
  //   VTile: panel(h) + line * 128 + ((h % 8) ^ (line % 8)) * 16, line % 8 fixed per lane.
  template <bool kMasked>
  __device__ __forceinline__ void transpose(uint32_t raw, uint32_t vt, int valid) const {
    const int i = lane / 8, r = lane % 8;
    const int t = lane % 4, p = lane / 4;
    const uint32_t load_lane =
        raw + 128 * (8 * (i % 2) + r) + 16 * static_cast<uint32_t>((i / 2) ^ r);
    const int line = 16 * (i / 2) + 2 * r + ((i % 2) ^ (r >= 4 ? 1 : 0));  // + 32c
    const uint32_t store_lane = vt + 128 * line;
    const uint32_t line_mix = static_cast<uint32_t>(line % 8);
    // Lane p's words of its even and odd line, in the order of the stores' matrices.
    const uint32_t first = p < 4 ? 0x6420u : 0x7531u;
    const uint32_t second = p < 4 ? 0x7531u : 0x6420u;
    for (int h = warp; h < kKeyGroups; h += kWarps) {
      const uint32_t load_h = load_lane + 2048 * h;
      const uint32_t store_h =
          store_lane + (h / 8) * VTile::kPanelBytes + 16 * ((h % 8) ^ line_mix);
      // Keys of the group past `valid` (only in a sequence's last block): bytes of keys 2t,
      // 2t+1 of each register pair, and of 8+2t, 9+2t.
      uint32_t keep_low = ~0u, keep_high = ~0u;
      if (kMasked && 16 * h + 16 > valid) {
        const int k = 16 * h + 2 * t;
        keep_low = (k < valid ? 0x0000ffffu : 0u) | (k + 1 < valid ? 0xffff0000u : 0u);
        keep_high = (k + 8 < valid ? 0x0000ffffu : 0u) | (k + 9 < valid ? 0xffff0000u : 0u);
      }
#pragma unroll
      for (int c = 0; c < kColumnGroups; ++c) {
        uint32_t w[4];
        prim::warp::ldmatrix_x4_trans(
            w, (load_h + (c / 4) * RawTile::kPanelBytes) ^ (32u * (c % 4)));
        uint32_t out[4];
#pragma unroll
        for (int pair = 0; pair < 2; ++pair) {
          const uint32_t low = kMasked ? w[2 * pair] & keep_low : w[2 * pair];
          const uint32_t high = kMasked ? w[2 * pair + 1] & keep_high : w[2 * pair + 1];
          out[2 * pair] = permute(low, high, first);
          out[2 * pair + 1] = permute(low, high, second);
        }
        sm90::warp::stmatrix_x4(store_h + 4096 * c, out);
      }
    }
  }

  // Run by the kWarps warps together, over the same tiles as the producer.
  __device__ __forceinline__ void run() const {
    const auto scheduler = tile_scheduler<Shape>(params);
    Ring at;
    for (FwdTileCursor c = scheduler.first(); scheduler.valid(c); scheduler.advance(c)) {
      const FwdTileWork w = scheduler.work(params.p, c);
      if (!w.has_rows() || !w.has_keys()) continue;  // the producer skips it alike
      // The mainloop consumes the key blocks from the last to the first.
      for (int n = w.kb.end - 1; n >= w.kb.begin; --n) {
        mbarrier::wait(addr(&smem.bar.raw_full[at.slot]), at.full_parity());
        mbarrier::wait(addr(&smem.bar.v_empty[at.slot]), at.empty_parity());
        const int valid = w.seq.seqlen_k - n * kBlockN;
        if (valid >= kBlockN) {
          transpose<false>(addr(smem.v_raw[at.slot]), addr(smem.v[at.slot]), valid);
        } else {
          transpose<true>(addr(smem.v_raw[at.slot]), addr(smem.v[at.slot]), valid);
        }
        // The stores are seen by the wgmma that reads the slot (async proxy), and the loads are
        // done before the producer's TMA refills the raw slot.
        warpgroup::fence_proxy_async_shared();
        __syncwarp();
        if (lane == 0) {
          mbarrier::arrive(addr(&smem.bar.v_full[at.slot]));
          mbarrier::arrive(addr(&smem.bar.raw_empty[at.slot]));
        }
        at.advance();
      }
    }
  }
};

}  // namespace flashattn::cuda::sm90
