// Small CUDA forward problems, one per kernel path, that scripts/gpu-check also runs under
// compute-sanitizer (memcheck, racecheck, synccheck) by the name CudaForwardSanitize.*: keep them
// small, the sanitizer slows the kernels down by orders of magnitude.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_limits.hpp"
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
  // The decode route: the KV-cache kernel's split decode tile and the combine.
  Problem decode_route = dense_problem(DType::kBF16, {2, 8, 2, 1, 1500, 128}, 18);
  decode_route.causal = true;
  for (const Problem& p :
       {causal, more_keys, fewer_keys, padded, strided, windowed_varlen, decode_route}) {
    expect_passes(fa_test::check_forward(p, cuda_runner()));
  }
}

// The Hopper kernel's paths (on other GPUs these run the sm80 kernel): blocks taking several
// tiles (more tiles than SMs), the paired causal order, the wide and narrow tiles (d = 128 and
// 256; d = 64's narrow one, three blocks per SM, in its many-tile causal call), O stored from
// registers (d = 256), V rows past seqused_k zeroed, GQA heads packed into one tile.
TEST_F(CudaForwardSanitize, HopperPaths) {
  Problem many_tiles = dense_problem(DType::kBF16, {1, 140, 20, 10, 300, 64}, 11);
  Problem paired = dense_problem(DType::kF16, {1, 70, 10, 300, 300, 128}, 12);
  paired.causal = true;
  Problem wide = dense_problem(DType::kBF16, {1, 2, 2, 40, 2100, 128}, 13);
  Problem packed_gqa = dense_problem(DType::kF16, {2, 16, 2, 24, 300, 128}, 16);
  packed_gqa.causal = true;
  packed_gqa.alibi = true;
  Problem packed_varlen = dense_problem(DType::kBF16, {0, 8, 2, 0, 0, 64}, 17);
  packed_varlen.seqlens_q = {9, 40};
  packed_varlen.seqlens_k = {100, 70};
  Problem o_from_registers = dense_problem(DType::kBF16, {1, 140, 4, 5, 90, 256}, 14);
  // d = 256 causal on at most 1024 keys: the narrow 64-key tile.
  Problem narrow_d256 = dense_problem(DType::kBF16, {1, 8, 2, 600, 600, 256}, 18);
  narrow_d256.causal = true;
  Problem narrow_d64 = dense_problem(DType::kBF16, {1, 110, 10, 250, 250, 64}, 19);
  narrow_d64.causal = true;
  Problem unused_keys = dense_problem(DType::kF16, {0, 2, 1, 0, 0, 128}, 15);
  unused_keys.seqlens_q = {30, 70};
  unused_keys.seqlens_k = {100, 200};
  unused_keys.seqused_k = {60, 130};
  for (const Problem& p :
       {many_tiles, paired, wide, o_from_registers, narrow_d256, narrow_d64, unused_keys,
        packed_gqa, packed_varlen}) {
    expect_passes(fa_test::check_forward(p, cuda_runner()));
  }
}

// The FP8 kernel (Hopper; elsewhere refused, which the check reports as a failure, so it runs
// only where sm_90a code runs): V's transpose in the producer warpgroup and its ring, a tail
// of keys zeroed, O from registers (d = 256), several tiles per block.
TEST_F(CudaForwardSanitize, Fp8Paths) {
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  flashattn::cuda::DeviceLimits limits;
  ASSERT_TRUE(flashattn::cuda::device_limits(device, &limits).ok());
  if (!limits.sm90a) GTEST_SKIP() << "the FP8 forward runs on Hopper (sm_90a) only";
  Problem causal = dense_problem(DType::kF8E4M3, {1, 2, 1, 200, 333, 128}, 21);
  causal.causal = true;
  Problem varlen = dense_problem(DType::kF8E4M3, {0, 4, 2, 0, 0, 64}, 22);
  varlen.seqlens_q = {9, 150};
  varlen.seqlens_k = {140, 70};
  varlen.out_dtype = DType::kF16;
  Problem from_registers = dense_problem(DType::kF8E4M3, {1, 140, 4, 5, 300, 256}, 23);
  // d = 64: the varlen call above runs the 192-row tile, a short causal one the 128-row tile;
  // d = 128: the causal call above the 128-key blocks, one with more keys the 192-key ones.
  Problem narrow = dense_problem(DType::kF8E4M3, {1, 2, 2, 150, 200, 64}, 24);
  narrow.causal = true;
  Problem long_keys = dense_problem(DType::kF8E4M3, {1, 2, 1, 70, 2100, 128}, 25);
  for (const Problem& p : {causal, varlen, from_registers, narrow, long_keys}) {
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
