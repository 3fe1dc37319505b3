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
// stores because lane q writes its four columns in a rotated order (rotation below).
//
// Keys past the sequence's last (seqlen_k) are written as zero: the mask hides their scores,
// but a NaN or Inf read from the rows TMA did not zero-fill (the next varlen sequence, rows past
// seqused_k) would reach O through 0 * NaN.
//
// The ring: V's block i of a tile lands in raw slot at (raw_full, from the producer's TMA); the
// warps wait for it and for the MMA warpgroups to have released transposed slot at (v_empty),
// transpose, and signal v_full (one arrival per warp) and raw_empty. Where O is staged in the
// transposed ring, a tile's first block also waits for the previous tile's epilogue (o_empty).
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
  // A warp's task: 16 keys (group h) by 32 columns (8 words of 4).
  static constexpr int kKeyGroups = kBlockN / 16;
  static constexpr int kColumnGroups = kHeadDimV / 32;
  static constexpr int kTasks = kKeyGroups * kColumnGroups;
  static_assert(kBlockN % 32 == 0 && kHeadDimV % 32 == 0, "whole tasks");

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

  // Raw slot -> transposed slot, keys at or past `valid` as zero.
  __device__ __forceinline__ void transpose(uint32_t raw, uint32_t vt, int valid) const {
    const int t = lane % 4, q = lane / 4;
    // The order in which lane q writes its four columns: column j lands on line 4(8c + q) + j,
    // whose swizzled chunk is h ^ (that line % 8); rotating j by q / 2 makes the eight q of a
    // warp cover the eight chunk positions in every store.
    const uint32_t rotation = static_cast<uint32_t>(q / 2);
    for (int task = warp; task < kTasks; task += kWarps) {
      const int h = task % kKeyGroups;
      const int col = 4 * (8 * (task / kKeyGroups) + q);
      uint32_t w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = 16 * h + 8 * (i / 2) + 2 * t + i % 2;  // fp8_key_at(16h + 4t + i)
        w[i] = key < valid ? load_word(raw + RawTile::byte_offset(key, col)) : 0u;
      }
#pragma unroll
      for (uint32_t step = 0; step < 4; ++step) {
        const uint32_t j = step ^ rotation;
        // Byte j of each of the four words, in key order: one column's four keys.
        const uint32_t pick = j | ((j + 4) << 4);
        const uint32_t low = permute(w[0], w[1], pick);
        const uint32_t high = permute(w[2], w[3], pick);
        store_word(vt + VTile::byte_offset(col + static_cast<int>(j), 16 * h + 4 * t),
                   permute(low, high, 0x5410));
      }
    }
  }

  // Run by the kWarps warps together, over the same tiles as the producer.
  __device__ __forceinline__ void run() const {
    const auto scheduler = tile_scheduler<Shape>(params);
    Ring at;
    uint32_t tile_parity = 0;  // of the tiles with keys this block has transposed so far
    for (FwdTileCursor c = scheduler.first(); scheduler.valid(c); scheduler.advance(c)) {
      const FwdTileWork w = scheduler.work(params.p, c);
      if (!w.has_rows() || !w.has_keys()) continue;  // the producer skips it alike
      if constexpr (Storage::kOStagedInV) {
        mbarrier::wait(addr(&smem.bar.o_empty), tile_parity ^ 1);
      }
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
      tile_parity ^= 1;
    }
  }
};

}  // namespace flashattn::cuda::sm90
