// GQA on few blocks in the Hopper backward (src/cuda/backward_tuning.hpp bwd_sm90_kv_splits,
// backward_workspace.hpp), checked on the CPU: how many blocks share a KV head's query heads,
// and that the workspace holds each split's fp32 dK and dV partials (and nothing without a
// split). The GPU suite checks the results (CudaBackward.GqaSplitAmongBlocks).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/backward_tuning.hpp"
#include "cuda/backward_workspace.hpp"

namespace {

using flashattn::cuda::bwd_sm90_kv_splits;

TEST(BwdGqaSplits, EnoughSplitsToFillTheGpuOnce) {
  // Qwen2-0.5B's shape at 2554 tokens, d = 64: 20 key blocks x 2 KV heads = 40 blocks.
  EXPECT_EQ(bwd_sm90_kv_splits(40, 7, 132, false), 4);
  EXPECT_EQ(bwd_sm90_kv_splits(8, 4, 132, false), 4) << "at most one split per query head";
  EXPECT_EQ(bwd_sm90_kv_splits(131, 8, 132, false), 2);
  EXPECT_EQ(bwd_sm90_kv_splits(132, 8, 132, false), 1) << "the grid fills the GPU already";
  EXPECT_EQ(bwd_sm90_kv_splits(40, 1, 132, false), 1) << "no GQA";
  EXPECT_EQ(bwd_sm90_kv_splits(40, 7, 132, true), 1) << "deterministic: one block per KV head";
  EXPECT_EQ(bwd_sm90_kv_splits(0, 7, 132, false), 1);
}

TEST(BwdGqaSplits, WorkspaceHoldsThePartials) {
  using flashattn::cuda::bwd_workspace;
  using flashattn::cuda::bwd_workspace_layout;
  flashattn::core::BackwardParams p;
  p.batch = 2;
  p.nheads = 14;
  p.nheads_k = 2;
  p.head_dim = p.head_dim_v = 64;
  p.seqlen_q = 100;
  p.seqlen_k = 300;
  p.total_q = p.batch * p.seqlen_q;
  const auto one = bwd_workspace_layout(p, 128, 1, 1);
  const auto four = bwd_workspace_layout(p, 128, 1, 4);
  EXPECT_EQ(one.total, one.dkv_partial) << "no split, no partials";
  EXPECT_EQ(one.kv_stride, 0);
  const int64_t stride = int64_t{2} * 300 * 2 * 64;  // kv rows x nheads_k x head_dim
  EXPECT_EQ(four.kv_stride, stride);
  EXPECT_GE(four.total - four.dkv_partial, static_cast<size_t>(2 * 4 * stride * 4));
  EXPECT_EQ(four.dkv_partial, one.dkv_partial) << "the partials come after everything else";

  // Varlen: the packed rows of k.
  int32_t cu[3] = {0, 10, 250};
  p.cu_seqlens_q = cu;
  p.cu_seqlens_k = cu;
  p.total_k = 250;
  EXPECT_EQ(bwd_workspace_layout(p, 128, 1, 2).kv_stride, int64_t{250} * 2 * 64);

  std::vector<char> memory(four.total + 256);
  p.cu_seqlens_q = p.cu_seqlens_k = nullptr;
  p.workspace = memory.data();
  const auto w = bwd_workspace(p, 128, 1, 1, 4);
  EXPECT_EQ(w.kv_splits, 4);
  EXPECT_EQ(reinterpret_cast<char*>(w.dk_partial), memory.data() + four.dkv_partial);
  EXPECT_EQ(w.dv_partial, w.dk_partial + 4 * stride);
  EXPECT_LE(reinterpret_cast<char*>(w.dv_partial + 4 * stride), memory.data() + four.total);
}

}  // namespace
