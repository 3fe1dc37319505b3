// Which forward kernel runs (forward.cu's choose_kernel, the one decision that forward() and
// supported() take): on a device that runs this build's sm_90a code, the Hopper kernel for
// every compiled Hopper head dim with and without dropout, padded head dims included, and the
// sm80 kernel for head dims up to 32, layouts TMA cannot address and the cells the tuning
// table gives the sm80 kernel (fwd_sm90_faster); elsewhere, and with FLASHATTN_DISABLE_SM90
// set, always the sm80 kernel. The same for the prefill over a paged KV cache
// (choose_paged_kernel). The forward, dropout and KV-cache suites then check the results of
// whichever runs (gpu-check runs them both ways on a Hopper GPU). The ForwardFamily tests
// check the list step (first_forward_family) for both kinds of device without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

#include "core/params.hpp"
#include "cuda/device_limits.hpp"
#include "cuda/forward_plan.hpp"
#include "cuda_test_support.hpp"

namespace fa_cuda_test {
namespace {

using flashattn::cuda::FwdKernel;
using flashattn::cuda::FwdPlan;

// A contiguous dense bf16 problem of batch 2, 8 heads (2 KV heads), 1024 x 1024.
flashattn::core::AttentionParams dense_params(int head_dim) {
  flashattn::core::AttentionParams p;
  p.dtype = flashattn::core::ElementType::kBF16;
  p.batch = 2;
  p.nheads = 8;
  p.nheads_k = 2;
  p.head_dim = p.head_dim_v = head_dim;
  p.seqlen_q = p.seqlen_k = 1024;
  p.total_q = p.batch * p.seqlen_q;
  auto operand = [&](int heads, int seqlen) {
    flashattn::core::Operand op;
    op.ptr = reinterpret_cast<void*>(uintptr_t{1} << 20);  // aligned; never dereferenced
    op.head_stride = head_dim;
    op.row_stride = int64_t{heads} * head_dim;
    op.batch_stride = op.row_stride * seqlen;
    return op;
  };
  p.q = p.out = operand(p.nheads, p.seqlen_q);
  p.k = p.v = operand(p.nheads_k, p.seqlen_k);
  p.scale = 0.125f;
  return p;
}

FwdPlan plan_of(const flashattn::core::AttentionParams& p) {
  int device = 0;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  FwdPlan plan;
  const flashattn::Status s = flashattn::cuda::choose_kernel(p, device, &plan);
  EXPECT_TRUE(s.ok()) << s.message();
  return plan;
}

class CudaForwardPlan : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    int device = 0;
    ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
    flashattn::cuda::DeviceLimits limits;
    ASSERT_TRUE(flashattn::cuda::device_limits(device, &limits).ok());
    hopper_ = limits.sm90a;
  }
  // The Hopper kernel where the device runs it, else the sm80 one.
  FwdKernel hopper_or_sm80() const { return hopper_ ? FwdKernel::kSm90 : FwdKernel::kSm80; }
  bool hopper_ = false;
};

TEST_F(CudaForwardPlan, HopperKernelForItsHeadDims) {
  for (int d : {64, 96, 128, 192, 256}) {
    const FwdPlan plan = plan_of(dense_params(d));
    EXPECT_EQ(plan.kernel, hopper_or_sm80()) << "d = " << d;
    EXPECT_FALSE(plan.padded) << "d = " << d;
  }
  // Padded up to a Hopper head dim (40 -> 64, 160 -> 192), fp16 too.
  for (int d : {40, 160}) {
    flashattn::core::AttentionParams p = dense_params(d);
    p.dtype = flashattn::core::ElementType::kF16;
    const FwdPlan plan = plan_of(p);
    EXPECT_EQ(plan.kernel, hopper_or_sm80()) << "d = " << d;
    EXPECT_TRUE(plan.padded) << "d = " << d;
  }
}

