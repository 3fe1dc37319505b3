// The CUDA forward through the public API (cuda_runner) against the reference, with the
// shared problems and tolerance check the CPU backend runs (fa_test::check_forward: fresh
// random inputs, poisoned outputs, out and lse under FA2's rule), in fp16 and bf16: head
// dims with and without a kernel, odd and unequal sequence lengths, causal (rows without
// keys included), windows, ALiBi, softcap, scale and extreme logits, GQA/MQA, varlen with
// empty sequences and seqused_k, short GQA queries packed per KV head, strided views and the
// layouts the kernels treat apart.
// The CPU reference is the slow part: problems stay far below 1 GFLOP each.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cuda/forward_tuning.hpp"
#include "cuda_test_support.hpp"
#include "forward_checks.hpp"
#include "layout_runner.hpp"
#include "support/reference_problem.hpp"

namespace fa_cuda_test {
namespace {

using fa_test::Problem;
using flashattn::DType;

struct Window {
  int left, right;
};

class CudaForward : public CudaDtypeSuite {
 protected:
  CudaForward() : CudaDtypeSuite(0) {}

  static void expect_passes_on_cuda(const Problem& p) {
    expect_passes(fa_test::check_forward(p, cuda_runner()));
  }
};

TEST_P(CudaForward, HeadDimsWithAKernel) {
  for (int d : {32, 64, 96, 128, 192, 256}) {
    for (bool causal : {false, true}) {
      Problem p = problem({2, 2, 1, 77, 130, d});
      p.causal = causal;
      expect_passes_on_cuda(p);
    }
  }
}

// d % 8 != 0 or no kernel of that size: the API pads into the workspace.
TEST_P(CudaForward, HeadDimsServedByPadding) {
  for (int d : {1, 2, 3, 5, 7, 8, 16, 24, 40, 59, 72, 80, 100, 136, 160, 200, 224, 255}) {
    Problem p = problem({2, 2, 1, 45, 90, d});
    p.causal = d % 2 == 0;
    expect_passes_on_cuda(p);
  }
}

// Lengths that are not multiples of any tile, 1, and sq != sk both ways (causal sq > sk
// leaves the first sq - sk rows without keys).
TEST_P(CudaForward, OddAndUnequalSeqlens) {
  const std::pair<int, int> lengths[] = {{1, 1},    {1, 17},   {17, 1},    {17, 17},  {127, 127},
                                         {1, 127},  {127, 1},  {17, 1000}, {1000, 17}, {113, 203},
                                         {203, 113}, {128, 64}, {64, 128},  {129, 65}};
  for (auto [sq, sk] : lengths) {
    for (int d : {64, 128}) {
      for (bool causal : {false, true}) {
        Problem p = problem({2, 2, 1, sq, sk, d});
        p.causal = causal;
        expect_passes_on_cuda(p);
      }
    }
  }
}

// No keys at all (k and v empty, so the API hands the kernels zero strides for them): every
// row's out is 0 and its lse -inf, dense and GQA, causal or not; and no queries.
TEST_P(CudaForward, EmptyKeysOrQueries) {
  for (int d : {64, 128, 256}) {
    for (bool causal : {false, true}) {
      Problem no_keys = problem({2, 4, 2, 33, 0, d});
      no_keys.causal = causal;
      expect_passes_on_cuda(no_keys);
      Problem no_queries = problem({2, 4, 2, 0, 40, d});
      no_queries.causal = causal;
      expect_passes_on_cuda(no_queries);
    }
  }
}

TEST_P(CudaForward, SeqlenThousand) {
  const struct {
    Shape shape;
    bool causal;
  } cases[] = {{{1, 1, 1, 1000, 1000, 64}, false},
               {{1, 1, 1, 1000, 1000, 64}, true},
               {{1, 1, 1, 1000, 600, 128}, true},
               {{1, 1, 1, 300, 1000, 256}, false}};
  for (const auto& c : cases) {
    Problem p = problem(c.shape);
    p.causal = c.causal;
    expect_passes_on_cuda(p);
  }
}

TEST_P(CudaForward, RowsWithoutKeysAreZeroWithMinusInfLse) {
  Problem causal = problem({2, 2, 2, 150, 40, 64});
  causal.causal = true;
  Problem one_key = problem({1, 1, 1, 9, 1, 128});
  one_key.causal = true;
  Problem shut_window = problem({1, 2, 2, 100, 10, 64});  // window (0, 0) with sq > sk
  shut_window.window_left = 0;
  shut_window.window_right = 0;
  Problem keyless_sequences = varlen(2, 1, 64, {20, 33, 7}, {0, 40, 9});
  keyless_sequences.seqused_k = {0, 40, 0};
  for (const Problem& p : {causal, one_key, shut_window, keyless_sequences}) {
    expect_passes_on_cuda(p);
    expect_empty_rows_exact(p);
  }
}

TEST_P(CudaForward, SlidingWindows) {
  const Window windows[] = {
      {16, -1}, {0, -1}, {3, -1},                // left only
      {-1, 5}, {-1, 0},                          // right only
      {0, 0}, {32, 32}, {100, 7}, {7, 100}};     // both
  for (Window w : windows) {
    for (auto [sq, sk] : {std::pair{150, 150}, std::pair{90, 170}, std::pair{170, 90}}) {
      Problem p = problem({2, 2, 2, sq, sk, 64});
      p.window_left = w.left;
      p.window_right = w.right;
      expect_passes_on_cuda(p);
    }
  }
  Problem causal_with_left = problem({1, 2, 1, 260, 260, 96});
  causal_with_left.causal = true;
  causal_with_left.window_left = 40;
  expect_passes_on_cuda(causal_with_left);
}

TEST_P(CudaForward, Alibi) {
  for (bool per_batch : {false, true}) {
    for (bool causal : {false, true}) {
      for (auto [sq, sk] : {std::pair{120, 170}, std::pair{170, 120}}) {
        Problem p = problem({2, 4, 2, sq, sk, 64});
        p.alibi = true;
        p.alibi_per_batch = per_batch;
        p.causal = causal;
        expect_passes_on_cuda(p);
      }
    }
  }
}

TEST_P(CudaForward, Softcap) {
  for (int d : {64, 128, 256}) {
    Problem p = problem({2, 2, 1, 143, 143, d});
    p.causal = d != 128;
    p.softcap = 30.f;
    p.input_scale = 3.f;
    expect_passes_on_cuda(p);
  }
  Problem tight = problem({1, 2, 2, 100, 100, 64});
  tight.softcap = 5.f;  // logits far beyond the cap
  tight.softmax_scale = 0.5f;
  tight.input_scale = 3.f;
  expect_passes_on_cuda(tight);
  Problem with_alibi = problem({2, 2, 2, 170, 120, 128});
  with_alibi.softcap = 20.f;
  with_alibi.alibi = true;
  with_alibi.alibi_per_batch = true;
  with_alibi.causal = true;
  expect_passes_on_cuda(with_alibi);
}

TEST_P(CudaForward, ScaleAndExtremeLogits) {
  for (float scale : {0.f, 0.7f}) {  // 0: the default 1/sqrt(d)
    Problem extreme = problem({1, 2, 2, 200, 200, 64});
    extreme.input_scale = 6.f;  // scores in the hundreds: exp overflows without the max shift
    extreme.softmax_scale = scale;
    expect_passes_on_cuda(extreme);
  }
  Problem uniform = problem({2, 2, 1, 133, 211, 128});
  uniform.distribution = fa_test::Distribution::kUniform;
  uniform.causal = true;
  expect_passes_on_cuda(uniform);
}

// softmax_scale = 0 (FlashAttention-2's meaning: every visible score is 0, with or without
// softcap): uniform weights over the visible keys, no NaN from the masked ones.
TEST_P(CudaForward, ZeroScale) {
  for (int d : {64, 128, 256}) {
    for (float softcap : {0.f, 20.f}) {
      Problem p = problem({2, 2, 1, 150, 170, d});
      p.causal = true;
      p.zero_scale = true;
      p.softcap = softcap;
      expect_passes_on_cuda(p);
    }
  }
}

TEST_P(CudaForward, GqaAndMqa) {
  for (int nheads_k : {1, 2, 4, 8}) {
    for (bool causal : {false, true}) {
      Problem p = problem({2, 8, nheads_k, 97, 131, 64});
      p.causal = causal;
      expect_passes_on_cuda(p);
    }
  }
  expect_passes_on_cuda(problem({1, 6, 3, 64, 64, 128}));
}

// Short queries with GQA: the Hopper kernel packs the query heads of a KV head into one tile
// (fwd_sm90_pack_gqa says so for every problem here): rows of several heads and queries per
// tile, masks and ALiBi per row, out and lse per (query, head), varlen and seqused_k.
TEST_P(CudaForward, PackedGqaShortQueries) {
  for (int group : {2, 4, 8, 16}) {
    for (int sq : {1, 3, 21, 50}) {
      Problem p = problem({2, 2 * group, 2, sq, 77 + 40 * group, group == 8 ? 128 : 64});
      p.causal = sq % 2 == 1;
      ASSERT_TRUE(flashattn::cuda::fwd_sm90_pack_gqa(p.nheads, p.nheads_k, sq, 128))
          << "group " << group << ", " << sq << " queries";
      expect_passes_on_cuda(p);
    }
  }
  Problem window = problem({1, 16, 2, 40, 300, 256});
  window.window_left = 20;
  window.window_right = 3;
  expect_passes_on_cuda(window);
  Problem features = problem({2, 8, 2, 30, 150, 96});
  features.alibi = true;
  features.alibi_per_batch = true;
  features.softcap = 15.f;
  features.causal = true;
  expect_passes_on_cuda(features);
  Problem packed = varlen(16, 4, 192, {5, 0, 31, 17}, {60, 9, 200, 17});
  packed.seqused_k = {40, 0, 150, 17};
  packed.causal = true;
  expect_passes_on_cuda(packed);
}

TEST_P(CudaForward, VarlenWithEmptySequencesAndSequsedK) {
  for (bool causal : {false, true}) {
    Problem p = varlen(4, 2, 64, {1, 17, 0, 127, 300, 5}, {5, 40, 17, 127, 250, 0});
    p.causal = causal;
    expect_passes_on_cuda(p);
    p.seqused_k = {3, 40, 0, 100, 101, 0};
    expect_passes_on_cuda(p);
    p.seqused_k.clear();
    p.causal = false;
    p.window_left = 20;
    p.window_right = causal ? 0 : 7;
    expect_passes_on_cuda(p);
  }
  Problem wide = varlen(2, 2, 128, {200, 3, 0, 64}, {180, 77, 9, 64});
  wide.causal = true;
  expect_passes_on_cuda(wide);
  Problem features = varlen(4, 1, 80, {50, 130, 7}, {60, 140, 30});  // padded head dim
  features.seqused_k = {60, 100, 0};
  features.alibi = true;
  features.alibi_per_batch = true;
  features.softcap = 10.f;
  features.window_left = 20;
  features.window_right = 0;
  expect_passes_on_cuda(features);
}

// More tiles than a GPU has SMs, several key blocks per tile: the Hopper kernel's persistent
// blocks take several tiles each and run their K/V rings across tiles (the tile order puts
// the longest causal tiles first).
TEST_P(CudaForward, ManyTilesPerBlock) {
  const struct {
    Shape shape;
    bool causal;
  } cases[] = {{{1, 140, 20, 130, 200, 64}, true},    // 140 tiles of 192 rows
               {{1, 70, 10, 260, 150, 128}, false},   // 210 tiles of 128
               {{1, 70, 10, 260, 300, 128}, true},
               {{1, 36, 36, 300, 170, 256}, true}};   // 108 tiles, 3 key blocks of 80
  for (const auto& c : cases) {
    Problem p = problem(c.shape);
    p.causal = c.causal;
    expect_passes_on_cuda(p);
  }
  Problem packed = varlen(40, 8, 128, {300, 1, 129, 0, 250}, {310, 7, 500, 20, 0});
  packed.causal = true;
  expect_passes_on_cuda(packed);
}

// More than 2048 keys: the Hopper kernel's wide tiles (forward_tuning.hpp's fwd_sm90_tile; the
// narrow ones run shorter or causal calls).
// (No GQA group here: short GQA queries take the packed narrow tile, PackedGqaShortQueries.)
TEST_P(CudaForward, LongKeys) {
  Problem wide = problem({1, 4, 4, 257, 2200, 128});
  expect_passes_on_cuda(wide);
  Problem causal = problem({1, 2, 2, 200, 2100, 64});
  causal.causal = true;
  expect_passes_on_cuda(causal);
  Problem packed = varlen(2, 2, 128, {130, 20}, {2100, 2050});
  packed.seqused_k = {2100, 2049};
  expect_passes_on_cuda(packed);
  expect_unused_keys_ignored(packed);
}

// Keys past seqused_k hold NaN and Inf: whole key blocks are loaded, and a kernel that
// multiplied their zero weights by V would make every row of the block NaN.
// One KV head for two query heads packs them into one tile (fwd_sm90_pack_gqa), two do not.
TEST_P(CudaForward, UnusedKeysTakeNoPart) {
  for (int d : {64, 128, 256}) {
    for (int nheads_k : {1, 2}) {
      Problem p = varlen(2, nheads_k, d, {70, 150, 33}, {200, 180, 100});
      p.seqused_k = {130, 181 - 50, 1};
      p.causal = d == 128;
      expect_unused_keys_ignored(p);
    }
  }
}

// q, k, v as slices of a packed qkv buffer and a padded out (Problem::strided), read in
// place; d = 40 also goes through the padding path. The gaps of out keep their bytes.
TEST_P(CudaForward, StridedViews) {
  for (int d : {64, 128, 40}) {
    for (bool causal : {false, true}) {
      Problem dense = problem({2, 4, 2, 150, 120, d});
      dense.strided = true;
      dense.causal = causal;
      expect_passes_on_cuda(dense);
    }
    Problem packed = varlen(2, 2, d, {40, 90}, {70, 90});
    packed.strided = true;
    packed.causal = true;
    expect_passes_on_cuda(packed);
  }
  for (int d : {64, 40}) {
    Problem dense = problem({1, 2, 1, 70, 50, d});
    dense.strided = true;
    expect_gaps_untouched(dense);
    Problem packed = varlen(2, 2, d, {9, 40}, {30, 20});
    packed.strided = true;
    expect_gaps_untouched(packed);
  }
}

// Decoding through the plain forward (at most 32 query rows per KV head): the KV-cache
// kernel's split decode tile reads k and v as a full cache (forward.cu's decode route). One to
// eight queries, groups up to MQA's 32, keys from one to past a split, every mask and score
// option, lse, the head-major layout of Transformers' caches, and misaligned q (staged).
TEST_P(CudaForward, DecodeRouteShortQueries) {
  const struct {
    Shape shape;
    bool causal;
  } cases[] = {{{2, 8, 2, 1, 1, 128}, true},      {{3, 8, 2, 1, 77, 128}, false},
               {{1, 32, 8, 1, 3000, 128}, true},  {{2, 32, 1, 1, 1500, 64}, true},
               {{2, 16, 2, 4, 700, 256}, true},   {{1, 4, 4, 8, 2100, 64}, false},
               {{2, 8, 2, 3, 2, 128}, true},      {{1, 16, 4, 2, 4100, 96}, true}};
  for (const auto& c : cases) {
    Problem p = problem(c.shape);
    p.causal = c.causal;
    expect_passes_on_cuda(p);
  }
  Problem options = problem({2, 8, 2, 2, 900, 128});
  options.window_left = 100;
  options.window_right = 0;
  options.alibi = true;
  options.alibi_per_batch = true;
  options.softcap = 20.f;
  expect_passes_on_cuda(options);
  for (Layout layout : {Layout::kHeadMajor, Layout::kMisalignedPointer}) {
    Problem p = problem({2, 8, 2, 1, 1100, 128});
    p.causal = true;
    expect_passes(fa_test::check_forward(p, with_layout(cuda_runner(), layout)));
  }
}

// Head-major views, and misaligned strides or pointers (served through the workspace).
TEST_P(CudaForward, OtherLayouts) {
  for (Layout layout :
       {Layout::kHeadMajor, Layout::kMisalignedHeadStride, Layout::kMisalignedPointer}) {
    const fa_test::Runner runner = with_layout(cuda_runner(), layout);
    for (int d : {64, 128}) {
      Problem dense = problem({2, 4, 2, 150, 110, d});
      dense.causal = d == 128;
      expect_passes(fa_test::check_forward(dense, runner));
    }
    Problem packed = varlen(2, 2, 128, {40, 90}, {70, 90});
    packed.causal = true;
    expect_passes(fa_test::check_forward(packed, runner));
  }
}

TEST_P(CudaForward, WithoutLse) {
  Problem p = problem({1, 2, 2, 200, 200, 64});
  p.causal = true;
  expect_passes_without_lse(p);
  expect_passes_without_lse(varlen(2, 1, 40, {30, 77}, {50, 60}));
}

// The kernels read aligned views in place (docs/contract.md: views are not copied behind the
// user's back); only head dims without a kernel or misaligned views need a workspace.
TEST_P(CudaForward, WorkspaceOnlyForThePaddedPath) {
  Problem contiguous = problem({2, 4, 2, 1000, 1000, 128});
  Problem strided = problem({2, 4, 2, 1000, 1000, 64});
  strided.strided = true;
  Problem padded = problem({2, 4, 2, 100, 100, 40});
  const struct {
    const Problem& problem;
    bool needs_workspace;
  } cases[] = {{contiguous, false}, {strided, false}, {padded, true}};
  for (const auto& c : cases) {
    const fa_test::Inputs inputs = fa_test::make_inputs(c.problem);
    fa_test::Outputs outputs = fa_test::make_outputs(c.problem);
    size_t bytes = 0;
    const flashattn::Status status =
        cuda_workspace_size(fa_test::forward_args(c.problem, inputs, &outputs), &bytes);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(bytes > 0, c.needs_workspace) << c.problem.describe() << ": " << bytes << " bytes";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtype, CudaForward, ::testing::Values(DType::kF16, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& param) {
                           return std::string(flashattn::to_string(param.param));
                         });

}  // namespace
}  // namespace fa_cuda_test
