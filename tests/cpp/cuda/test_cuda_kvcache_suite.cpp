// The CUDA forward_kvcache through the public API (cuda_runner) against the reference, with
// the shared problems and check the CPU backends run (fa_test::check_kvcache: out, lse and
// the updated caches under FA2's rule), in fp16 and bf16: decode and prefill tiles, append,
// causal and windows relative to the updated cache, every page size class, rotary both
// pairings, cache_batch_idx, leftpad, ALiBi, softcap, GQA/MQA, head dims served in-kernel,
// head dims and cache layouts served through padded copies (d % 8 != 0, misaligned caches),
// cache lengths 0 and 1 per entry, split-KV against the reference and against the unsplit
// run. CudaKVCacheSanitize holds the small problems compute-sanitizer runs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda_test_support.hpp"
#include "layout_runner.hpp"
#include "support/kvcache_problem.hpp"

namespace fa_cuda_test {
namespace {

using fa_test::KVCacheProblem;
using flashattn::DType;

class CudaKVCache : public CudaTestWithParam<DType> {
 protected:
  KVCacheProblem problem(int head_dim = 64) {
    KVCacheProblem p;
    p.dtype = GetParam();
    p.batch = 3;
    p.nheads = 4;
    p.nheads_k = 2;
    p.seqlen_q = 1;
    p.head_dim = head_dim;
    p.seqlen_cache = 300;
    p.seed = (GetParam() == DType::kBF16 ? 90000u : 80000u) + next_seed_++;
    return p;
  }

  static void expect_passes_on_cuda(const KVCacheProblem& p) {
    expect_passes(fa_test::check_kvcache(p, cuda_runner()));
  }

  // The workspace the CUDA backend asks for problem p (callers wrap it in
  // ASSERT_NO_FATAL_FAILURE).
  static void cuda_workspace_of(const KVCacheProblem& p, size_t* bytes) {
    const fa_test::KVCacheInputs inputs = fa_test::make_kvcache_inputs(p);
    fa_test::KVCacheOutputs outputs = fa_test::make_kvcache_outputs(p, inputs);
    const flashattn::Status status =
        cuda_workspace_size(fa_test::kvcache_args(p, inputs, &outputs), bytes);
    ASSERT_TRUE(status.ok()) << status.message();
  }

