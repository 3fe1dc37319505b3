// The compile-time shape of the Hopper forward for head dims (D, DV) and a tile (TileT::value,
// a FwdSm90Tile: the tuning table's, or a tuner's): the warpgroups and their register budgets,
// the operand tiles in shared memory, and that shared memory as a struct (FwdStorage).
//
// Warpgroups: warpgroup 0 is the producer (one thread issues every TMA load, the whole
// warpgroup for a paged cache; the others exit after giving their registers away), warpgroups
// 1 .. kMmaWarpgroups each own 64 query rows of the tile. setmaxnreg moves the producer's
// registers to the MMA warpgroups: 128 x 24 + 256 x 240 (two of them) or 128 x 32 + 384 x 160
// (three) fit the 64K register file; a tile of several blocks per SM
// (FwdSm90Tile::blocks_per_sm) splits the block's share the same way (three blocks of one MMA
// warpgroup: 128 x 24 + 128 x 136).
//
// kFp8T: q, k and v are e4m3 (the output stays 16-bit). Operand tiles are then 8-bit, in panels
// of 128 columns, and wgmma steps 32 along K. e4m3 wgmma reads both shared operands K-major,
// so V, which TMA lands as [keys][d_v] (VRawTile), is transposed in shared memory into VTile
// ([d_v][keys], keys in fp8_key_at order) by warps 1..3 of the producer warpgroup
// (fwd_transpose_v.cuh); they keep 40 registers (128 x 40 + 256 x 232 fit).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/forward_tuning.hpp"
#include "cuda/sm90/swizzle128_tile.cuh"

namespace flashattn::cuda::sm90 {

// The table's tile for (D, DV), or its narrow one, of a call with or without dropout
// (forward_tuning.hpp).
template <int D, int DV, bool kNarrow = false, bool kDropout = false>
struct FwdSm90TableTile {
  static constexpr FwdSm90Tile value = fwd_sm90_tile(D, DV, kNarrow, kDropout);
};

// The FP8 table's tile for head dim D, or its narrow one (forward_tuning.hpp).
template <int D, bool kNarrow = false>
struct FwdSm90Fp8TableTile {
  static constexpr FwdSm90Tile value = fwd_sm90_fp8_tile(D, kNarrow);
};

// mbarriers (sm90/mbarrier.cuh): "full" completes when the producer's TMA bytes landed,
// "empty" when every MMA warp (one arrival each) is done with the buffer. FP8: v_full/v_empty
// guard the transposed V (the transposing warps fill it), raw_full/raw_empty the TMA's landing
// buffer of V (the transposing warps drain it).
template <int Stages>
struct alignas(8) FwdBarriers {
  uint64_t q_full, q_empty;
  uint64_t k_full[Stages], k_empty[Stages];
  uint64_t v_full[Stages], v_empty[Stages];
  uint64_t raw_full[Stages], raw_empty[Stages];
};

// FP8 only: the ring of V as TMA lands it, before the transpose (an empty base elsewhere).
template <class Shape, bool kFp8 = Shape::kFp8>
struct FwdRawV {};

template <class Shape>
struct FwdRawV<Shape, true> {
  alignas(1024) uint8_t v_raw[Shape::kStages][Shape::VRawTile::kBytes];
};

// kPackGqaT: a tile's rows are (query, head) pairs of the query heads of one KV head
// (fwd_scheduler.cuh's FwdTileWork), the layout of short GQA calls (fwd_sm90_pack_gqa).
template <int D, int DV, class TileT = FwdSm90TableTile<D, DV>, bool kPackGqaT = false,
          bool kFp8T = false>
struct FwdShape {
  static constexpr FwdSm90Tile kTile = TileT::value;
  static constexpr bool kPackGqa = kPackGqaT;
  static constexpr bool kFp8 = kFp8T;
  static_assert(kFp8 ? fwd_sm90_fp8_tile_valid(D, DV, kTile) : fwd_sm90_tile_valid(D, DV, kTile),
                "invalid Hopper forward tile");
  static constexpr int kHeadDim = D;
  static constexpr int kHeadDimV = DV;
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kStages = kTile.stages;
  static constexpr int kMmaWarpgroups = kBlockM / 64;
  static constexpr int kMmaThreads = 128 * kMmaWarpgroups;
  static constexpr int kThreads = 128 + kMmaThreads;
  static constexpr int kMmaWarps = kMmaThreads / 32;
  static constexpr int kTransposeWarps = kFp8 ? 3 : 0;  // warps 1..3 of warpgroup 0
  static constexpr int kBlocksPerSm = kTile.blocks_per_sm;
  // A block launches with an equal share of the register file per thread (kLaunchRegisters,
  // what __launch_bounds__ gives ptxas); setmaxnreg then moves the producer's to the MMA
  // warpgroups within the block's share.
  static constexpr int kLaunchRegisters = 65536 / (kThreads * kBlocksPerSm) / 8 * 8;
  static constexpr int kProducerRegisters =
      kBlocksPerSm > 1 ? 24 : (kMmaWarpgroups == 2 ? (kFp8 ? 40 : 24) : 32);
  static constexpr int kMmaRegisters =
      kBlocksPerSm > 1
          ? (kLaunchRegisters * kThreads - 128 * kProducerRegisters) / kMmaThreads / 8 * 8
          : (kMmaWarpgroups == 2 ? (kFp8 ? 232 : 240) : 160);
  // setmaxnreg moves registers within what the block launched with.
  static_assert(128 * kProducerRegisters + kMmaThreads * kMmaRegisters <=
                    kLaunchRegisters * kThreads,
                "the register budgets exceed the block's share of the register file");
  static_assert(kBlocksPerSm == 1 || !kFp8, "FP8 runs one block per SM");
  static_assert(kMmaWarpgroups > 1 || kBlocksPerSm > 1,
                "one MMA warpgroup alone on an SM leaves the tensor cores idle in its softmax");
  static_assert(D % 16 == 0 && DV % 16 == 0, "wgmma steps of 16 along K and N");

