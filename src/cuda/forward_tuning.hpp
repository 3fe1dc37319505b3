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

// ---- The Hopper kernel (sm90/fwd_kernel.cuh) ------------------------------------------------
// A tile of block_m query rows, 64 per MMA warpgroup (block_m / 64 of them beside the producer
// warpgroup), against key blocks of block_n rows that stream through a ring of `stages`
// K and V buffers. The head dims of Q/K (head_dim) and of V/O (head_dim_v) are separate
// entries of the table, though only head_dim_v == head_dim is compiled so far. blocks_per_sm > 1
// puts that many blocks on an SM, each with its share of the registers and shared memory, so
// that one block's tile boundaries and softmax chains overlap the others' products; a tile of
// block_m = 64 (one MMA warpgroup) exists only that way.
struct FwdSm90Tile {
  int block_m;
  int block_n;
  int stages;
  int blocks_per_sm = 1;
};

// Head dims with a Hopper kernel (d == d_v); the others run on the sm80 kernels.
inline constexpr int kFwdSm90HeadDims[] = {64, 96, 128, 192, 256};

// Shapes follow what makes FlashAttention-3 fast: the S accumulator (block_n / 2 registers),
// the O accumulator (head_dim_v / 2) and P in registers must fit the MMA warpgroups' budget
// (240 registers with two of them, 160 with three; with three blocks of one per SM, 136), and
// Q plus two stages of K and V must fit 227 KiB of shared memory (a third of 228 with three
// blocks). `narrow`: at d = 64 and 128 the tile of calls whose later query blocks see more
// keys (causal), where a narrower key block wastes less of the diagonal blocks, and of calls
// with few keys (kFwdSm90NarrowKeys), where a tile's fixed costs weigh more (at d = 64, where
// those costs weigh most, three blocks of 64 rows per SM hide them behind each other); at
// d = 192 and 256 a key block of 64 (at d = 256 for short causal calls, fwd_sm90_use_narrow),
// and the tile of packed GQA. Where it differs from the other, both are compiled. `dropout`:
// a dropout call at d = 64 runs 128 x 128 on two MMA warpgroups, narrow or not: the draws'
// registers fit neither a third of the SM nor the three warpgroups' 160 as well
// (bench/RESULTS.md).
constexpr FwdSm90Tile fwd_sm90_tile(int head_dim, int head_dim_v, bool narrow = false,
                                    bool dropout = false) {
  if (head_dim != head_dim_v) return {0, 0, 0};
  if (dropout && head_dim == 64) return {128, 128, 2};
  if (narrow && head_dim == 64) return {64, 96, 2, 3};
  if (narrow && head_dim == 128) return {128, 128, 2};
  if (narrow && (head_dim == 192 || head_dim == 256)) return {128, 64, 2};
  switch (head_dim) {
    case 64: return {192, 128, 2};
    case 96: return {128, 128, 2};
    case 128: return {128, 176, 2};
    case 192: return {128, 112, 2};
    case 256: return {128, 80, 2};
    default: return {0, 0, 0};
  }
}

// Calls the sm80 kernel runs faster on a Hopper GPU: d = 256 (192 < d <= 256) under a causal
// mask with at most 512 keys, whose tiles are too short for the pipeline (bench/RESULTS.md).
constexpr bool fwd_sm90_faster(int head_dim, bool grows, int seqlen_k) {
  return !(head_dim > 192 && grows && seqlen_k <= 512);
}

// Whether the dense forward ever takes the narrow tile: at d = 256 the 64-key blocks were
// slower than the 80-key ones in the tuner's grid except causal 1k, so only there, and only
// without dropout (its narrow kernel was never timed and would add two instantiations to the
// build); d = 192 was not timed with them (the ninth session's tile table,
// bench/history/h200-2026-12-01.md).
constexpr bool fwd_sm90_dense_may_narrow(int head_dim, bool dropout) {
  return head_dim == 64 || head_dim == 128 || (head_dim == 256 && !dropout);
}

// Which calls run the narrow tile: `grows` (later query blocks see more keys) and seqlen_k.
inline constexpr int kFwdSm90NarrowKeys = 2048;
inline constexpr int kFwdSm90NarrowKeysD256 = 1024;
constexpr bool fwd_sm90_use_narrow(int head_dim, bool grows, int seqlen_k) {
  switch (head_dim) {
    case 64: return grows && seqlen_k <= kFwdSm90NarrowKeys;
    case 128: return grows || seqlen_k <= kFwdSm90NarrowKeys;
    case 256: return grows && seqlen_k <= kFwdSm90NarrowKeysD256;
    default: return false;
  }
}

// A paged KV cache's keys are loaded in boxes of the largest row count that divides both the
// page size (a multiple of 16) and the key block (a multiple of 16), so no box crosses a page.
constexpr int fwd_sm90_page_box_rows(int page_size, int block_n) {
  int a = page_size, b = block_n;
  while (b != 0) {
    const int r = a % b;
    a = b;
    b = r;
  }
  return a;
}