TEST_F(CudaForwardPlan, Sm80KernelForWhatHopperDoesNotRun) {
  EXPECT_EQ(plan_of(dense_params(32)).kernel, FwdKernel::kSm80) << "d = 32";
  flashattn::core::AttentionParams reversed = dense_params(128);
  reversed.k.row_stride = -reversed.k.row_stride;  // a view walking k backwards
  EXPECT_EQ(plan_of(reversed).kernel, FwdKernel::kSm80) << "negative k row stride";
  flashattn::core::AttentionParams short_causal = dense_params(256);
  short_causal.seqlen_q = short_causal.seqlen_k = 512;
  short_causal.window_right = 0;
  EXPECT_EQ(plan_of(short_causal).kernel, FwdKernel::kSm80) << "d = 256, causal, 512 keys";
  short_causal.seqlen_k = 513;  // bottom-right aligned causal, one key more
  EXPECT_EQ(plan_of(short_causal).kernel, hopper_or_sm80()) << "d = 256, causal, 513 keys";
}

// Dropout runs where the call without it would: the Hopper kernel for its head dims, causal
// or not, padded or not, GQA calls short enough to pack their heads without dropout
// included; the sm80 kernel where the call without dropout takes it.
TEST_F(CudaForwardPlan, DropoutOnTheHopperKernel) {
  for (int d : {40, 64, 96, 128, 192, 256}) {
    for (bool causal : {false, true}) {
      flashattn::core::AttentionParams p = dense_params(d);
      p.dropout_p = 0.1f;
      if (causal) p.window_right = 0;
      const FwdPlan plan = plan_of(p);
      EXPECT_EQ(plan.kernel, hopper_or_sm80()) << "d = " << d << (causal ? ", causal" : "");
      EXPECT_EQ(plan.padded, d == 40) << "d = " << d;
    }
  }
  flashattn::core::AttentionParams packs = dense_params(128);  // 4 query heads per KV head
  packs.seqlen_q = 16;
  packs.total_q = packs.batch * packs.seqlen_q;
  packs.q.batch_stride = packs.out.batch_stride = packs.q.row_stride * packs.seqlen_q;
  packs.dropout_p = 0.2f;
  EXPECT_EQ(plan_of(packs).kernel, hopper_or_sm80()) << "short GQA call";
  flashattn::core::AttentionParams small = dense_params(32);
  small.dropout_p = 0.1f;
  EXPECT_EQ(plan_of(small).kernel, FwdKernel::kSm80) << "d = 32";
  flashattn::core::AttentionParams short_causal = dense_params(256);
  short_causal.seqlen_q = short_causal.seqlen_k = 512;
  short_causal.window_right = 0;
  short_causal.dropout_p = 0.1f;
  EXPECT_EQ(plan_of(short_causal).kernel, FwdKernel::kSm80) << "d = 256, causal, 512 keys";
}

// Decoding through the plain forward: at most kKvDecodeMaxRows query rows per KV head take
// the KV-cache kernel's split decode tile on any device, with a workspace for the partial
// results of its key splits; more rows, dropout or varlen take the forward kernels.
TEST_F(CudaForwardPlan, ShortQueriesTakeTheDecodeRoute) {
  auto with_queries = [](int seqlen_q) {
    flashattn::core::AttentionParams p = dense_params(128);  // 8 heads on 2 KV heads
    p.seqlen_q = seqlen_q;
    p.total_q = p.batch * seqlen_q;
    p.q.batch_stride = p.out.batch_stride = p.q.row_stride * seqlen_q;
    return p;
  };
  for (int seqlen_q : {1, 8}) {  // 4 and 32 rows per KV head
    const FwdPlan plan = plan_of(with_queries(seqlen_q));
    EXPECT_EQ(plan.kernel, FwdKernel::kKvDecode) << seqlen_q << " queries";
    EXPECT_GT(plan.workspace_bytes, 0u) << "1024 keys split for 4 blocks";
    EXPECT_FALSE(plan.padded);
  }
  EXPECT_EQ(plan_of(with_queries(9)).kernel, hopper_or_sm80()) << "36 rows per KV head";
  flashattn::core::AttentionParams dropout = with_queries(1);
  dropout.dropout_p = 0.1f;
  EXPECT_EQ(plan_of(dropout).kernel, hopper_or_sm80()) << "dropout";
}

