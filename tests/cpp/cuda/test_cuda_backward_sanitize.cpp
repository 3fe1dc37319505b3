// Small CUDA backward problems, one per kernel path (every head dim's tile, masked and
// unmasked blocks, GQA, varlen, both dQ accumulation modes), that scripts/gpu-check also runs
// under compute-sanitizer (memcheck, racecheck) by the name CudaBackwardSanitize.*: keep them
// small, the sanitizer slows the kernels down by orders of magnitude.
#include "cuda_test_support.hpp"
#include "support/reference_problem.hpp"

namespace fa_cuda_test {
namespace {

using fa_test::Problem;
using flashattn::DType;

using CudaBackwardSanitize = CudaTest;

TEST_F(CudaBackwardSanitize, SmallProblems) {
  Problem causal = dense_problem(DType::kBF16, {1, 2, 1, 150, 150, 64}, 11);
  causal.causal = true;
  Problem more_keys = dense_problem(DType::kF16, {1, 1, 1, 33, 200, 128}, 12);
  Problem fewer_keys = dense_problem(DType::kBF16, {1, 1, 1, 100, 40, 256}, 13);
  fewer_keys.causal = true;
  Problem gqa_small_dim = dense_problem(DType::kF16, {1, 4, 2, 70, 90, 32}, 14);
  Problem windowed_varlen = dense_problem(DType::kBF16, {0, 2, 2, 0, 0, 96}, 15);
  windowed_varlen.seqlens_q = {5, 130};
  windowed_varlen.seqlens_k = {9, 140};
  windowed_varlen.causal = true;
  windowed_varlen.window_left = 20;
  // Deterministic on Hopper, tiles from tickets and the rotated order: 2 key blocks of 128;
  // 3 over 4 query blocks, both halves of the dQ writer (d = 128).
  Problem rotated = dense_problem(DType::kF16, {1, 2, 1, 100, 200, 128}, 16);
  Problem writer_halves = dense_problem(DType::kF16, {1, 2, 1, 200, 300, 128}, 18);
  // Deterministic on Hopper, two dQ accumulator slices: 3 key blocks of 64 (d = 256).
  Problem sliced = dense_problem(DType::kBF16, {1, 2, 1, 130, 140, 256}, 17);
  // Deterministic, causal, 33 key blocks of 64 (d = 256) in two turn groups, one query block
  // that sees them all.
  Problem turn_groups = dense_problem(DType::kBF16, {1, 1, 1, 64, 2100, 256}, 19);
  turn_groups.causal = true;
  // GQA on few blocks (not deterministic): 7 query heads split among blocks, fp32 partials.
  Problem gqa_split = dense_problem(DType::kBF16, {1, 14, 2, 150, 260, 64}, 20);
  gqa_split.causal = true;
  // Hopper: Q and dO by TMA in whole blocks, by cp.async in each sequence's partial last one
  // (block_m 64 at d = 128, 128 at d = 64).
  Problem tma_varlen = dense_problem(DType::kBF16, {0, 2, 1, 0, 0, 128}, 21);
  tma_varlen.seqlens_q = {70, 200};
  tma_varlen.seqlens_k = {90, 180};
  Problem tma_varlen_wide = dense_problem(DType::kF16, {0, 2, 2, 0, 0, 64}, 22);
  tma_varlen_wide.seqlens_q = {130, 256};
  tma_varlen_wide.seqlens_k = {140, 250};
  tma_varlen_wide.causal = true;
  for (bool deterministic : {false, true}) {
    fa_test::Runner runner = cuda_runner();
    if (deterministic) {
      const auto backward = runner.backward;
      runner.backward = [backward](const flashattn::BackwardArgs& args) {
        flashattn::BackwardArgs copy = args;
        copy.deterministic = true;
        return backward(copy);
      };
    }
    for (const Problem& p :
         {causal, more_keys, fewer_keys, gqa_small_dim, windowed_varlen, rotated, sliced,
          writer_halves, turn_groups, gqa_split, tma_varlen, tma_varlen_wide}) {
      expect_passes(fa_test::check_backward(p, runner));
    }
  }
}

}  // namespace
}  // namespace fa_cuda_test
