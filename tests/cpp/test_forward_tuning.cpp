// The Hopper forward's choices (src/cuda/forward_tuning.hpp), checked on the CPU: the box a
// key block of a paged cache is loaded in never crosses a page and divides the block, the
// paged prefill picks the tile with the larger boxes, and short GQA calls pack their heads.
// The GPU suites run both tiles over every page size class.
#include <gtest/gtest.h>

#include "cuda/forward_tuning.hpp"

namespace {

using flashattn::cuda::fwd_sm90_pack_gqa;
using flashattn::cuda::fwd_sm90_page_box_rows;
using flashattn::cuda::fwd_sm90_tile;

TEST(ForwardTuning, PageBoxesDivideThePageAndTheKeyBlock) {
  for (int d : {64, 96, 128, 192, 256}) {
    for (bool narrow : {false, true}) {
      const int block_n = fwd_sm90_tile(d, d, narrow).block_n;
      for (int page_size = 16; page_size <= 1024; page_size += 16) {
        const int box = fwd_sm90_page_box_rows(page_size, block_n);
        EXPECT_EQ(page_size % box, 0) << "d " << d << " page " << page_size;
        EXPECT_EQ(block_n % box, 0) << "d " << d << " page " << page_size;
        EXPECT_EQ(box % 16, 0) << "boxes start on whole swizzle atoms of 8 rows";
        EXPECT_LE(box, 256) << "TMA boxes have at most 256 rows";
      }
    }
  }
  EXPECT_EQ(fwd_sm90_page_box_rows(16, 176), 16);
  EXPECT_EQ(fwd_sm90_page_box_rows(48, 128), 16);
  EXPECT_EQ(fwd_sm90_page_box_rows(256, 128), 128);
  EXPECT_EQ(fwd_sm90_page_box_rows(256, 176), 16);
  EXPECT_EQ(fwd_sm90_page_box_rows(160, 80), 80);
}

// Several blocks per SM: the d = 64 narrow tile runs three blocks of one MMA warpgroup, each
// within a third of the SM's shared memory (not with dropout); one MMA warpgroup alone on an
// SM is no tile.
TEST(ForwardTuning, SeveralBlocksPerSm) {
  using flashattn::cuda::fwd_sm90_smem_bytes;
  using flashattn::cuda::fwd_sm90_smem_per_block;
  using flashattn::cuda::fwd_sm90_tile_valid;
  using flashattn::cuda::FwdSm90Tile;
  const FwdSm90Tile narrow = fwd_sm90_tile(64, 64, true);
  EXPECT_EQ(narrow.block_m, 64);
  EXPECT_EQ(narrow.blocks_per_sm, 3);
  EXPECT_LE(fwd_sm90_smem_bytes(64, 64, narrow), fwd_sm90_smem_per_block(narrow));
  EXPECT_EQ(fwd_sm90_smem_per_block(narrow), 228 * 1024 / 3 - 1024);
  EXPECT_EQ(fwd_sm90_tile(64, 64, false).blocks_per_sm, 1);
  // With dropout d = 64 runs one block of 128 x 128, narrow or not.
  EXPECT_TRUE(fwd_sm90_tile(64, 64, true, true) == (FwdSm90Tile{128, 128, 2}));
  EXPECT_TRUE(fwd_sm90_tile(64, 64, false, true) == (FwdSm90Tile{128, 128, 2}));
  EXPECT_FALSE(fwd_sm90_tile_valid(64, 64, FwdSm90Tile{64, 96, 2, 1}));
  EXPECT_TRUE(fwd_sm90_tile_valid(64, 64, FwdSm90Tile{64, 64, 2, 4}));
  // d = 128 with 128-key blocks does not fit a third of the SM.
  EXPECT_FALSE(fwd_sm90_tile_valid(128, 128, FwdSm90Tile{64, 128, 2, 3}));
}

TEST(ForwardTuning, DenseNarrowTileOnlyWhereItWasFaster) {
  EXPECT_FALSE(flashattn::cuda::fwd_sm90_dense_may_narrow(192, false));
  // d = 256: causal calls of at most 1024 keys, without dropout.
  EXPECT_TRUE(flashattn::cuda::fwd_sm90_dense_may_narrow(256, false));
  EXPECT_FALSE(flashattn::cuda::fwd_sm90_dense_may_narrow(256, true));
  EXPECT_TRUE(flashattn::cuda::fwd_sm90_use_narrow(256, true, 1024));
  EXPECT_FALSE(flashattn::cuda::fwd_sm90_use_narrow(256, true, 2048));
  EXPECT_FALSE(flashattn::cuda::fwd_sm90_use_narrow(256, false, 1024));
  EXPECT_TRUE(flashattn::cuda::fwd_sm90_dense_may_narrow(128, true));
  EXPECT_TRUE(flashattn::cuda::fwd_sm90_use_narrow(128, true, 16384));
}

// FP8: d = 64 runs 192 query rows except where the dense forward takes its narrow tile (causal,
// at most 2048 keys); d = 128 128-key blocks on calls of at most 2048 keys (causal: 4096);
// d = 256 one tile.
TEST(ForwardTuning, Fp8TilesAndTheirNarrowOne) {
  using flashattn::cuda::fwd_sm90_fp8_tile;
  using flashattn::cuda::fwd_sm90_fp8_use_narrow;
  EXPECT_EQ(fwd_sm90_fp8_tile(64).block_m, 192);
  EXPECT_EQ(fwd_sm90_fp8_tile(64, true).block_m, 128);
  EXPECT_TRUE(fwd_sm90_fp8_use_narrow(64, true, 2048));
  EXPECT_FALSE(fwd_sm90_fp8_use_narrow(64, true, 2049));
  EXPECT_FALSE(fwd_sm90_fp8_use_narrow(64, false, 1024));
  EXPECT_EQ(fwd_sm90_fp8_tile(128).block_n, 192);
  EXPECT_EQ(fwd_sm90_fp8_tile(128, true).block_n, 128);
  EXPECT_TRUE(fwd_sm90_fp8_use_narrow(128, false, 2048));
  EXPECT_FALSE(fwd_sm90_fp8_use_narrow(128, false, 4096));
  EXPECT_TRUE(fwd_sm90_fp8_use_narrow(128, true, 4096));
  EXPECT_FALSE(fwd_sm90_fp8_use_narrow(128, true, 8192));
  EXPECT_FALSE(fwd_sm90_fp8_use_narrow(256, true, 1024));
  EXPECT_TRUE(fwd_sm90_fp8_tile(256) == fwd_sm90_fp8_tile(256, true));
  for (int d : flashattn::cuda::kFwdSm90Fp8HeadDims) {
    for (bool narrow : {false, true}) {
      EXPECT_TRUE(flashattn::cuda::fwd_sm90_fp8_tile_valid(d, d, fwd_sm90_fp8_tile(d, narrow)))
          << "d = " << d;
    }
  }
}

// The share of the softmax's exp2 on the FMA pipe: only where it was measured faster (FP8 at
// d = 64 and 128), at a degree exp2_poly has; 16-bit kernels keep every weight on the MUFU
// (degree 3 put their lse past the tests' bound).
TEST(ForwardTuning, PolynomialExp2OnlyForFp8BelowHeadDim256) {
  using flashattn::cuda::fwd_sm90_exp2_split;
  for (int d : flashattn::cuda::kFwdSm90HeadDims) {
    EXPECT_EQ(fwd_sm90_exp2_split(false, d).poly_every, 0) << "d = " << d;
  }
  for (int d : flashattn::cuda::kFwdSm90Fp8HeadDims) {
    const auto split = fwd_sm90_exp2_split(true, d);
    EXPECT_EQ(split.poly_every, d == 64 ? 8 : d == 128 ? 16 : 0) << "d = " << d;
    EXPECT_TRUE(split.degree >= 3 && split.degree <= 5) << "d = " << d;
  }
}

// Lazy rescaling from d = 128, with a slack whose largest weight (2^slack) bf16 and fp16 both
// hold, and in the FP8 kernel one that its lowered offset (2^(8 - slack)) keeps within e4m3's
// range; d <= 96 rescales every block.
TEST(ForwardTuning, LazyRescalingFrom128) {
  using flashattn::cuda::fwd_sm90_rescale_slack;
  for (int d : flashattn::cuda::kFwdSm90HeadDims) {
    const int slack = fwd_sm90_rescale_slack(false, d);
    EXPECT_EQ(slack, d >= 128 ? 8 : -1) << "d = " << d;
    EXPECT_LT(slack, 16) << "2^slack must stay finite in fp16";
  }
  for (int d : flashattn::cuda::kFwdSm90Fp8HeadDims) {
    const int slack = fwd_sm90_rescale_slack(true, d);
    EXPECT_EQ(slack, d >= 128 ? 4 : -1) << "d = " << d;
    EXPECT_LE(slack, 8) << "the FP8 kernel's weights reach 2^8 (offset 8 - slack), below 448";
  }
}

TEST(ForwardTuning, PackedGqaForShortQueries) {
  EXPECT_TRUE(fwd_sm90_pack_gqa(32, 8, 16, 128));   // 16 queries x 4 heads fill half a tile
  EXPECT_TRUE(fwd_sm90_pack_gqa(32, 8, 1, 128));
  EXPECT_TRUE(fwd_sm90_pack_gqa(16, 2, 100, 128));  // 100 / 128 against 800 / 896
  EXPECT_FALSE(fwd_sm90_pack_gqa(32, 8, 4096, 128));  // full tiles either way
  EXPECT_FALSE(fwd_sm90_pack_gqa(32, 8, 128, 128));
  EXPECT_FALSE(fwd_sm90_pack_gqa(8, 8, 16, 128));     // no group
  EXPECT_FALSE(fwd_sm90_pack_gqa(24, 8, 16, 128));    // a group of 3 does not divide the tile
  EXPECT_FALSE(fwd_sm90_pack_gqa(512, 2, 16, 128));   // 256 heads per KV head: more than a tile
  EXPECT_FALSE(fwd_sm90_pack_gqa(32, 0, 16, 128));
}

}  // namespace
