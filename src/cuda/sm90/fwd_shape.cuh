// The compile-time shape of the Hopper forward for head dims (D, DV) and a tile (TileT::value,
// a FwdSm90Tile: the tuning table's, or a tuner's): the warpgroups and their register budgets,
// the operand tiles in shared memory, and that shared memory as a struct (FwdStorage).
//
// Warpgroups: warpgroup 0 is the producer (one thread issues every TMA load, a warp for a paged
// cache; the others exit after giving their registers away), warpgroups 1 .. kMmaWarpgroups
// each own 64 query rows of the tile. setmaxnreg moves the producer's registers to the MMA
// warpgroups: 128 x 24 + 256 x 240 (two of them) or 128 x 32 + 384 x 160 (three) fit the 64K
// register file.
#pragma once

#include <cstdint>

#include "cuda/forward_tuning.hpp"
#include "cuda/sm90/swizzle128_tile.cuh"

namespace flashattn::cuda::sm90 {

// The table's tile for (D, DV), or its narrow one (forward_tuning.hpp).
template <int D, int DV, bool kNarrow = false>
struct FwdSm90TableTile {
  static constexpr FwdSm90Tile value = fwd_sm90_tile(D, DV, kNarrow);
};

// mbarriers (sm90/mbarrier.cuh): "full" completes when the producer's TMA bytes landed,
// "empty" when every MMA warp (one arrival each) is done with the buffer.
template <int Stages>
struct alignas(8) FwdBarriers {
  uint64_t q_full, q_empty;
  uint64_t k_full[Stages], k_empty[Stages];
  uint64_t v_full[Stages], v_empty[Stages];
};

// kPackGqaT: a tile's rows are (query, head) pairs of the query heads of one KV head
// (fwd_scheduler.cuh's FwdTileWork), the layout of short GQA calls (fwd_sm90_pack_gqa).
template <int D, int DV, class TileT = FwdSm90TableTile<D, DV>, bool kPackGqaT = false>
struct FwdShape {
  static constexpr FwdSm90Tile kTile = TileT::value;
  static constexpr bool kPackGqa = kPackGqaT;
  static_assert(fwd_sm90_tile_valid(D, DV, kTile), "invalid Hopper forward tile");
  static constexpr int kHeadDim = D;
  static constexpr int kHeadDimV = DV;
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kStages = kTile.stages;
  static constexpr int kMmaWarpgroups = kBlockM / 64;
  static constexpr int kMmaThreads = 128 * kMmaWarpgroups;
  static constexpr int kThreads = 128 + kMmaThreads;
  static constexpr int kMmaWarps = kMmaThreads / 32;
  static constexpr int kProducerRegisters = kMmaWarpgroups == 2 ? 24 : 32;
  static constexpr int kMmaRegisters = kMmaWarpgroups == 2 ? 240 : 160;
  static_assert(128 * kProducerRegisters + kMmaThreads * kMmaRegisters <= 65536,
                "the register budgets exceed the register file");
  static_assert(D % 16 == 0 && DV % 16 == 0, "wgmma steps of 16 along K and N");

  // 16-bit tiles in 64-column panels; a head dim that is not a multiple of 64 leaves the last
  // panel partly unused (TMA fills its columns past the head dim with zeros).
  static constexpr int kQKCols = fwd_sm90_round_up(D, 64);
  static constexpr int kVCols = fwd_sm90_round_up(DV, 64);
  using QTile = Swizzle128Tile<kBlockM, kQKCols>;
  using KTile = Swizzle128Tile<kBlockN, kQKCols>;
  using VTile = Swizzle128Tile<kBlockN, kVCols>;  // rows = keys: the MN-major B of O += P V
  using OTile = Swizzle128Tile<kBlockM, kVCols>;  // the epilogue's staging of O
};

// Shared memory, as Q, the K ring, the V ring and the epilogue's staging of O. O is staged
// only where shared memory has room for it beside the rings; otherwise the epilogue stores it
// straight from registers, so that the next tile's V never waits for the previous tile's O
// and the MMA warpgroups never wait for each other at the end of a tile.
template <class Shape>
constexpr bool fwd_sm90_o_fits_apart() {
  return Shape::QTile::kBytes + Shape::kStages * (Shape::KTile::kBytes + Shape::VTile::kBytes) +
             Shape::OTile::kBytes + 2048 <=
         227 * 1024;
}

template <class Shape, bool kOStaged = fwd_sm90_o_fits_apart<Shape>()>
struct FwdStorage;

template <class Shape>
struct FwdStorage<Shape, true> {
  static constexpr bool kStagesO = true;
  alignas(1024) uint8_t q[Shape::QTile::kBytes];
  alignas(1024) uint8_t k[Shape::kStages][Shape::KTile::kBytes];
  alignas(1024) uint8_t v[Shape::kStages][Shape::VTile::kBytes];
  alignas(1024) uint8_t o[Shape::OTile::kBytes];
  FwdBarriers<Shape::kStages> bar;
};

template <class Shape>
struct FwdStorage<Shape, false> {
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

}  // namespace flashattn::cuda::sm90
