// Dropout on the GPU against the CPU reference with the same (seed, offset): the keep-test is
// the shared Philox function of (seed, offset, b * nheads + h, row, col), so the CUDA forward
// and backward must drop exactly the reference's elements. A wrong mask moves outputs and
// gradients by O(1), far outside the tolerance rule (the control test below shows that the
// check catches a mask drawn from another seed). In fp16 and bf16: every head dim with a
// kernel and padded ones, odd lengths, causal, windows, ALiBi and softcap, GQA, varlen with
// empty sequences and seqused_k; lse untouched by dropout; seeds and offsets that differ give
// different masks, equal ones the same output bit for bit. On a device that runs the Hopper
// forward, the forward tests run it (a call with dropout runs where it would without:
// CudaForwardPlan.DropoutOnTheHopperKernel), ForwardHopperTiles each of its tiles; with
// FLASHATTN_DISABLE_SM90=1 (gpu-check's second pass) the same tests run the sm80 kernel.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_support.hpp"
#include "support/reference_problem.hpp"

namespace fa_cuda_test {
namespace {

using fa_test::Problem;
using flashattn::DType;

// out and lse of one CUDA forward of `p`.
fa_test::Outputs cuda_forward(const Problem& p, const fa_test::Inputs& inputs) {
  fa_test::Outputs outputs = fa_test::make_outputs(p);
  const flashattn::Status status = cuda_runner().forward(fa_test::forward_args(p, inputs, &outputs));
  EXPECT_TRUE(status.ok()) << status.message();
  return outputs;
}

// The fraction of elements of `a` and `b` that differ.
double fraction_differing(const fa_test::HostTensor& a, const fa_test::HostTensor& b) {
  int64_t differing = 0;
  for (int64_t i = 0; i < a.numel(); ++i) differing += a.get(i) != b.get(i);
  return static_cast<double>(differing) / static_cast<double>(a.numel());
}

class CudaDropout : public CudaDtypeSuite {
 protected:
  CudaDropout() : CudaDtypeSuite(30000) {}

  // A problem of shape `s` with dropout p; seeds and offsets vary with the problem and use
  // all 64 bits (the key takes the high word of seed and offset).
  Problem dropped(const Shape& s, float p) {
    Problem problem = CudaDtypeSuite::problem(s);
    with_dropout(&problem, p);
    return problem;
  }
  Problem dropped_varlen(int nheads, int nheads_k, int head_dim, std::vector<int> seqlens_q,
                         std::vector<int> seqlens_k, float p) {
    Problem problem = varlen(nheads, nheads_k, head_dim, std::move(seqlens_q), std::move(seqlens_k));
    with_dropout(&problem, p);
    return problem;
  }

  static void expect_forward_passes(const Problem& p) {
    expect_passes(fa_test::check_forward(p, cuda_runner()));
  }
  static void expect_backward_passes(const Problem& p, bool deterministic = false) {
    expect_passes(fa_test::check_backward(p, deterministic ? deterministic_runner() : cuda_runner()));
  }

