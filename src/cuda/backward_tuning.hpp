// The backward kernel's tuning table: tile shape per head dim, readable from host and device.
// An entry changes speed, never results.
#pragma once

namespace flashattn::cuda {

// block_n keys per block (each of the `warps` warps owns 16 of them and keeps their dK and dV
// rows in registers: 2 * head_dim / slices fp32 registers per thread), block_m queries per
// step of the loop over the query blocks (the S^T and dP^T accumulators: block_m / 2
// registers each). slices > 1 splits the dK/dV columns over that many blocks per key block,
// each recomputing S and dP (the two products over the full head dim) and taking its share
// of dQ: how d = 256 fits the registers. Sized so that little or nothing spills (ptxas -v).
struct BwdTile {
  int block_m;
  int block_n;
  int warps;
  int min_blocks_per_sm;
  int slices;
};

// Head dims with a compiled backward kernel; every other d <= 256 is padded up to the next
// one (129 .. 256 to 256: one kernel with two column slices instead of two more kernels).
inline constexpr int kBwdHeadDims[] = {32, 64, 96, 128, 256};
inline constexpr int kBwdMaxHeadDim = 256;

constexpr int bwd_kernel_head_dim(int head_dim) {
  if (head_dim < 1) return 0;
  for (int d : kBwdHeadDims) {
    if (head_dim <= d) return d;
  }
  return 0;
}

constexpr BwdTile bwd_sm80_tile(int head_dim) {
  switch (head_dim) {
    case 32: return {64, 64, 4, 2, 1};
    case 64: return {64, 64, 4, 2, 1};
    case 96: return {64, 64, 4, 1, 1};
    case 128: return {32, 64, 4, 1, 1};
    case 256: return {32, 64, 4, 1, 2};
    default: return {0, 0, 0, 0, 0};
  }
}

// Q and dO double-buffered, K, V, dS^T, and the rows' lse and D double-buffered.
constexpr int bwd_smem_bytes(int head_dim, BwdTile t) {
  return (4 * t.block_m + 2 * t.block_n) * head_dim * 2 + t.block_n * t.block_m * 2 +
         16 * t.block_m;
}

// A slice must start on a 64-column panel of the shared-memory tiles (smem_tile.cuh).
constexpr bool bwd_tile_valid(int head_dim, BwdTile t) {
  return t.warps > 0 && t.block_n == 16 * t.warps && t.block_m % 32 == 0 &&
         head_dim % 32 == 0 && t.slices >= 1 && head_dim % t.slices == 0 &&
         (t.slices == 1 || (head_dim / t.slices) % 64 == 0) && head_dim / t.slices <= 128 &&
         bwd_smem_bytes(head_dim, t) <= 163 * 1024;
}

static_assert(bwd_tile_valid(32, bwd_sm80_tile(32)) && bwd_tile_valid(64, bwd_sm80_tile(64)) &&
                  bwd_tile_valid(96, bwd_sm80_tile(96)) &&
                  bwd_tile_valid(128, bwd_sm80_tile(128)) && bwd_tile_valid(256, bwd_sm80_tile(256)),
              "a backward tile does not fit an sm_80 GPU");

}  // namespace flashattn::cuda
