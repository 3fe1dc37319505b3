// The backward kernel's tuning table: tile shape per head dim, readable from host and device.
// An entry changes speed, never results.
#pragma once

#include <cstdint>

namespace flashattn::cuda {

// One block owns block_n keys and loops over the query blocks of block_m rows. Its warps take
// three different shares of the work (bwd_kernel.cuh):
//   S^T and dP^T (block_n x block_m): sdp_warps_n warps along the keys, the rest along the
//     queries;
//   dK and dV (block_n x head_dim, fp32 registers for the whole kernel): kv_warps_n warps
//     along the keys, the rest along the columns;
//   dQ (block_m x head_dim): dq_warps_m warps along the queries, the rest along the columns.
// Larger per-warp shares read fewer shared-memory bytes per multiply-add; dK and dV bound them
// through the registers (ptxas -v: nothing should spill).
struct BwdTile {
  int block_m;
  int block_n;
  int warps;
  int min_blocks_per_sm;
  int sdp_warps_n;
  int kv_warps_n;
  int dq_warps_m;
};

// Head dims with a compiled backward kernel; every other d <= 256 is padded up to the next.
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
    case 32: return {64, 128, 8, 1, 4, 8, 4};
    case 64: return {128, 128, 8, 1, 2, 4, 4};
    case 96: return {64, 64, 4, 1, 2, 4, 4};
    case 128: return {64, 128, 8, 1, 4, 4, 2};
    case 256: return {32, 64, 8, 1, 4, 2, 1};
    default: return {0, 0, 0, 0, 0, 0, 0};
  }
}

// Q and dO double-buffered, K, V, P^T, dS^T, and the rows' lse and D double-buffered.
constexpr int bwd_smem_bytes(int head_dim, BwdTile t) {
  return (4 * t.block_m + 2 * t.block_n) * head_dim * 2 + 2 * t.block_n * t.block_m * 2 +
         16 * t.block_m;
}

// The column panel of a shared-memory tile `width` elements wide (smem_tile.cuh).
constexpr int bwd_panel(int width) { return width % 64 == 0 ? 64 : 32; }

// A warp's columns [c0, c0 + cols) of a tile `width` wide, c0 a multiple of cols: its ldmatrix
// lane offsets stay valid if it covers whole panels or stays inside one (bwd_gemm.cuh).
constexpr bool bwd_columns_ok(int cols, int width) {
  return cols % 16 == 0 && width % cols == 0 &&
         (cols % bwd_panel(width) == 0 || bwd_panel(width) % cols == 0);
}

// One warp's share `a x b` of a `rows x cols` product split over `warps_a` x (warps / warps_a).
constexpr bool bwd_split_ok(int rows, int warps, int warps_a) {
  return warps_a > 0 && warps % warps_a == 0 && rows % warps_a == 0 && (rows / warps_a) % 16 == 0;
}

// Shared memory a block may use: every sm_80-family GPU (A100) and the largest (H100, H200).
// The table's tiles keep to the first; the tuner may try tiles up to the second.
inline constexpr int kBwdSmemSm80 = 163 * 1024;
inline constexpr int kBwdSmemMax = 227 * 1024;

constexpr bool bwd_tile_valid(int head_dim, BwdTile t, int smem_limit = kBwdSmemSm80) {
  const int threads = 32 * t.warps;
  const int copy_rows = t.warps > 0 ? threads / (bwd_panel(head_dim) / 8) : 0;  // per pass
  return t.warps > 0 && head_dim % 32 == 0 && t.block_m % 32 == 0 && t.block_n % 16 == 0 &&
         threads >= 2 * t.block_m && copy_rows % 16 == 0 && t.block_m % copy_rows == 0 &&
         t.block_n % copy_rows == 0 &&
         bwd_split_ok(t.block_n, t.warps, t.sdp_warps_n) &&
         bwd_split_ok(t.block_m, t.warps, t.warps / t.sdp_warps_n) &&
         bwd_split_ok(t.block_n, t.warps, t.kv_warps_n) &&
         bwd_columns_ok(head_dim / (t.warps / t.kv_warps_n), head_dim) &&
         bwd_split_ok(t.block_m, t.warps, t.dq_warps_m) &&
         bwd_columns_ok(t.block_m / t.dq_warps_m, t.block_m) &&
         bwd_columns_ok(head_dim / (t.warps / t.dq_warps_m), head_dim) &&
         bwd_smem_bytes(head_dim, t) <= smem_limit;
}

static_assert(bwd_tile_valid(32, bwd_sm80_tile(32)) && bwd_tile_valid(64, bwd_sm80_tile(64)) &&
                  bwd_tile_valid(96, bwd_sm80_tile(96)) &&
                  bwd_tile_valid(128, bwd_sm80_tile(128)) && bwd_tile_valid(256, bwd_sm80_tile(256)),
              "a backward tile does not fit an sm_80 GPU");

