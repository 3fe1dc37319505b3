// The KV-cache kernel's split rule for an e4m3 decode past half a wave
// (src/cuda/kvcache_tuning.hpp: kv_e4m3_wave_splits), checked on the CPU against the shapes
// measured on the H200 (132 SMs, three e4m3 decode blocks per SM: 396 slots).
#include <gtest/gtest.h>

#include "cuda/kvcache_tuning.hpp"

namespace {

using flashattn::cuda::kv_e4m3_wave_splits;

constexpr long long kSlots = 132 * 3;

// Batch 64 x 8 KV heads: 512 blocks leave a last round of 116 (fewer than one per SM); three
// splits make 3.88 waves whose last round holds more than two blocks per SM.
TEST(KvCacheTuning, E4m3SplitsEvenOutALastThinRound) {
  EXPECT_EQ(kv_e4m3_wave_splits(512, kSlots, 3, 128), 3);
  EXPECT_EQ(kv_e4m3_wave_splits(512, kSlots, 3, 2), 2);  // capped by the key blocks
  EXPECT_EQ(kv_e4m3_wave_splits(512, kSlots, 3, 1), 1);
  EXPECT_EQ(kv_e4m3_wave_splits(1024, kSlots, 3, 128), 3);
}

// Whole waves, or a last round of at least two blocks per SM, stay unsplit: a split only adds
// the combine there.
TEST(KvCacheTuning, E4m3FullWavesStayWhole) {
  EXPECT_EQ(kv_e4m3_wave_splits(kSlots, kSlots, 3, 128), 1);
  EXPECT_EQ(kv_e4m3_wave_splits(2 * kSlots, kSlots, 3, 128), 1);
  EXPECT_EQ(kv_e4m3_wave_splits(kSlots + 2 * 132, kSlots, 3, 128), 1);
}

TEST(KvCacheTuning, E4m3SplitsAlwaysWithinBounds) {
  for (long long blocks = 1; blocks <= 4 * kSlots; blocks += 7) {
    for (int max_splits : {0, 1, 3, 128}) {
      const int s = kv_e4m3_wave_splits(blocks, kSlots, 3, max_splits);
      EXPECT_GE(s, 1);
      EXPECT_LE(s, max_splits < 1 ? 1 : max_splits);
    }
  }
}

}  // namespace
