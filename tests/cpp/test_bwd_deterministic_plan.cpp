// The deterministic backward's plan on Hopper (src/cuda/bwd_deterministic_plan.hpp), checked on
// the CPU: which problems take the rotated order and which the two dQ accumulator slices, that
// the turns within a slice count each of its key blocks once, highest first, that the workspace
// holds the slices and the ticket, and which problems take turn groups (either kernel).
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "cuda/backward_workspace.hpp"
#include "cuda/bwd_deterministic_plan.hpp"

namespace {

using flashattn::core::BackwardParams;
using flashattn::cuda::bwd_dq_slice;
using flashattn::cuda::bwd_slice_turn;
using flashattn::cuda::bwd_sm90_dq_slices;
using flashattn::cuda::bwd_sm90_rotates;
using flashattn::cuda::bwd_sm90_rotation_fits;
using flashattn::cuda::bwd_turn_group_blocks;

BackwardParams problem(int seqlen_q, int seqlen_k, int head_dim, bool deterministic = true) {
  BackwardParams p;
  p.batch = 2;
  p.nheads = p.nheads_k = 4;
  p.head_dim = p.head_dim_v = head_dim;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.total_q = p.batch * seqlen_q;
  p.deterministic = deterministic;
  return p;
}

TEST(BwdDeterministicPlan, RotatedOrderForAtMostEightKeyBlocksWithTheDqWriter) {
  // Key blocks x query blocks.
  EXPECT_TRUE(bwd_sm90_rotation_fits(problem(1024, 1024, 64), 64));    // 8 x 8 of 128
  EXPECT_TRUE(bwd_sm90_rotation_fits(problem(256, 250, 64), 64));      // 2 x 2
  EXPECT_TRUE(bwd_sm90_rotation_fits(problem(1024, 1024, 128), 128));  // 8 x 16
  EXPECT_FALSE(bwd_sm90_rotation_fits(problem(200, 500, 64), 64));     // 4 x 2
  EXPECT_FALSE(bwd_sm90_rotation_fits(problem(2048, 2048, 64), 64));   // 16 key blocks
  EXPECT_FALSE(bwd_sm90_rotation_fits(problem(512, 512, 256), 256));   // no dQ writer
  EXPECT_FALSE(bwd_sm90_rotation_fits(problem(100, 100, 64), 64));     // one key block
  EXPECT_FALSE(bwd_sm90_rotation_fits(problem(1024, 1024, 96), 96));   // no Hopper kernel
  EXPECT_FALSE(bwd_sm90_rotation_fits(problem(1024, 1024, 64, false), 64));
  BackwardParams causal = problem(1024, 1024, 64);
  causal.window_right = 0;
  EXPECT_FALSE(bwd_sm90_rotation_fits(causal, 64));
  BackwardParams varlen = problem(1024, 1024, 64);
  const int32_t cu[] = {0, 1024, 2048};
  varlen.cu_seqlens_q = varlen.cu_seqlens_k = cu;
  EXPECT_FALSE(bwd_sm90_rotation_fits(varlen, 64));
  // The GPU suite's rotated problems (test_cuda_backward_suite.cpp, sanitize).
  for (const auto& [q, k, d] : {std::tuple{600, 520, 64}, {120, 250, 128}, {256, 250, 64},
                                {600, 1000, 128}, {500, 1000, 128}, {1000, 1000, 64},
                                {100, 200, 128}, {200, 300, 128}}) {
    EXPECT_TRUE(bwd_sm90_rotation_fits(problem(q, k, d), d)) << q << " x " << k << ", d " << d;
  }
  // The device needs the SMs for a pair and more.
  EXPECT_TRUE(bwd_sm90_rotates(problem(1024, 1024, 64), 64, 132));
  EXPECT_TRUE(bwd_sm90_rotates(problem(1024, 1024, 64), 64, 16));
  EXPECT_FALSE(bwd_sm90_rotates(problem(1024, 1024, 64), 64, 15));
  EXPECT_FALSE(bwd_sm90_rotates(problem(2048, 2048, 64), 64, 132));
}

TEST(BwdDeterministicPlan, SlicesForShortPairsWithoutAMaskThatDoNotRotate) {
  EXPECT_EQ(bwd_sm90_dq_slices(problem(1024, 1024, 256), 256), 2);  // 16 key blocks of 64
  EXPECT_EQ(bwd_sm90_dq_slices(problem(2048, 2048, 256), 256), 1);  // 32
  EXPECT_EQ(bwd_sm90_dq_slices(problem(1024, 1024, 128), 128), 1);  // 8 x 16, rotated
  EXPECT_EQ(bwd_sm90_dq_slices(problem(2048, 2048, 64), 64), 2);    // 16
  EXPECT_EQ(bwd_sm90_dq_slices(problem(4096, 4096, 64), 64), 1);    // 32
  EXPECT_EQ(bwd_sm90_dq_slices(problem(1024, 1024, 64), 64), 1);    // rotated
  EXPECT_EQ(bwd_sm90_dq_slices(problem(200, 500, 64), 64), 2);      // 4 x 2
  EXPECT_EQ(bwd_sm90_dq_slices(problem(64, 64, 256), 256), 1);      // one key block
  EXPECT_EQ(bwd_sm90_dq_slices(problem(1024, 1024, 256, false), 256), 1);
  EXPECT_EQ(bwd_sm90_dq_slices(problem(1024, 1024, 96), 96), 1);  // no Hopper kernel
  BackwardParams causal = problem(1024, 1024, 256);
  causal.window_right = 0;
  EXPECT_EQ(bwd_sm90_dq_slices(causal, 256), 1);
  BackwardParams window = problem(1024, 1024, 256);
  window.window_left = 100;
  EXPECT_EQ(bwd_sm90_dq_slices(window, 256), 1);
  BackwardParams varlen = problem(1024, 1024, 64);
  const int32_t cu[] = {0, 1024, 2048};
  varlen.cu_seqlens_q = varlen.cu_seqlens_k = cu;
  EXPECT_EQ(bwd_sm90_dq_slices(varlen, 64), 2);
  // The GPU suite's sliced problems (test_cuda_backward_suite.cpp, sanitize).
  EXPECT_EQ(bwd_sm90_dq_slices(problem(700, 900, 256), 256), 2);
  EXPECT_EQ(bwd_sm90_dq_slices(problem(300, 200, 256), 256), 2);
  EXPECT_EQ(bwd_sm90_dq_slices(problem(130, 140, 256), 256), 2);
  EXPECT_EQ(bwd_sm90_dq_slices(problem(100, 900, 128), 128), 2);  // 8 x 2: not rotated
}

// The kernels' turn in a slice: key blocks [0, end) visit a query block; in the fixed order
// key block n's turn is end - 1 - n. In two slices (slice_bits 1) each key block's turn is the
// number of higher key blocks in its slice, so the turns of a slice are 0, 1, 2, ... from the
// highest key block down; with one slice they stay the fixed order's.
TEST(BwdDeterministicPlan, SliceTurnsCountTheHigherKeyBlocksOfTheSlice) {
  for (int bits = 0; bits <= 1; ++bits) {
    for (int end = 1; end <= 16; ++end) {
      std::set<int> turns[2];
      for (int n = end - 1; n >= 0; --n) {
        const int slice = bwd_dq_slice(n, bits);
        ASSERT_TRUE(slice == (bits == 0 ? 0 : n % 2));
        const int turn = bwd_slice_turn(end - 1 - n, bits);
        EXPECT_EQ(turn, static_cast<int>(turns[slice].size())) << "end " << end << " n " << n;
        turns[slice].insert(turn);
      }
      EXPECT_EQ(turns[0].size() + turns[1].size(), static_cast<size_t>(end));
    }
  }
}

TEST(BwdDeterministicPlan, TurnGroupsOnlyUnderACausalMaskWithSixteenKeyBlocksAGroup) {
  auto causal = [](int seqlen_q, int seqlen_k, int head_dim, bool deterministic = true) {
    BackwardParams p = problem(seqlen_q, seqlen_k, head_dim, deterministic);
    p.window_right = 0;
    return p;
  };
  EXPECT_EQ(bwd_turn_group_blocks(causal(1024, 1024, 256), 256), 0);     // 16 key blocks of 64
  EXPECT_EQ(bwd_turn_group_blocks(causal(2048, 2048, 256), 256), 16);    // 32: 2 groups
  EXPECT_EQ(bwd_turn_group_blocks(causal(4096, 4096, 256), 256), 16);    // 64: 4
  EXPECT_EQ(bwd_turn_group_blocks(causal(16384, 16384, 256), 256), 32);  // 256: at most 8
  EXPECT_EQ(bwd_turn_group_blocks(causal(2100, 2100, 256), 256), 17);    // 33: 2 groups
  EXPECT_EQ(bwd_turn_group_blocks(causal(2048, 2048, 128), 128), 0);     // 16 of 128
  EXPECT_EQ(bwd_turn_group_blocks(causal(4096, 4096, 128), 128), 16);    // 32: 2
  EXPECT_EQ(bwd_turn_group_blocks(causal(4096, 4096, 96), 96), 16);      // 64 of 64: 4
  EXPECT_EQ(bwd_turn_group_blocks(causal(1000, 4096, 64), 64), 16);      // the keys count
  // The GPU suite's and the sanitizer's grouped problems.
  EXPECT_EQ(bwd_turn_group_blocks(causal(300, 2100, 256), 256), 17);
  EXPECT_EQ(bwd_turn_group_blocks(causal(64, 2100, 256), 256), 17);
  EXPECT_EQ(bwd_turn_group_blocks(causal(300, 4096, 128), 128), 16);
  EXPECT_EQ(bwd_turn_group_blocks(causal(600, 4200, 64), 64), 17);
  EXPECT_EQ(bwd_turn_group_blocks(causal(4096, 4096, 128, false), 128), 0);
  EXPECT_EQ(bwd_turn_group_blocks(problem(4096, 4096, 128), 128), 0);    // no mask
  BackwardParams window = causal(4096, 4096, 128);
  window.window_left = 1000;
  EXPECT_EQ(bwd_turn_group_blocks(window, 128), 0);
}

TEST(BwdDeterministicPlan, WorkspaceHoldsTheSlices) {
  using flashattn::cuda::bwd_workspace_layout;
  const BackwardParams p = problem(1024, 1024, 256);
  const auto one = bwd_workspace_layout(p, 64, 1);
  const auto two = bwd_workspace_layout(p, 64, 2);
  const size_t accum = static_cast<size_t>(p.total_q) * p.nheads * p.head_dim * 4;
  EXPECT_EQ(one.turns - one.dq_accum, accum);
  EXPECT_EQ(two.turns - two.dq_accum, 2 * accum);
  // A line per counter and one for the ticket.
  const size_t line = flashattn::cuda::kBwdTurnStride * 4;
  EXPECT_EQ(one.turns_bytes, (static_cast<size_t>(p.batch) * p.nheads * (1024 / 64) + 1) * line);
  EXPECT_EQ(two.turns_bytes, 2 * one.turns_bytes - line);
  EXPECT_EQ(bwd_workspace_layout(problem(1024, 1024, 256, false), 64, 1).turns_bytes, 0u);
}

}  // namespace
