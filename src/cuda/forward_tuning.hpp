// The forward kernels' tuning table: tile shape per head dim, readable from host and device.
// An entry changes speed, never results; each one is checked against the kernel's shape rules
// and against the shared memory of the smallest supported GPU (A100: 163 KiB per block).
#pragma once

namespace flashattn::cuda {

// Query rows x key rows per block, warps per block (each owns block_m / warps query rows),
// K/V pipeline stages (1: FlashAttention-2's load-V-during-QK schedule, two barriers per
// key block; n >= 2: blocks prefetched n-1 ahead, one barrier), and blocks per SM to size
// the register budget for.
struct FwdTile {
  int block_m;
  int block_n;
  int warps;
  int stages;
  int min_blocks_per_sm;
};

// Head dims with a compiled kernel; every other d <= 256 is padded up to the next one.
inline constexpr int kFwdHeadDims[] = {32, 64, 96, 128, 192, 256};
inline constexpr int kFwdMaxHeadDim = 256;

constexpr int fwd_kernel_head_dim(int head_dim) {
  for (int d : kFwdHeadDims) {
    if (head_dim <= d) return d;
  }
  return 0;
}

// Measured on an H200 with tests/cpp/cuda/tune (bf16, 16k tokens, seqlen 512..8192, see
// bench/RESULTS.md): the two-stage ring wins for d <= 64; for d = 128 one and two stages tie;
// for d >= 192, 64-row blocks of 4 warps (two blocks per SM) beat 128-row blocks of 8.
constexpr FwdTile fwd_sm80_tile(int head_dim) {
  switch (head_dim) {
    case 32: return {128, 64, 4, 2, 2};
    case 64: return {128, 64, 4, 2, 2};
    case 96: return {128, 64, 4, 1, 2};
    case 128: return {128, 64, 4, 1, 2};
    case 192: return {64, 64, 4, 1, 2};
    case 256: return {64, 64, 4, 1, 2};
    default: return {0, 0, 0, 0, 0};
  }
}

constexpr int fwd_smem_bytes(int head_dim, FwdTile t) {
  const int kv_copies = t.stages == 1 ? 2 : 2 * t.stages;
  return (t.block_m + kv_copies * t.block_n) * head_dim * 2;
}

// A shape the kernel can run on some GPU (Hopper: 227 KiB of shared memory per block).
constexpr bool fwd_tile_valid(int head_dim, FwdTile t) {
  return t.warps > 0 && t.block_m % (16 * t.warps) == 0 && t.block_n % 16 == 0 &&
         head_dim % 32 == 0 && t.stages >= 1 && t.min_blocks_per_sm >= 1 &&
         fwd_smem_bytes(head_dim, t) <= 227 * 1024;
}

// The shipped table must also run on the A100 (163 KiB per block).
constexpr bool fwd_table_entry_ok(int head_dim) {
  return fwd_tile_valid(head_dim, fwd_sm80_tile(head_dim)) &&
         fwd_smem_bytes(head_dim, fwd_sm80_tile(head_dim)) <= 163 * 1024;
}

static_assert(fwd_table_entry_ok(32) && fwd_table_entry_ok(64) && fwd_table_entry_ok(96) &&
              fwd_table_entry_ok(128) && fwd_table_entry_ok(192) && fwd_table_entry_ok(256),
              "a forward tile does not fit an sm_80 GPU");

}  // namespace flashattn::cuda