 private:
  uint32_t next_seed_ = 1;
};

TEST_P(CudaKVCache, DecodeEveryCompiledHeadDim) {
  for (int d : {64, 128, 256}) {
    for (int seqlen_new : {0, 1}) {
      KVCacheProblem p = problem(d);
      p.seqlen_new = seqlen_new;
      expect_passes_on_cuda(p);
    }
  }
}

// Entries with 0 and 1 cached keys (a row without keys: out 0, lse -inf), with and without
// an append, causal or not.
TEST_P(CudaKVCache, CacheLengthsZeroAndOne) {
  for (int seqlen_new : {0, 1, 2}) {
    for (bool causal : {false, true}) {
      KVCacheProblem p = problem();
      p.batch = 4;
      p.cache_seqlens = {0, 1, 77, 0};
      p.seqlen_q = std::max(1, seqlen_new);
      p.seqlen_new = seqlen_new;
      p.causal = causal;
      expect_passes_on_cuda(p);
    }
  }
}

TEST_P(CudaKVCache, AppendWithCausalAndWindow) {
  KVCacheProblem p = problem();
  p.seqlen_q = 5;
  p.seqlen_new = 5;
  p.causal = true;
  expect_passes_on_cuda(p);
  p.causal = false;
  p.window_left = 30;
  p.window_right = 0;
  expect_passes_on_cuda(p);
  p.window_left = 7;
  p.window_right = 3;
  expect_passes_on_cuda(p);
}

// Packed rows past the decode tile: with a full forward block of queries, a contiguous cache
// without leftpad runs the forward kernel (seqused_k), a leftpad the KV-cache kernel's prefill
// tile; several query blocks. Fewer queries (the windowed case) run the prefill tile.
TEST_P(CudaKVCache, PrefillWithCache) {
  for (int d : {64, 128, 256}) {
    for (bool leftpad : {false, true}) {
      KVCacheProblem p = problem(d);
      p.seqlen_q = 130;
      p.seqlen_new = 130;
      p.seqlen_cache = 400;
      p.causal = true;
      if (leftpad) {
        p.cache_seqlens = {200, 17, 270};
        p.cache_leftpad = {5, 0, 17};
      }
      expect_passes_on_cuda(p);
    }
  }
  KVCacheProblem windowed = problem(128);
  windowed.seqlen_q = 70;
  windowed.seqlen_new = 70;
  windowed.window_left = 50;
  windowed.window_right = 10;
  expect_passes_on_cuda(windowed);
}

TEST_P(CudaKVCache, PagedEveryPageSizeClass) {
  for (int page_size : {16, 32, 48, 256, 512}) {
    for (int seqlen_new : {0, 3}) {
      KVCacheProblem p = problem(page_size == 48 ? 128 : 64);
      p.page_size = page_size;
      p.seqlen_cache = 700;
      p.seqlen_new = seqlen_new;
      p.seqlen_q = 3;
      p.causal = page_size != 48;
      expect_passes_on_cuda(p);
    }
  }
  KVCacheProblem prefill = problem();
  prefill.page_size = 32;
  prefill.seqlen_q = 100;
  prefill.seqlen_new = 100;
  prefill.causal = true;
  expect_passes_on_cuda(prefill);
}

// A full forward block of queries against a paged cache without leftpad: the forward kernel
// reads K/V through block_table. Pages smaller than its key block (16), larger (256) and
// neither a divisor nor a multiple of it (48); on the sm80 kernel one and two pipeline stages
// (d = 128, 64), 32-column panels (96), 64-row query blocks (256); on the Hopper kernel every
// compiled head dim and the dense forward's tiles (both of d = 64 and 256; d = 128's narrow
// one, and its wide one past 2048 keys), a key block in one copy per panel (pages of 256: the
// producer's idle warps leave) up to 20 copies (d = 256, pages of 16, 80-key blocks); GQA;
// key counts that are not block multiples. The workspace shows the route: only the int32 key
// counts, where the KV kernel's two splits would need fp32 partial outputs.
TEST_P(CudaKVCache, PagedPrefillRunsTheForwardKernel) {
  auto expect_forward_route = [](const KVCacheProblem& p) {
    SCOPED_TRACE(p.describe());
    size_t workspace = 0;
    ASSERT_NO_FATAL_FAILURE(cuda_workspace_of(p, &workspace));
    const size_t partial_out = size_t(2) * p.batch * p.nheads * p.seqlen_q * p.head_dim * 4;
    EXPECT_LT(workspace, partial_out) << "the paged prefill did not take the forward kernel";
    expect_passes_on_cuda(p);
  };
  for (int d : {64, 96, 128, 192, 256}) {
    for (int page_size : {16, 48, 256}) {
      for (bool causal : {false, true}) {
        KVCacheProblem p = problem(d);
        p.nheads = 8;
        p.nheads_k = 2;
        p.page_size = page_size;
        p.seqlen_cache = 800;
        p.cache_seqlens = {300, 77, 555};
        p.seqlen_q = p.seqlen_new = causal ? 129 : 200;  // the forward route needs a full block
        p.causal = causal;
        p.num_splits = 2;
        expect_forward_route(p);
      }
    }
  }
  for (int page_size : {16, 256}) {
    KVCacheProblem wide = problem(128);
    wide.nheads = 4;
    wide.nheads_k = 2;
    wide.batch = 2;
    wide.page_size = page_size;
    wide.seqlen_cache = 2304;
    wide.cache_seqlens = {2100, 333};
    wide.seqlen_q = wide.seqlen_new = 130;
    wide.num_splits = 2;
    expect_forward_route(wide);
  }
}

TEST_P(CudaKVCache, RotaryBothPairings) {
  for (bool interleaved : {false, true}) {
    for (bool causal : {false, true}) {
      KVCacheProblem p = problem(causal ? 128 : 64);
      p.seqlen_q = 4;
      p.seqlen_new = 4;
      p.rotary_dim = causal ? 128 : 32;  // all of d, or a part
      p.rotary_interleaved = interleaved;
      p.causal = causal;
      expect_passes_on_cuda(p);
    }
  }
}

TEST_P(CudaKVCache, CacheBatchIdxAndLeftpad) {
  KVCacheProblem p = problem();
  p.cache_batch_idx = true;
  p.seqlen_new = 2;
  p.seqlen_q = 2;
  expect_passes_on_cuda(p);
  p.cache_batch_idx = false;
  p.cache_seqlens = {100, 250, 17};
  p.cache_leftpad = {10, 0, 17};  // the last entry keeps only its new keys
  p.rotary_dim = 16;
  p.causal = true;
  expect_passes_on_cuda(p);
  p.page_size = 16;
  expect_passes_on_cuda(p);
  p.cache_leftpad = {33, 5, 1};  // leftpads that do not align with pages or tiles
  p.page_size = 48;
  expect_passes_on_cuda(p);
}

TEST_P(CudaKVCache, AlibiSoftcapGqaMqa) {
  for (int nheads : {8, 32}) {
    KVCacheProblem p = problem(128);
    p.nheads = nheads;
    p.nheads_k = nheads == 8 ? 1 : 2;  // MQA decode tile; GQA 16 x 4 rows: prefill tile
    p.seqlen_q = 3;
    p.seqlen_new = 3;
    p.alibi = true;
    p.softcap = 6.f;
    p.causal = true;
    expect_passes_on_cuda(p);
  }
}

TEST_P(CudaKVCache, WideGqaGroups) {
  for (int nheads : {24, 400}) {
    KVCacheProblem p = problem(16);
    p.batch = 2;
    p.nheads = nheads;
    p.nheads_k = 1;
    p.seqlen_q = 2;
    p.seqlen_new = 2;
    p.alibi = true;
    p.causal = true;
    expect_passes_on_cuda(p);
  }
}

// d % 8 == 0 below and between the compiled head dims: zero-filled columns in the kernel.
TEST_P(CudaKVCache, HeadDimsServedInKernel) {
  for (int d : {8, 40, 80, 96, 136, 200}) {
    KVCacheProblem p = problem(d);
    p.seqlen_new = 2;
    p.seqlen_q = 2;
    p.rotary_dim = d;
    p.causal = true;
    expect_passes_on_cuda(p);
  }
}

// d % 8 != 0 (FlashAttention-2's test file uses 59): q and each entry's cache rows go through
// zero-padded copies in the workspace, the append is written into the caller's cache (the
// check compares the whole updated caches, rows around the appended ones included), and out
// is copied back. Every route behind the copies: decode and prefill tiles, the forward kernel
// (a full block of queries, no leftpad), split-KV, and caches that were paged, indexed by
// cache_batch_idx or left-padded before the copy.
TEST_P(CudaKVCache, HeadDimsServedByPadding) {
  for (int d : {1, 20, 59, 111, 250}) {
    KVCacheProblem p = problem(d);
    p.seqlen_q = 2;
    p.seqlen_new = 2;
    p.rotary_dim = d >= 32 ? 32 : 0;
    p.rotary_interleaved = d % 2 == 1;
    p.causal = true;
    expect_passes_on_cuda(p);
  }
  KVCacheProblem paged = problem(59);
  paged.page_size = 16;
  paged.seqlen_cache = 200;
  paged.seqlen_new = 3;
  paged.seqlen_q = 3;
  paged.causal = true;
  expect_passes_on_cuda(paged);
  KVCacheProblem indexed = problem(59);
  indexed.cache_batch_idx = true;
  indexed.seqlen_new = 1;
  expect_passes_on_cuda(indexed);
  KVCacheProblem leftpad = problem(59);
  leftpad.cache_seqlens = {100, 250, 17};
  leftpad.cache_leftpad = {10, 0, 17};
  leftpad.seqlen_new = 2;
  leftpad.seqlen_q = 2;
  leftpad.window_left = 40;
  leftpad.window_right = 0;
  expect_passes_on_cuda(leftpad);
  KVCacheProblem prefill = problem(59);
  prefill.seqlen_q = 130;
  prefill.seqlen_new = 130;
  prefill.seqlen_cache = 400;
  prefill.causal = true;
  expect_passes_on_cuda(prefill);
  KVCacheProblem split = problem(59);
  split.batch = 1;
  split.seqlen_cache = 2000;
  split.seqlen_new = 1;
  split.num_splits = 3;
  split.alibi = true;
  split.softcap = 6.f;
  expect_passes_on_cuda(split);
}

// Caches whose strides or pointer are not 16-byte aligned cannot be read in place by the
// kernels: they take the padded copies too, with the append written into the caller's
// strided cache (gaps untouched: the check compares the caches element by element after
// copying them back). Head-major caches are aligned and stay in place.
TEST_P(CudaKVCache, OtherCacheLayouts) {
  for (Layout layout :
       {Layout::kHeadMajor, Layout::kMisalignedHeadStride, Layout::kMisalignedPointer}) {
    const fa_test::Runner runner = with_layout(cuda_runner(), layout);
    for (int page_size : {0, 16}) {
      KVCacheProblem p = problem(64);
      p.page_size = page_size;
      p.seqlen_new = 2;
      p.seqlen_q = 2;
      p.rotary_dim = 16;
      p.causal = true;
      SCOPED_TRACE(to_string(layout));
      expect_passes(fa_test::check_kvcache(p, runner));
    }
  }
}

// The padded copies are the only workspace of a plain decode: an aligned call with d % 8 == 0
// needs none, d = 59 or a misaligned cache needs the copies.
TEST_P(CudaKVCache, WorkspaceOnlyForThePaddedPath) {
  for (int d : {64, 59}) {
    KVCacheProblem p = problem(d);
    p.seqlen_new = 1;
    p.num_splits = 1;
    size_t bytes = 0;
    ASSERT_NO_FATAL_FAILURE(cuda_workspace_of(p, &bytes));
    const size_t cache_copy = size_t(p.batch) * p.seqlen_cache * p.nheads_k * 64 * 2;
    if (d == 64) {
      EXPECT_EQ(bytes, 0u);
    } else {
      EXPECT_GE(bytes, 2 * cache_copy) << "d = 59 did not take the padded copies";
    }
  }
}

TEST_P(CudaKVCache, SplitKvAgainstTheReference) {
  // 100 splits of 8000 keys: more than the combine's warps load ahead (32).
  for (int splits : {0, 1, 2, 3, 7, 64, 100}) {
    KVCacheProblem p = problem(128);
    p.batch = 1;
    p.nheads = 2;
    p.nheads_k = 1;
    p.seqlen_cache = splits == 100 ? 8000 : 2000;
    p.seqlen_new = 2;
    p.seqlen_q = 2;
    p.num_splits = splits;
    p.causal = splits % 2 == 1;
    expect_passes_on_cuda(p);
  }
  KVCacheProblem paged = problem(64);
  paged.page_size = 16;
  paged.seqlen_cache = 3000;
  paged.num_splits = 0;  // batch 3 x 2 KV heads: the library splits
  expect_passes_on_cuda(paged);
}

// Split and unsplit runs of the same problem agree to the rounding of the output dtype.
TEST_P(CudaKVCache, SplitMatchesUnsplit) {
  KVCacheProblem p = problem(128);
  p.batch = 2;
  p.nheads = 8;
  p.nheads_k = 2;
  p.seqlen_cache = 4000;
  p.seqlen_new = 1;
  p.cache_seqlens = {3999, 1500};
  const fa_test::KVCacheInputs inputs = fa_test::make_kvcache_inputs(p);
  std::vector<fa_test::KVCacheOutputs> runs;
  for (int splits : {1, 5, 0}) {
    p.num_splits = splits;
    runs.push_back(fa_test::make_kvcache_outputs(p, inputs));
    const flashattn::Status status =
        cuda_runner().forward_kvcache(fa_test::kvcache_args(p, inputs, &runs.back()));
    ASSERT_TRUE(status.ok()) << status.message();
  }
  const double ulp = GetParam() == DType::kBF16 ? 1.0 / 128 : 1.0 / 1024;
  for (size_t r = 1; r < runs.size(); ++r) {
    double out_diff = 0, lse_diff = 0;
    for (int64_t n = 0; n < runs[0].out.numel(); ++n) {
      const double a = runs[0].out.get(n), b = runs[r].out.get(n);
      out_diff = std::max(out_diff, std::fabs(a - b) / std::max(1.0, std::fabs(a)));
    }
    for (int64_t n = 0; n < runs[0].lse.numel(); ++n) {
      lse_diff = std::max(lse_diff, std::fabs(double(runs[0].lse.get(n)) - runs[r].lse.get(n)));
    }
    EXPECT_LE(out_diff, ulp) << "run " << r;
    EXPECT_LE(lse_diff, 1e-4) << "run " << r;
  }
}

// A decode long enough for many key blocks and splits per (batch entry, KV head).
TEST_P(CudaKVCache, LongDecode) {
  KVCacheProblem p = problem(128);
  p.batch = 2;
  p.nheads = 8;
  p.nheads_k = 2;
  p.seqlen_cache = 6000;
  p.cache_seqlens = {5999, 4097};
  p.seqlen_new = 1;
  expect_passes_on_cuda(p);
  p.page_size = 256;
  expect_passes_on_cuda(p);
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaKVCache, ::testing::Values(DType::kF16, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(flashattn::to_string(info.param));
                         });

using CudaKVCacheSanitize = CudaTest;

TEST_F(CudaKVCacheSanitize, SmallProblems) {
  KVCacheProblem decode;
  decode.dtype = DType::kBF16;
  decode.batch = 2;
  decode.cache_seqlens = {0, 90};
  decode.seqlen_cache = 100;
  decode.seqlen_new = 1;
  decode.num_splits = 3;
  decode.rotary_dim = 64;
  KVCacheProblem paged = decode;
  paged.dtype = DType::kF16;
  paged.page_size = 16;
  paged.cache_leftpad = {0, 7};
  paged.num_splits = 1;
  paged.causal = true;
  KVCacheProblem prefill = decode;
  prefill.cache_seqlens = {10, 30};
  prefill.seqlen_q = 40;
  prefill.seqlen_new = 40;
  prefill.head_dim = 40;
  prefill.rotary_dim = 40;
  prefill.causal = true;
  prefill.cache_leftpad = {3, 0};  // the KV-cache kernel's prefill tile, not the forward's
  // Splits of several key blocks, so that the K/V ring and the row places turn over (d = 128:
  // 3 decode stages, 2 prefill stages), paged with a leftpad that is not a page multiple.
  KVCacheProblem ring = decode;
  ring.head_dim = 128;
  ring.rotary_dim = 0;
  ring.seqlen_new = 0;
  ring.seqlen_cache = 512;
  ring.cache_seqlens = {420, 300};
  ring.page_size = 16;
  ring.cache_leftpad = {5, 0};
  ring.num_splits = 1;
  KVCacheProblem ring_prefill = ring;
  ring_prefill.seqlen_q = 40;
  // The forward kernel through block_table (no leftpad): one stage at d = 128 with pages
  // smaller than a key block, two stages at d = 64 with pages that straddle blocks; enough
  // key blocks that the page entry ring turns over.
  KVCacheProblem paged_prefill = ring;
  paged_prefill.cache_leftpad = {};
  paged_prefill.seqlen_cache = 640;
  paged_prefill.seqlen_q = 130;
  paged_prefill.seqlen_new = 130;
  paged_prefill.causal = true;
  KVCacheProblem paged_prefill_two_stages = paged_prefill;
  paged_prefill_two_stages.head_dim = 64;
  paged_prefill_two_stages.page_size = 48;
  paged_prefill_two_stages.causal = false;
  // The Hopper kernel's 64-key tile of d = 256, whose blocks hold pages of 64 whole.
  KVCacheProblem paged_prefill_whole_pages = paged_prefill;
  paged_prefill_whole_pages.head_dim = 256;
  paged_prefill_whole_pages.page_size = 64;
  // The padding path: d = 59 through the copies, from a paged cache with a split decode.
  KVCacheProblem padded = paged;
  padded.head_dim = 59;
  padded.rotary_dim = 32;
  padded.num_splits = 2;
  for (const KVCacheProblem& p : {decode, paged, prefill, ring, ring_prefill, paged_prefill,
                                  paged_prefill_two_stages, paged_prefill_whole_pages,
                                  padded}) {
    expect_passes(fa_test::check_kvcache(p, cuda_runner()));
  }
}

}  // namespace
}  // namespace fa_cuda_test