  // Operand elements: 2 bytes, or 1 (e4m3); the K of one wgmma (32 bytes of a line).
  static constexpr int kElemBytes = kFp8 ? 1 : 2;
  static constexpr int kStepK = 32 / kElemBytes;
  // Tiles in 128-byte panels (64 or 128 columns); a head dim that is not a multiple of the
  // panel leaves the last panel partly unused (TMA fills its columns past the head dim with
  // zeros, and the products stop at the head dim).
  static constexpr int kPanelCols = 128 / kElemBytes;
  static constexpr int kQKCols = fwd_sm90_round_up(D, kPanelCols);
  static constexpr int kVCols = fwd_sm90_round_up(DV, kPanelCols);
  using QTile = Swizzle128Tile<kBlockM, kQKCols, kElemBytes>;
  using KTile = Swizzle128Tile<kBlockN, kQKCols, kElemBytes>;
  // 16-bit: rows = keys, the MN-major B of O += P V, as TMA lands it. FP8: rows = d_v, columns
  // = the block's keys (fp8_key_at order), the K-major B, written by the transpose from
  // VRawTile, V as TMA lands it.
  using VRawTile = Swizzle128Tile<kBlockN, kVCols, kElemBytes>;
  using VTile = std::conditional_t<
      kFp8, Swizzle128Tile<DV, fwd_sm90_round_up(kBlockN, kPanelCols), 1>, VRawTile>;
  // The epilogue's staging of O, 16-bit.
  using OTile = Swizzle128Tile<kBlockM, fwd_sm90_round_up(DV, 64)>;
};

// Shared memory, as Q, the K ring, the V ring and the epilogue's staging of O. A 16-bit
// forward stores O straight from registers, so that the next tile's V never waits for the
// previous tile's O and the MMA warpgroups never wait for each other at the end of a tile
// (bench/RESULTS.md has the A/B at d = 64, the last head dim that staged it). The FP8 forward
// stages O where shared memory has room for it beside the rings. With FP8 the V ring holds the
// transposed V and the raw ring (FwdRawV, an empty base otherwise) what TMA landed.
template <class Shape>
constexpr int fwd_sm90_raw_v_bytes() {
  return Shape::kFp8 ? Shape::kStages * Shape::VRawTile::kBytes : 0;
}

template <class Shape>
constexpr bool fwd_sm90_o_fits_apart() {
  return Shape::QTile::kBytes + Shape::kStages * (Shape::KTile::kBytes + Shape::VTile::kBytes) +
             fwd_sm90_raw_v_bytes<Shape>() + Shape::OTile::kBytes + 2048 <=
         227 * 1024;
}

template <class Shape, bool kOStaged = Shape::kFp8 && fwd_sm90_o_fits_apart<Shape>()>
struct FwdStorage;

template <class Shape>
struct FwdStorage<Shape, true> : FwdRawV<Shape> {
  static constexpr bool kStagesO = true;
  alignas(1024) uint8_t q[Shape::QTile::kBytes];
  alignas(1024) uint8_t k[Shape::kStages][Shape::KTile::kBytes];
  alignas(1024) uint8_t v[Shape::kStages][Shape::VTile::kBytes];
  alignas(1024) uint8_t o[Shape::OTile::kBytes];
  FwdBarriers<Shape::kStages> bar;
};

template <class Shape>
struct FwdStorage<Shape, false> : FwdRawV<Shape> {
  static constexpr bool kStagesO = false;
  alignas(1024) uint8_t q[Shape::QTile::kBytes];
  alignas(1024) uint8_t k[Shape::kStages][Shape::KTile::kBytes];
  alignas(1024) uint8_t v[Shape::kStages][Shape::VTile::kBytes];
  FwdBarriers<Shape::kStages> bar;
};

// Bytes of dynamic shared memory a block asks for: the storage and the slack to align it.
template <class Shape>
constexpr int fwd_sm90_storage_bytes() {
  return static_cast<int>(sizeof(FwdStorage<Shape>)) + 1024;
}
template <class Shape>
constexpr bool fwd_sm90_storage_fits() {
  return fwd_sm90_storage_bytes<Shape>() <= fwd_sm90_smem_per_block(Shape::kTile);
}

}  // namespace flashattn::cuda::sm90