// The list step on its own, for a device with and one without sm_90a code: it needs no GPU,
// so it runs wherever the CUDA build's tests run.
TEST(ForwardFamily, DropoutRunsWhereTheCallWithoutItDoes) {
  using flashattn::cuda::first_forward_family;
  for (auto dtype : {flashattn::core::ElementType::kBF16, flashattn::core::ElementType::kF16}) {
    for (int d : {64, 96, 128, 192, 256}) {
      for (bool causal : {false, true}) {
        for (float dropout_p : {0.f, 0.1f}) {
          flashattn::core::AttentionParams p = dense_params(d);
          p.dtype = dtype;
          p.dropout_p = dropout_p;
          if (causal) p.window_right = 0;
          const std::string what = "d = " + std::to_string(d) + (causal ? ", causal" : "") +
                                   ", dropout " + std::to_string(dropout_p);
          EXPECT_EQ(first_forward_family(p, /*sm90a=*/true), FwdKernel::kSm90) << what;
          EXPECT_EQ(first_forward_family(p, /*sm90a=*/false), FwdKernel::kSm80) << what;
        }
      }
    }
  }
  flashattn::core::AttentionParams small = dense_params(32);
  small.dropout_p = 0.1f;
  EXPECT_EQ(first_forward_family(small, true), FwdKernel::kSm80) << "d = 32";
  flashattn::core::AttentionParams short_causal = dense_params(256);
  short_causal.seqlen_q = short_causal.seqlen_k = 512;
  short_causal.window_right = 0;
  short_causal.dropout_p = 0.1f;
  EXPECT_EQ(first_forward_family(short_causal, true), FwdKernel::kSm80)
      << "d = 256, causal, 512 keys";
  flashattn::core::AttentionParams reversed = dense_params(128);
  reversed.k.row_stride = -reversed.k.row_stride;
  reversed.dropout_p = 0.1f;
  EXPECT_EQ(first_forward_family(reversed, true), FwdKernel::kSm80) << "negative k row stride";
}

// A paged KV cache of 64 pages of `page_size` rows over the dense problem's q: the prefill's
// forward through block_table (forward_paged.cu's choose_paged_kernel).
flashattn::core::KVCacheParams paged_params(int head_dim, int page_size) {
  flashattn::core::KVCacheParams p;
  static_cast<flashattn::core::AttentionParams&>(p) = dense_params(head_dim);
  static const int32_t table[1] = {0};  // never dereferenced by the plan
  p.block_table = table;
  p.page_size = page_size;
  p.num_pages = 64;
  p.max_pages = 16;
  p.block_table_batch_stride = p.max_pages;
  p.seqlen_k = p.max_pages * page_size;
  p.k.batch_stride = p.v.batch_stride = p.k.row_stride * page_size;
  return p;
}

FwdPlan paged_plan_of(const flashattn::core::KVCacheParams& p) {
  int device = 0;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  FwdPlan plan;
  const flashattn::Status s = flashattn::cuda::choose_paged_kernel(p, device, &plan);
  EXPECT_TRUE(s.ok()) << s.message();
  return plan;
}

TEST_F(CudaForwardPlan, PagedPrefillOnTheHopperKernel) {
  for (int d : {64, 96, 128, 192, 256}) {
    for (int page_size : {16, 48, 256}) {
      EXPECT_EQ(paged_plan_of(paged_params(d, page_size)).kernel, hopper_or_sm80())
          << "d = " << d << ", page size " << page_size;
    }
  }
  EXPECT_EQ(paged_plan_of(paged_params(32, 16)).kernel, FwdKernel::kSm80) << "d = 32";
  flashattn::core::KVCacheParams reversed = paged_params(128, 16);
  reversed.v.row_stride = -reversed.v.row_stride;
  EXPECT_EQ(paged_plan_of(reversed).kernel, FwdKernel::kSm80) << "negative v row stride";
}

}  // namespace
}  // namespace fa_cuda_test
