// The KV-cache attention kernel's tiles, readable from host and device. Two shapes per head
// dim: a decode tile (few packed query rows: 16 rows, the key block split among 4 warps, a
// deep cp.async ring so that the memory system always has K/V in flight) and a prefill tile
// (many rows: the forward's 128 x 64 shape, each warp its own rows).
#pragma once

namespace flashattn::cuda {

// Packed query rows per block, warps along the rows and along the keys, keys per pipeline
// stage (shared by the key-warps), pipeline stages (>= 2: blocks prefetched stages-1 ahead).
struct KvTile {
  int block_m;
  int warps_m;
  int warps_n;
  int block_n;
  int stages;
};

// Compiled head dims: a call with d <= 256, d % 8 == 0 runs the next one up, its extra
// columns zero-filled on load and never stored (the cache is updated in place, so the
// forward's padded copy is not an option).
inline constexpr int kKvHeadDims[] = {64, 128, 256};

// With an e4m3 cache: d <= 128 runs the 128 kernel (the zero-filled columns cost shared
// memory and tensor work, not memory traffic), which keeps the instantiation files few.
inline constexpr int kKvE4m3HeadDims[] = {128, 256};

constexpr int kv_kernel_head_dim(int head_dim, bool e4m3_cache = false) {
  if (e4m3_cache) {
    for (int d : kKvE4m3HeadDims) {
      if (head_dim <= d) return d;
    }
    return 0;
  }
  for (int d : kKvHeadDims) {
    if (head_dim <= d) return d;
  }
  return 0;
}

// Decode: 16 packed rows (a GQA group of up to 16 heads at seqlen_q = 1) against 64 keys per
// stage, 16 per warp. The ring is as deep as two blocks per SM allow (d = 128: 3 stages of
// 32 KiB, 100 KiB per block). An e4m3 cache (cache_bytes 1) has stages of half the bytes and
// more work per byte (the conversion): a ring of 4 stages (d = 128, 70 KiB per block) lets
// three blocks share an SM, whose warps hide each other's conversion and products.
constexpr KvTile kv_decode_tile(int head_dim, int cache_bytes = 2) {
  if (cache_bytes == 1) return {16, 1, 4, 64, head_dim <= 128 ? 4 : 3};
  return {16, 1, 4, 64, head_dim <= 64 ? 4 : (head_dim <= 128 ? 3 : 2)};
}

constexpr KvTile kv_prefill_tile(int head_dim) {
  return head_dim <= 128 ? KvTile{128, 4, 1, 64, 2} : KvTile{64, 4, 1, 64, 2};
}

// Packed rows up to which a call uses the decode tile (two decode blocks per KV head still
// read K/V fewer times, through L2, than one mostly empty prefill block costs in compute).
inline constexpr int kKvDecodeMaxRows = 32;

// Splits of an e4m3-cache decode whose blocks fill more than half a wave of resident blocks
// (`slots`, `per_sm` per SM): the count in [1, max_splits] that minimizes the waves per split,
// where a wave's last, partial round counts in full unless it still holds two blocks per SM.
// Such blocks convert what they read: nearly alone on an SM they run at their instructions'
// pace, not memory's, so a thin last round costs about a whole one (bench/RESULTS.md: batch 64
// x 32k keys, 512 blocks on 396 slots, 1346 us unsplit, 1014 us in 3 splits). Ties, within
// 2%, go to fewer splits (each costs a combine).
constexpr int kv_e4m3_wave_splits(long long blocks, long long slots, int per_sm, int max_splits) {
  int best = 1;
  double best_cost = 0.0;
  for (int s = 1; s <= (max_splits < 1 ? 1 : max_splits); ++s) {
    const double waves = static_cast<double>(blocks * s) / static_cast<double>(slots);
    const long long full = static_cast<long long>(waves);
    const double tail = waves - static_cast<double>(full);
    const double counted = static_cast<double>(full) + (tail == 0.0 ? 0.0
                                                        : tail * per_sm >= 2.0 ? tail : 1.0);
    const double cost = counted / s;
    if (s == 1 || cost < best_cost * 0.98) {
      best = s;
      best_cost = cost;
    }
  }
  return best;
}

// The int64 offsets of the K and V rows of two key blocks (kv_kernel.cuh: row offsets).
constexpr int kv_row_offset_bytes(KvTile t) { return 2 * 2 * t.block_n * 8; }

// Q, the K/V ring in the cache's element size and, for an e4m3 cache read by a tile whose
// warps share keys (warps_m > 1), the K and V blocks converted to q's type (kv_convert.cuh);
// the decode tile converts in registers (sm80/kv_e4m3_gemm.cuh).
constexpr int kv_smem_bytes(int head_dim, KvTile t, int cache_bytes = 2) {
  const int converted = cache_bytes == 2 || t.warps_m == 1 ? 0 : 2 * t.block_n * head_dim * 2;
  return t.block_m * head_dim * 2 + 2 * t.stages * t.block_n * head_dim * cache_bytes +
         converted + kv_row_offset_bytes(t);
}

// The epilogue reuses the tile memory for the fp32 partial outputs of the key-warps and their
// row statistics.
constexpr int kv_epilogue_bytes(int head_dim, KvTile t) {
  return t.warps_n * t.block_m * (head_dim + 3) * 4;  // rows of d + 1, max, sum
}

constexpr bool kv_tile_valid(int head_dim, KvTile t, int cache_bytes = 2) {
  return t.warps_m * t.warps_n == 4 && t.block_m % (16 * t.warps_m) == 0 &&
         t.block_n % (16 * t.warps_n) == 0 && head_dim % 64 == 0 && t.stages >= 2 &&
         kv_epilogue_bytes(head_dim, t) <= kv_smem_bytes(head_dim, t, cache_bytes) &&
         kv_smem_bytes(head_dim, t, cache_bytes) <= 227 * 1024;
}

static_assert(kv_tile_valid(64, kv_decode_tile(64)) && kv_tile_valid(128, kv_decode_tile(128)) &&
                  kv_tile_valid(256, kv_decode_tile(256)) &&
                  kv_tile_valid(64, kv_prefill_tile(64)) &&
                  kv_tile_valid(128, kv_prefill_tile(128)) &&
                  kv_tile_valid(256, kv_prefill_tile(256)),
              "a KV-cache tile is invalid");
static_assert(kv_tile_valid(128, kv_decode_tile(128, 1), 1) &&
                  kv_tile_valid(256, kv_decode_tile(256, 1), 1) &&
                  kv_tile_valid(128, kv_prefill_tile(128), 1) &&
                  kv_tile_valid(256, kv_prefill_tile(256), 1),
              "a KV-cache tile of an e4m3 cache is invalid");

}  // namespace flashattn::cuda