 private:
  static void with_dropout(Problem* problem, float p) {
    problem->dropout_p = p;
    problem->dropout_seed = 0x9e3779b97f4a7c15ull ^ (uint64_t{problem->seed} << 20);
    problem->dropout_offset = (uint64_t{problem->seed} << 33) + 4 * problem->seed;
  }
};

TEST_P(CudaDropout, ForwardHeadDimsWithAKernel) {
  for (int d : {32, 64, 96, 128, 192, 256}) {
    for (bool causal : {false, true}) {
      Problem p = dropped({2, 2, 1, 77, 130, d}, 0.17f);
      p.causal = causal;
      expect_forward_passes(p);
    }
  }
}

TEST_P(CudaDropout, ForwardPaddedHeadDimsAndProbabilities) {
  for (int d : {8, 40, 100, 200}) {
    Problem p = dropped({2, 2, 2, 45, 90, d}, 0.3f);
    p.causal = d % 2 == 0;
    expect_forward_passes(p);
  }
  for (float probability : {0.01f, 0.5f, 0.9f}) {
    expect_forward_passes(dropped({1, 2, 1, 100, 150, 64}, probability));
  }
}

TEST_P(CudaDropout, ForwardOddLengthsWindowsAndFeatures) {
  const std::pair<int, int> lengths[] = {{1, 1}, {17, 1}, {1, 127}, {127, 127}, {203, 113},
                                         {113, 203}, {300, 257}};
  for (auto [sq, sk] : lengths) {
    for (bool causal : {false, true}) {
      Problem p = dropped({2, 2, 1, sq, sk, sq % 2 == 0 ? 128 : 64}, 0.2f);
      p.causal = causal;
      expect_forward_passes(p);
    }
  }
  Problem window = dropped({1, 2, 2, 170, 150, 64}, 0.25f);
  window.window_left = 20;
  window.window_right = 7;
  expect_forward_passes(window);
  Problem features = dropped({2, 4, 2, 120, 170, 128}, 0.1f);
  features.alibi = true;
  features.alibi_per_batch = true;
  features.softcap = 20.f;
  features.causal = true;
  expect_forward_passes(features);
}

TEST_P(CudaDropout, ForwardGqaAndVarlen) {
  for (int nheads_k : {1, 2, 8}) {
    expect_forward_passes(dropped({2, 8, nheads_k, 97, 131, 64}, 0.15f));
  }
  for (bool causal : {false, true}) {
    Problem p = dropped_varlen(4, 2, 64, {1, 17, 0, 127, 200, 5}, {5, 40, 17, 127, 150, 0}, 0.2f);
    p.causal = causal;
    expect_forward_passes(p);
    p.seqused_k = {3, 40, 0, 100, 101, 0};
    expect_forward_passes(p);
  }
  expect_forward_passes(dropped_varlen(2, 1, 256, {70, 33}, {90, 130}, 0.2f));
}

// The Hopper forward's tiles (forward_tuning.hpp) with dropout, each over several key blocks so
// that the mainloop's steps draw as well as its first block: d = 64's 128 x 128 (its only
// tile with dropout); d = 128's 128 x 176 past kFwdSm90NarrowKeys keys
// (22 column tiles: 64-bit keep masks) and its 128 x 128; d = 96, 192, and 256 causal past 512
// keys. Then a short GQA call, whose heads the kernel packs without dropout but not with it,
// and more tiles than an H200 has SMs, so a persistent block runs several (in causal pairs).
// On other devices they run the sm80 kernel and check the same.
TEST_P(CudaDropout, ForwardHopperTiles) {
  const std::pair<Shape, bool> cases[] = {  // the shape, causal
      {{1, 2, 1, 200, 700, 64}, false},  {{1, 2, 1, 200, 700, 64}, true},
      {{1, 2, 1, 150, 2200, 128}, false}, {{1, 2, 1, 150, 700, 128}, true},
      {{1, 2, 2, 140, 500, 96}, false},  {{1, 2, 2, 140, 500, 192}, true},
      {{1, 2, 1, 140, 600, 256}, true},  {{2, 8, 2, 16, 300, 128}, false},
      {{2, 16, 4, 600, 600, 64}, true},  {{2, 16, 4, 300, 450, 128}, false},
  };
  for (const auto& [shape, causal] : cases) {
    Problem p = dropped(shape, 0.2f);
    p.causal = causal;
    expect_forward_passes(p);
  }
}

// lse is the log-sum-exp of the undropped scores: the same with and without dropout.
TEST_P(CudaDropout, LseIsUnchangedByDropout) {
  for (int d : {64, 128, 256}) {
    Problem p = problem({2, 4, 2, 150, 190, d});
    p.causal = d == 128;
    const fa_test::Inputs inputs = fa_test::make_inputs(p);
    const fa_test::Outputs plain = cuda_forward(p, inputs);
    p.dropout_p = 0.3f;
    const fa_test::Outputs dropped = cuda_forward(p, inputs);
    double max_diff = 0;
    int64_t bitwise_different = 0;
    for (int64_t i = 0; i < plain.lse.numel(); ++i) {
      const double a = plain.lse.get(i), b = dropped.lse.get(i);
      bitwise_different += a != b;
      if (std::isfinite(a) || std::isfinite(b)) max_diff = std::max(max_diff, std::abs(a - b));
    }
    EXPECT_LE(max_diff, 1e-5) << p.describe();
    std::printf("lse with and without dropout, d=%d: %lld of %lld values differ, max %g\n", d,
                static_cast<long long>(bitwise_different),
                static_cast<long long>(plain.lse.numel()), max_diff);
    EXPECT_GT(fraction_differing(plain.out, dropped.out), 0.5) << p.describe();
  }
}

// The same (seed, offset) reproduces a run bit for bit; another seed or offset changes
// most outputs.
TEST_P(CudaDropout, SeedsAndOffsetsSelectTheMask) {
  Problem p = dropped({2, 2, 2, 130, 140, 64}, 0.2f);
  const fa_test::Inputs inputs = fa_test::make_inputs(p);
  const fa_test::Outputs first = cuda_forward(p, inputs);
  const fa_test::Outputs again = cuda_forward(p, inputs);
  EXPECT_EQ(fraction_differing(first.out, again.out), 0.0);
  Problem other_seed = p;
  other_seed.dropout_seed += 1;
  EXPECT_GT(fraction_differing(first.out, cuda_forward(other_seed, inputs).out), 0.5);
  Problem other_high_seed = p;
  other_high_seed.dropout_seed ^= uint64_t{1} << 40;
  EXPECT_GT(fraction_differing(first.out, cuda_forward(other_high_seed, inputs).out), 0.5);
  Problem other_offset = p;
  other_offset.dropout_offset += 4;
  EXPECT_GT(fraction_differing(first.out, cuda_forward(other_offset, inputs).out), 0.5);
}

// The control: the CUDA forward with one seed checked against the reference with another
// must fail, or the suite above could not see a wrong mask.
TEST_P(CudaDropout, TheCheckCatchesAnotherMask) {
  Problem p = dropped({1, 2, 1, 64, 96, 64}, 0.2f);
  fa_test::Runner wrong_seed = cuda_runner();
  const auto forward = wrong_seed.forward;
  wrong_seed.forward = [forward](const flashattn::ForwardArgs& args) {
    flashattn::ForwardArgs copy = args;
    copy.options.dropout_seed += 1;
    return forward(copy);
  };
  EXPECT_FALSE(fa_test::check_forward(p, wrong_seed).passed());
  fa_test::Runner wrong_backward = cuda_runner();
  const auto backward = wrong_backward.backward;
  wrong_backward.backward = [backward](const flashattn::BackwardArgs& args) {
    flashattn::BackwardArgs copy = args;
    copy.options.dropout_offset += 4;
    return backward(copy);
  };
  EXPECT_FALSE(fa_test::check_backward(p, wrong_backward).passed());
}

// The pair read from device memory when the kernels run (AttentionOptions::
// dropout_seed_offset, which a captured CUDA graph replays with): the fields are changed, so
// only the pair in memory can give the reference's mask, forward and backward.
TEST_P(CudaDropout, SeedAndOffsetReadFromDeviceMemory) {
  uint64_t* pair = nullptr;
  ASSERT_EQ(cudaMalloc(&pair, 2 * sizeof(uint64_t)), cudaSuccess);
  const auto from_memory = [pair](flashattn::AttentionOptions o) {
    const uint64_t host[2] = {o.dropout_seed, o.dropout_offset};
    EXPECT_EQ(cudaMemcpy(pair, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
    o.dropout_seed ^= 1;
    o.dropout_offset += 4;
    o.dropout_seed_offset = pair;
    return o;
  };
  fa_test::Runner runner = cuda_runner();
  const auto forward = runner.forward;
  const auto backward = runner.backward;
  runner.forward = [forward, from_memory](const flashattn::ForwardArgs& args) {
    flashattn::ForwardArgs copy = args;
    copy.options = from_memory(args.options);
    return forward(copy);
  };
  runner.backward = [backward, from_memory](const flashattn::BackwardArgs& args) {
    flashattn::BackwardArgs copy = args;
    copy.options = from_memory(args.options);
    return backward(copy);
  };
  for (int d : {64, 128, 256}) {
    Problem p = dropped({2, 4, 2, 150, 130, d}, 0.2f);
    p.causal = d == 128;
    expect_passes(fa_test::check_backward(p, runner));
  }
  EXPECT_EQ(cudaFree(pair), cudaSuccess);
}

TEST_P(CudaDropout, BackwardHeadDims) {
  for (int d : {32, 64, 96, 128, 256}) {
    for (bool causal : {false, true}) {
      Problem p = dropped({2, 2, 1, 77, 130, d}, 0.17f);
      p.causal = causal;
      expect_backward_passes(p);
    }
  }
  expect_backward_passes(dropped({2, 2, 1, 45, 90, 40}, 0.3f));  // padded
}

TEST_P(CudaDropout, BackwardOddLengthsGqaVarlenAndFeatures) {
  for (auto [sq, sk] : {std::pair{1, 17}, std::pair{127, 127}, std::pair{203, 113},
                        std::pair{113, 203}}) {
    Problem p = dropped({2, 2, 1, sq, sk, 64}, 0.2f);
    p.causal = sq % 2 == 1;
    expect_backward_passes(p);
  }
  for (int nheads_k : {1, 2}) {
    Problem p = dropped({2, 8, nheads_k, 97, 131, 128}, 0.15f);
    p.causal = nheads_k == 1;
    expect_backward_passes(p, /*deterministic=*/nheads_k == 2);
  }
  Problem packed = dropped_varlen(4, 2, 64, {1, 17, 0, 127, 200, 5}, {5, 40, 17, 127, 150, 0}, 0.25f);
  packed.causal = true;
  expect_backward_passes(packed);
  packed.seqused_k = {3, 40, 0, 100, 101, 0};
  packed.causal = false;
  expect_backward_passes(packed);
  // d = 128 (on Hopper the staggered schedule): whole query blocks by TMA, each sequence's
  // partial last one by the producer's cp.async.
  Problem packed_wide =
      dropped_varlen(4, 2, 128, {1, 70, 0, 130, 200, 5}, {5, 90, 17, 127, 150, 0}, 0.2f);
  packed_wide.causal = true;
  expect_backward_passes(packed_wide);
  Problem features = dropped({1, 2, 2, 150, 170, 96}, 0.1f);
  features.window_left = 30;
  features.window_right = 0;
  features.alibi = true;
  features.softcap = 15.f;
  expect_backward_passes(features);
  expect_backward_passes(dropped({1, 2, 1, 140, 100, 256}, 0.9f));
}

// Small problems that scripts/gpu-check also runs under compute-sanitizer (memcheck,
// racecheck): the forward and backward dropout kernels, one tile shape each (on a Hopper GPU
// the Hopper forward and backward; gpu-check's second pass the sm80 ones), the Hopper
// backward's staggered schedule (d = 128: producer warp, TMA and cp.async query blocks, a
// dQ turn each step), and the Hopper forward's widest key block with dropout over several
// blocks.
using CudaDropoutSanitize = CudaTest;

TEST_F(CudaDropoutSanitize, SmallProblems) {
  Problem causal = dense_problem(DType::kBF16, {1, 2, 1, 70, 90, 64}, 11);
  causal.causal = true;
  causal.dropout_p = 0.2f;
  Problem wide = dense_problem(DType::kF16, {1, 1, 1, 33, 70, 256}, 12);
  wide.dropout_p = 0.3f;
  Problem staggered = dense_problem(DType::kBF16, {0, 2, 1, 0, 0, 128}, 14);
  staggered.seqlens_q = {70, 200};
  staggered.seqlens_k = {90, 180};
  staggered.dropout_p = 0.2f;
  for (const Problem& p : {causal, wide, staggered}) {
    expect_passes(fa_test::check_backward(p, cuda_runner()));
  }
}

TEST_F(CudaDropoutSanitize, ForwardWideKeyBlocks) {
  // d = 128 past 2048 keys: the 128 x 176 tile, 13 key blocks.
  Problem p = dense_problem(DType::kBF16, {1, 1, 1, 70, 2100, 128}, 13);
  p.dropout_p = 0.2f;
  expect_passes(fa_test::check_forward(p, cuda_runner()));
}

INSTANTIATE_TEST_SUITE_P(Dtype, CudaDropout, ::testing::Values(DType::kF16, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& param) {
                           return std::string(flashattn::to_string(param.param));
                         });

}  // namespace
}  // namespace fa_cuda_test