// Packed GQA (sm90/fwd_scheduler.cuh): one tile holds the rows of every query head of a KV
// head, so the key blocks are read once for all of them and short queries fill the tile. The
// group (nheads / nheads_k) must be a power of two that divides block_m. Chosen where the
// tiles' rows are clearly better used: the share of a tile's rows that hold a query, without
// packing, below 0.9 of the share with it.
constexpr double fwd_sm90_row_fill(long long rows, int block_m) {
  return static_cast<double>(rows) /
         static_cast<double>((rows + block_m - 1) / block_m * block_m);
}
constexpr bool fwd_sm90_pack_gqa(int nheads, int nheads_k, int seqlen_q, int block_m) {
  if (nheads_k <= 0 || nheads % nheads_k != 0 || seqlen_q <= 0) return false;
  const int group = nheads / nheads_k;
  if (group < 2 || (group & (group - 1)) != 0 || block_m % group != 0) return false;
  if (static_cast<long long>(seqlen_q) * group >= (1LL << 30)) return false;
  return fwd_sm90_row_fill(seqlen_q, block_m) <
         0.9 * fwd_sm90_row_fill(static_cast<long long>(seqlen_q) * group, block_m);
}

constexpr int fwd_sm90_round_up(int x, int to) { return (x + to - 1) / to * to; }

// The least shared memory the kernel's storage (sm90/fwd_shape.cuh) takes: Q, the K and V
// rings with O staged in the V ring (O gets a buffer of its own where that fits as well),
// 16-bit elements in 64-column panels, a 1 KiB slot for the barriers, and the 1 KiB
// alignment of the swizzled tiles.
constexpr int fwd_sm90_smem_bytes(int head_dim, int head_dim_v, FwdSm90Tile t) {
  const int qk_cols = fwd_sm90_round_up(head_dim, 64);
  const int v_cols = fwd_sm90_round_up(head_dim_v, 64);
  const int v_ring = t.stages * t.block_n * v_cols * 2;
  const int o_stage = t.block_m * v_cols * 2;
  return t.block_m * qk_cols * 2 + t.stages * t.block_n * qk_cols * 2 +
         (v_ring > o_stage ? v_ring : o_stage) + 1024 + 1024;
}

// Shared memory a block may take: 227 KiB alone on an SM; with several, each its share of the
// SM's 228 less the 1 KiB the hardware reserves per block.
constexpr int fwd_sm90_smem_per_block(FwdSm90Tile t) {
  return t.blocks_per_sm == 1 ? 227 * 1024 : (228 * 1024) / t.blocks_per_sm - 1024;
}

constexpr bool operator==(FwdSm90Tile a, FwdSm90Tile b) {
  return a.block_m == b.block_m && a.block_n == b.block_n && a.stages == b.stages &&
         a.blocks_per_sm == b.blocks_per_sm;
}

constexpr bool fwd_sm90_tile_valid(int head_dim, int head_dim_v, FwdSm90Tile t) {
  return (t.block_m == 128 || t.block_m == 192 || (t.block_m == 64 && t.blocks_per_sm > 1)) &&
         t.block_n % 16 == 0 && t.block_n >= 16 &&
         t.block_n <= 256 && t.stages >= 2 && head_dim % 32 == 0 && head_dim_v % 32 == 0 &&
         t.blocks_per_sm >= 1 && t.blocks_per_sm <= 4 &&
         fwd_sm90_smem_bytes(head_dim, head_dim_v, t) <= fwd_sm90_smem_per_block(t);
}

constexpr bool fwd_sm90_table_entry_ok(int head_dim) {
  return fwd_sm90_tile_valid(head_dim, head_dim, fwd_sm90_tile(head_dim, head_dim, false)) &&
         fwd_sm90_tile_valid(head_dim, head_dim, fwd_sm90_tile(head_dim, head_dim, true));
}

static_assert(fwd_sm90_table_entry_ok(64) && fwd_sm90_table_entry_ok(96) &&
                  fwd_sm90_table_entry_ok(128) && fwd_sm90_table_entry_ok(192) &&
                  fwd_sm90_table_entry_ok(256),
              "a Hopper forward tile does not fit");

// ---- The Hopper FP8 (e4m3) kernel (sm90/fwd_kernel.cuh with FwdShape::kFp8) ---------------
// e4m3 q, k and v, a 16-bit output. The transpose of V runs in the producer warpgroup on the
// registers the split leaves it. Each head dim has a tile and a narrow one for short calls
// (fwd_sm90_fp8_use_narrow): d = 64 runs 192 query rows (three MMA warpgroups), 128 where the
// 16-bit forward takes its narrow tile; d = 128 runs 192-key blocks, 128 on short calls; d = 256
// one tile. The key block is
// a multiple of 32 (the K of one e4m3 wgmma of P V); its transposed V is padded to 128-key
// panels. Storage: Q, the K ring, V's landing ring (8-bit) and its transposed ring, and O's
// staging (16-bit) where it fits (else the epilogue stores O from registers).
inline constexpr int kFwdSm90Fp8HeadDims[] = {64, 128, 256};

