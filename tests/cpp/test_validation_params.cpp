// What validation hands the backends: the Params filled from a valid call (internal API).
#include <gtest/gtest.h>

#include <cmath>

#include "api/dispatch.hpp"
#include "api/validate.hpp"
#include "core/philox.hpp"
#include "test_api_cases.hpp"

namespace api_test {
namespace {

using flashattn::Backend;
using flashattn::Device;
using flashattn::DeviceType;
using flashattn::StatusCode;
using flashattn::api::Target;

const Target kCpuTarget{Backend::kCpu, Device{}, false};

TEST(ValidationParams, ForwardDense) {
  Problem p;
  p.dtype = DType::kBF16;
  ForwardCase f(p);
  HostTensor slopes(DType::kF32, {p.batch, p.nheads});
  f.args.options.alibi_slopes = slopes.view();
  f.args.options.causal = true;
  f.args.options.window_left = 3;
  f.args.options.dropout_p = 0.25f;
  f.args.options.dropout_seed = 42;
  f.args.options.dropout_offset = 7;
  flashattn::core::AttentionParams params;
  ASSERT_TRUE(flashattn::api::validate_forward(f.args, kCpuTarget, &params).ok());
  EXPECT_EQ(params.dtype, flashattn::core::ElementType::kBF16);
  EXPECT_EQ(params.batch, 2);
  EXPECT_EQ(params.nheads, 4);
  EXPECT_EQ(params.nheads_k, 2);
  EXPECT_EQ(params.head_dim, 16);
  EXPECT_EQ(params.head_dim_v, 16);
  EXPECT_EQ(params.seqlen_q, 5);
  EXPECT_EQ(params.seqlen_k, 7);
  EXPECT_EQ(params.total_q, 10);
  EXPECT_EQ(params.q.ptr, f.args.q.data);
  EXPECT_EQ(params.k.batch_stride, 7 * 2 * 16);
  EXPECT_EQ(params.k.row_stride, 2 * 16);
  EXPECT_EQ(params.k.head_stride, 16);
  EXPECT_EQ(params.lse, f.args.lse.data);
  EXPECT_EQ(params.lse_batch_stride, 4 * 5);
  EXPECT_EQ(params.lse_head_stride, 5);
  EXPECT_FLOAT_EQ(params.scale, 0.25f);
  EXPECT_FLOAT_EQ(params.scale_log2, 0.25f * 1.4426950408889634f);
  EXPECT_EQ(params.window_left, 3);
  EXPECT_EQ(params.window_right, 0) << "causal folds into window_right = 0";
  EXPECT_EQ(params.drop_threshold, flashattn::core::dropout_threshold(0.25f));
  EXPECT_FLOAT_EQ(params.dropout_rescale, 1.f / 0.75f);
  EXPECT_EQ(params.seed, 42u);
  EXPECT_EQ(params.offset, 7u);
  EXPECT_EQ(params.alibi_slopes, slopes.view().data);
  EXPECT_EQ(params.alibi_batch_stride, 4);
  EXPECT_FALSE(params.is_varlen());
}

TEST(ValidationParams, ForwardVarlen) {
  VarlenCase c({3, 5}, {4, 6});
  c.args.options.softmax_scale = 0.5f;
  flashattn::core::AttentionParams params;
  ASSERT_TRUE(flashattn::api::validate_forward(c.args, kCpuTarget, &params).ok());
  EXPECT_TRUE(params.is_varlen());
  EXPECT_EQ(params.batch, 2);
  EXPECT_EQ(params.seqlen_q, 5);
  EXPECT_EQ(params.seqlen_k, 6);
  EXPECT_EQ(params.total_q, 8);
  EXPECT_EQ(params.q.row_stride, 4 * 16);
  EXPECT_EQ(params.q.head_stride, 16);
  EXPECT_EQ(params.lse_head_stride, 8);
  EXPECT_EQ(params.lse_batch_stride, 0);
  EXPECT_EQ(params.cu_seqlens_q, c.cu_seqlens_q.view().data);
  EXPECT_EQ(params.seqused_k, nullptr);
  EXPECT_FLOAT_EQ(params.scale, 0.5f);
}

TEST(ValidationParams, Backward) {
  BackwardCase b;
  b.args.deterministic = true;
  flashattn::core::BackwardParams params;
  ASSERT_TRUE(flashattn::api::validate_backward(b.args, kCpuTarget, &params).ok());
  EXPECT_EQ(params.dq.ptr, b.args.dq.data);
  EXPECT_EQ(params.dk.row_stride, 2 * 16);
  EXPECT_EQ(params.dout.ptr, b.args.dout.data);
  EXPECT_TRUE(params.deterministic);
  EXPECT_EQ(params.lse, b.args.lse.data);
}

TEST(ValidationParams, KVCachePaged) {
  KVCacheShape shape;
  shape.paged = true;
  shape.page_size = 16;
  shape.seqlen_cache = 48;
  shape.rotary = true;
  KVCacheCase c(shape);
  c.args.rotary_interleaved = true;
  flashattn::core::KVCacheParams params;
  ASSERT_TRUE(flashattn::api::validate_kvcache(c.args, kCpuTarget, &params).ok());
  EXPECT_TRUE(params.is_paged());
  EXPECT_EQ(params.page_size, 16);
  EXPECT_EQ(params.max_pages, 3);
  EXPECT_EQ(params.num_pages, 7);
  EXPECT_EQ(params.seqlen_k, 48) << "the cache capacity: max_pages * page_size";
  EXPECT_EQ(params.block_table_batch_stride, 3);
  EXPECT_EQ(params.k.batch_stride, 16 * 2 * 16) << "the page stride";
  EXPECT_EQ(params.seqlen_new, 2);
  EXPECT_EQ(params.k_new.ptr, c.args.k_new.data);
  EXPECT_EQ(params.rotary_dim, 8);
  EXPECT_EQ(params.rotary_seqlen, 48);
  EXPECT_EQ(params.rotary_row_stride, 4);
  EXPECT_TRUE(params.rotary_interleaved);
  EXPECT_EQ(params.num_splits, 0) << "0 reaches the CPU backend, which picks the split count";
  EXPECT_EQ(params.cache_seqlens, c.args.cache_seqlens.data);
}

TEST(ValidationParams, KVCacheContiguousLeavesNumSplitsZeroForCuda) {
  KVCacheCase c(KVCacheShape{}, Problem{DType::kF16});
  flashattn::KVCacheArgs args = c.args;
  for (flashattn::Tensor* t : {&args.q, &args.k_cache, &args.v_cache, &args.cache_seqlens,
                               &args.k_new, &args.v_new, &args.out, &args.lse}) {
    *t = on_device(*t, DeviceType::kCUDA);
  }
  flashattn::core::KVCacheParams params;
  const Target cuda{Backend::kCuda, Device{DeviceType::kCUDA, 0}, false};
  ASSERT_TRUE(flashattn::api::validate_kvcache(args, cuda, &params).ok());
  EXPECT_FALSE(params.is_paged());
  EXPECT_EQ(params.seqlen_k, 32);
  EXPECT_EQ(params.num_splits, 0) << "the CUDA backend picks the split count";
}

TEST(ValidationParams, WorkspaceTooSmall) {
  const Target cuda{Backend::kCuda, Device{DeviceType::kCUDA, 0}, false};
  flashattn::Launch launch;
  EXPECT_TRUE(flashattn::api::check_workspace(cuda, 0, launch).ok());
  EXPECT_TRUE(Rejected(flashattn::api::check_workspace(cuda, 1024, launch),
                       StatusCode::kInvalidArgument, "launch.workspace", "at least 1024 bytes"));
  char buffer[512];
  launch.workspace = buffer;
  launch.workspace_bytes = sizeof buffer;
  EXPECT_TRUE(Rejected(flashattn::api::check_workspace(cuda, 1024, launch),
                       StatusCode::kInvalidArgument, "launch.workspace_bytes", "got 512"));
}

}  // namespace
}  // namespace api_test
