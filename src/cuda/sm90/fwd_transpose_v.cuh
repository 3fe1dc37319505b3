// The FP8 forward's transpose of V (FwdShape::kFp8): warps 1..3 of the producer warpgroup turn
// each key block of V, as TMA landed it ([keys][d_v], VRawTile), into the K-major B operand of
// O += P V ([d_v][keys], VTile) that e4m3 wgmma needs, while the MMA warpgroups compute.
//
// Keys go into VTile in fp8_key_at order (wgmma_fragments.cuh): then the S accumulator's
// registers, rounded to e4m3, are P's A fragment as they are. Key positions 4t .. 4t+3 of each 16
// hold keys {2t, 2t+1, 8+2t, 9+2t}; so a lane reads one 4-byte word (4 columns) from each of
// those four key rows and writes, per column, one word of four keys: a 4 x 4 byte transpose
// (byte permutes). Lane (t = lane % 4, q = lane / 4) of a warp takes word columns 4(8c + q) ..
// of the 16 keys of group h; both its loads and its stores then hit 32 different banks, the
// stores because lane q writes its four columns in a rotated order (rotation below). The
// addresses are the tiles' byte_offset with what is fixed per lane computed once: the loop
// over column groups is a few integer operations beside the loads, permutes and stores.
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

#include "cuda/prim/math.cuh"
#include "cuda/sm90/fwd_params.cuh"
#include "cuda/sm90/fwd_scheduler.cuh"
#include "cuda/sm90/fwd_shape.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/ring.cuh"
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

  static __device__ __forceinline__ uint32_t load_word(uint32_t at) {
    uint32_t v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(at) : "memory");
    return v;
  }
  static __device__ __forceinline__ void store_word(uint32_t at, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(v) : "memory");
  }
  static __device__ __forceinline__ uint32_t permute(uint32_t a, uint32_t b, uint32_t selector) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
    return d;
  }

  // Raw slot -> transposed slot, keys at or past `valid` as zero. Lane (t, q) reads key rows
  // 16h + k_i, k_i = 8(i/2) + 2t + i%2 (fp8_key_at(16h + 4t + i)), at columns 32c + 4q .. + 3,
  // and writes lines 32c + 4q + j at key positions 16h + 4t .. + 3. Swizzle128Tile's offsets,
  // with the parts that do not change along h or c taken out of the loops:
  //   raw: panel(c) + (16h + k_i) * 128 + ((2(c % 4) + q/4) ^ (k_i % 8)) * 16 + 4(q % 4)
  //        where k_i % 8 = 2t + i%2, and the xor splits: 32(c % 4) ^ 16(q/4 ^ 2t ^ i%2);
  //   VTile: panel(h) + (32c + 4q + j) * 128 + ((h % 8) ^ (4(q % 2) + j)) * 16 + 4t.
  __device__ __forceinline__ void transpose(uint32_t raw, uint32_t vt, int valid) const {
    const int t = lane % 4, q = lane / 4;
    // The order in which lane q writes its four columns: column j lands on line 32c + 4q + j,
    // whose swizzled chunk is h ^ (that line % 8); rotating j by q / 2 makes the eight q of a
    // warp cover the eight chunk positions in every store.
    const uint32_t rotation = static_cast<uint32_t>(q / 2);
    const uint32_t raw_row = raw + 256 * t + 4 * (q % 4);           // key 2t, in-chunk word
    const uint32_t raw_chunk = 16u * static_cast<uint32_t>((q / 4) ^ (2 * t));  // i even
    const uint32_t vt_line = vt + 512 * q + 4 * t;                   // line 4q, word t
    uint32_t pick[4], step_line[4];
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      const uint32_t j = static_cast<uint32_t>(step) ^ rotation;
      pick[step] = j | ((j + 4) << 4);  // byte j of two words, in order
    }
    for (int h = warp; h < kKeyGroups; h += kWarps) {
      const uint32_t h_mix = static_cast<uint32_t>(h % 8) ^ (4u * (q % 2));
#pragma unroll
      for (int step = 0; step < 4; ++step) {
        const uint32_t j = static_cast<uint32_t>(step) ^ rotation;
        step_line[step] = vt_line + (h / 8) * VTile::kPanelBytes + 128 * j + 16 * (h_mix ^ j);
      }
      const uint32_t raw_h = raw_row + 2048 * h;
      bool in[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) in[i] = 16 * h + 8 * (i / 2) + 2 * t + i % 2 < valid;
#pragma unroll
      for (int c = 0; c < kColumnGroups; ++c) {
        const uint32_t base = raw_h + (c / 4) * RawTile::kPanelBytes;
        const uint32_t even = base + (raw_chunk ^ (32u * (c % 4)));
        const uint32_t odd = base + 128 + ((raw_chunk ^ 16u) ^ (32u * (c % 4)));
        uint32_t w[4];
        w[0] = in[0] ? load_word(even) : 0u;
        w[1] = in[1] ? load_word(odd) : 0u;
        w[2] = in[2] ? load_word(even + 1024) : 0u;
        w[3] = in[3] ? load_word(odd + 1024) : 0u;
#pragma unroll
        for (int step = 0; step < 4; ++step) {
          const uint32_t low = permute(w[0], w[1], pick[step]);
          const uint32_t high = permute(w[2], w[3], pick[step]);
          store_word(step_line[step] + 4096 * c, permute(low, high, 0x5410));
        }
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
        transpose(addr(smem.v_raw[at.slot]), addr(smem.v[at.slot]),
                  w.seq.seqlen_k - n * kBlockN);
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