// The Hopper kernel (sm90/bwd_kernel.cuh) for the head dims where it exists: two warpgroups
// and block_m queries per step, as many as dK, dV, S^T and dP^T in registers allow. With
// block_n = 128 each warpgroup owns 64 keys (the key split); with block_n = 64 (d = 256, whose
// dK and dV would not fit one warpgroup's registers) both own all keys and split the head dim
// (the column split). block_n is the sm80 table's, so the deterministic fixed order of the dQ
// additions is the same whichever kernel runs (the sm90 kernel alone also has the rotated
// order of bwd_block_order.cuh). dq_writer (key split only): a third warpgroup
// adds dQ into the accumulator from a shared-memory stash, at the cost of 15 registers per MMA
// thread (240 instead of 255; the key split takes S^T and dP^T 64 queries at a time to fit).
// writer_halves: in the deterministic kernel the writer's two halves take alternate steps
// (bwd_kernel.cuh), which cut the deterministic mode's cost at d = 128 and raised it at d = 64
// (block_m 128), so d = 64 keeps one writer (bench/RESULTS.md).
struct BwdSm90Tile {
  int block_m;
  int block_n;
  int warps;  // of the MMA warpgroups
  bool dq_writer;
  bool writer_halves;
  bool stagger_dropout;  // the default mode's kernel with dropout: BwdSchedule::kStaggered
};

constexpr BwdSm90Tile bwd_sm90_tile(int head_dim) {
  switch (head_dim) {
    case 64: return {128, 128, 8, true, false, false};
    case 128: return {64, 128, 8, true, true, true};
    case 256: return {64, 64, 8, false, false, false};
    default: return {0, 0, 0, false, false, false};
  }
}

constexpr bool bwd_sm90_has(int head_dim) { return bwd_sm90_tile(head_dim).block_m != 0; }

// GQA on few blocks: a block of the sm90 kernel walks every query head of its KV head, so a
// grid of (key blocks, KV heads, batch) smaller than the GPU leaves SMs idle (Qwen2-0.5B's
// 14 query heads on 2 KV heads, one sequence of 2554 tokens at d = 64: 40 blocks for 132 SMs).
// Then the query heads of a KV head are split among `splits` blocks, each adding
// its fp32 dK/dV partials, which bwd_combine_dkv sums in split order; enough splits to fill
// the GPU once, at most one per query head. The deterministic kernel keeps one block per KV
// head (its turns and orders are planned per block).
constexpr int bwd_sm90_kv_splits(int64_t blocks, int group, int sms, bool deterministic) {
  if (deterministic || group < 2 || blocks <= 0 || blocks >= sms) return 1;
  const int64_t wanted = (sms + blocks - 1) / blocks;
  return static_cast<int>(wanted < group ? wanted : group);
}

// Alignment slack for the 1024-byte swizzle atoms, Q and dO double-buffered, K, V, dS^T (and
// P^T in the column split, or dS^T's second buffer when staggered), the rows' lse and D
// double-buffered, the two Q / dO buffers' two mbarriers each, and the dQ writer's two fp32
// stashes (one when staggered; rows padded by 8 floats) and their two mbarriers each or,
// without the writer, a 16 x 32 fp32 scratch per warp. `staggered`: the kernel's schedule
// (sm90/bwd_shape.cuh).
constexpr int bwd_sm90_smem_bytes(int head_dim, BwdSm90Tile t, bool staggered) {
  const bool key_split = t.block_n == 128;
  return 1024 + (4 * t.block_m + 2 * t.block_n) * head_dim * 2 +
         (key_split && !staggered ? 1 : 2) * t.block_n * t.block_m * 2 + 16 * t.block_m +
         4 * 8 +
         (t.dq_writer ? (staggered ? 1 : 2) * (t.block_m * (head_dim + 8) * 4 + 2 * 8)
                      : t.warps * 16 * 32 * 4);
}

constexpr bool bwd_sm90_tile_valid(int head_dim, BwdSm90Tile t) {
  return head_dim % 64 == 0 && t.warps == 8 && (t.block_m == 64 || t.block_m == 128) &&
         (t.block_n == 128 || (t.block_n == 64 && head_dim % 128 == 0 && t.block_m == 64)) &&
         t.block_n == bwd_sm80_tile(head_dim).block_n && (t.block_n == 128 || !t.dq_writer) &&
         (t.dq_writer || !t.writer_halves) &&
         (!t.stagger_dropout || (t.dq_writer && t.block_m == 64 && t.block_n == 128)) &&
         bwd_sm90_smem_bytes(head_dim, t, false) <= kBwdSmemMax &&
         bwd_sm90_smem_bytes(head_dim, t, t.stagger_dropout) <= kBwdSmemMax;
}

// The query block of the workspace's deterministic turn counters: the smallest block_m of the
// kernels that may run, so that the counters suffice for either.
constexpr int bwd_workspace_block_m(int head_dim) {
  const int sm80 = bwd_sm80_tile(head_dim).block_m;
  const int sm90 = bwd_sm90_tile(head_dim).block_m;
  return sm90 != 0 && sm90 < sm80 ? sm90 : sm80;
}

}  // namespace flashattn::cuda