constexpr FwdSm90Tile fwd_sm90_fp8_tile(int head_dim, bool narrow = false) {
  switch (head_dim) {
    case 64: return narrow ? FwdSm90Tile{128, 128, 2} : FwdSm90Tile{192, 128, 2};
    case 128: return narrow ? FwdSm90Tile{128, 128, 2} : FwdSm90Tile{128, 192, 2};
    case 256: return {128, 96, 2};
    default: return {0, 0, 0};
  }
}

// Which FP8 calls run the narrow tile: at d = 64 those the 16-bit forward runs narrow (causal,
// at most 2048 keys), at d = 128 calls of at most 2048 keys and causal ones of at most 4096.
// A short call pays the pipeline's fill over few key blocks and masks part of its last one,
// a causal tile part of its diagonal ones: both cost less with narrower blocks
// (bench/RESULTS.md has the A/B).
inline constexpr int kFwdSm90Fp8NarrowCausalKeysD128 = 4096;
constexpr bool fwd_sm90_fp8_use_narrow(int head_dim, bool grows, int seqlen_k) {
  switch (head_dim) {
    case 64: return fwd_sm90_use_narrow(64, grows, seqlen_k);
    case 128:
      return seqlen_k <= kFwdSm90NarrowKeys ||
             (grows && seqlen_k <= kFwdSm90Fp8NarrowCausalKeysD128);
    default: return false;
  }
}

// Of each row's weights, every poly_every-th (0: none) is computed by a polynomial on the FMA
// pipe (prim/math.cuh's exp2_poly, of `degree`) instead of the MUFU's ex2. Only the FP8 kernel
// gains, whose products take half the 16-bit time per weight: at d = 64 every 8th, at d = 128
// every 16th (since V's transpose takes fewer issue slots); d = 256 and every 16-bit shape lost
// about as much as the instructions added (bench/RESULTS.md), and a 16-bit kernel would also
// need degree 4 to keep its lse within the tests' bound.
struct FwdSm90Exp2Split {
  int poly_every;
  int degree;
};

constexpr FwdSm90Exp2Split fwd_sm90_exp2_split(bool fp8, int head_dim) {
  if (!fp8) return {0, 3};
  switch (head_dim) {
    case 64: return {8, 3};
    case 128: return {16, 3};
    default: return {0, 3};
  }
}

// Lazy rescaling of O (online_softmax.cuh's fold_block kSlack): a row keeps the maximum it
// last rescaled to until a block's maximum exceeds it by more than kSlack in the log2 domain,
// so most blocks skip the head_dim_v / 2 multiplies per thread that rescale O. Measured faster
// at d = 128 and 256 (16-bit, slack 8: weights up to 256, which bf16 and fp16 hold; FP8, slack
// 4: the kernel lowers its weights' offset from 2^8 to 2^4 so that they still stay within
// e4m3's 448), slower at d = 64 in both, so those rescale every block (-1). d = 192 (96 O
// registers) takes the slack as d = 128 and 256 do, d = 96 (48) rescales as d = 64 does
// (bench/RESULTS.md).
constexpr int fwd_sm90_rescale_slack(bool fp8, int head_dim) {
  if (head_dim < 128) return -1;
  return fp8 ? 4 : 8;
}

constexpr int fwd_sm90_fp8_smem_bytes(int head_dim, int head_dim_v, FwdSm90Tile t) {
  const int qk_cols = fwd_sm90_round_up(head_dim, 128);
  const int v_cols = fwd_sm90_round_up(head_dim_v, 128);
  const int k_ring = t.stages * t.block_n * qk_cols;
  const int others = t.block_m * qk_cols + t.stages * t.block_n * v_cols +
                     t.stages * head_dim_v * fwd_sm90_round_up(t.block_n, 128) + 1024 + 1024;
  const int o_stage = t.block_m * fwd_sm90_round_up(head_dim_v, 64) * 2;
  if (others + k_ring + o_stage <= 227 * 1024) return others + k_ring + o_stage;
  return others + k_ring;
}

constexpr bool fwd_sm90_fp8_tile_valid(int head_dim, int head_dim_v, FwdSm90Tile t) {
  return (t.block_m == 128 || t.block_m == 192) && t.block_n % 32 == 0 && t.block_n >= 32 && t.block_n <= 256 &&
         t.stages >= 2 && head_dim % 32 == 0 && head_dim_v % 32 == 0 &&
         fwd_sm90_fp8_smem_bytes(head_dim, head_dim_v, t) <= 227 * 1024;
}

static_assert(fwd_sm90_fp8_tile_valid(64, 64, fwd_sm90_fp8_tile(64)) &&
                  fwd_sm90_fp8_tile_valid(64, 64, fwd_sm90_fp8_tile(64, true)) &&
                  fwd_sm90_fp8_tile_valid(128, 128, fwd_sm90_fp8_tile(128)) &&
                  fwd_sm90_fp8_tile_valid(128, 128, fwd_sm90_fp8_tile(128, true)) &&
                  fwd_sm90_fp8_tile_valid(256, 256, fwd_sm90_fp8_tile(256)),
              "a Hopper FP8 forward tile does not fit");

}  // namespace flashattn::cuda
