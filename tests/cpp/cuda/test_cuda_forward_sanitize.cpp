// Small CUDA forward problems, one per kernel path, that scripts/gpu-check also runs under
// compute-sanitizer (memcheck, racecheck) by the name CudaForwardSanitize.*: keep them
// small, the sanitizer slows the kernels down by orders of magnitude.
#include <cstdint>

#include "cuda_test_support.hpp"
#include "layout_runner.hpp"
#include "support/reference_problem.hpp"

namespace fa_cuda_test {
namespace {

using fa_test::Problem;
using flashattn::DType;

using CudaForwardSanitize = CudaTest;

TEST_F(CudaForwardSanitize, SmallProblems) {
  Problem causal = dense_problem(DType::kBF16, {1, 2, 1, 70, 70, 64}, 1);
  causal.causal = true;
  Problem more_keys = dense_problem(DType::kF16, {1, 1, 1, 33, 130, 128}, 2);
  Problem fewer_keys = dense_problem(DType::kBF16, {1, 1, 1, 130, 33, 256}, 3);
  fewer_keys.causal = true;
  Problem padded = dense_problem(DType::kBF16, {1, 1, 1, 20, 20, 40}, 4);
  Problem strided = dense_problem(DType::kF16, {1, 2, 1, 40, 50, 64}, 5);
  strided.strided = true;
  Problem windowed_varlen = dense_problem(DType::kBF16, {0, 2, 2, 0, 0, 96}, 6);
  windowed_varlen.seqlens_q = {5, 70};
  windowed_varlen.seqlens_k = {9, 80};
  windowed_varlen.causal = true;
  windowed_varlen.window_left = 10;
  for (const Problem& p : {causal, more_keys, fewer_keys, padded, strided, windowed_varlen}) {
    expect_passes(fa_test::check_forward(p, cuda_runner()));
  }
}

TEST_F(CudaForwardSanitize, OtherLayouts) {
  uint32_t seed = 7;
  for (Layout layout : {Layout::kHeadMajor, Layout::kMisalignedPointer}) {
    const Problem p = dense_problem(DType::kBF16, {1, 2, 1, 40, 70, 64}, seed++);
    expect_passes(fa_test::check_forward(p, with_layout(cuda_runner(), layout)));
  }
}

}  // namespace
}  // namespace fa_cuda_test
