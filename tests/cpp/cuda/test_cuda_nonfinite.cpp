// NaN and infinity in q, k, v and dout on the CUDA backend: what docs/contract.md states
// for the kernels. A non-finite value reaches every row that sees it, may reach other rows
// of its own (batch, head) through a tile product (0 * NaN), and never another head or
// batch entry; nothing hangs. (The host backends keep it to the rows that see it:
// tests/cpp/test_nonfinite_inputs.cpp.)
#include <gtest/gtest.h>

#include <limits>

#include "cuda_test_support.hpp"
#include "support/nonfinite_check.hpp"

namespace fa_cuda_test {
namespace {

using fa_test::Containment;
using fa_test::Poisoned;
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

fa_test::Problem causal(flashattn::DType dtype, int head_dim) {
  fa_test::Problem p = dense_problem(dtype, {2, 4, 2, 200, 200, head_dim}, 2121);
  p.causal = true;
  return p;
}

using CudaNonfinite = CudaTestWithParam<flashattn::DType>;

TEST_P(CudaNonfinite, ForwardStaysInItsHead) {
  for (int head_dim : {64, 128}) {
    for (float value : {kNan, kInf}) {
      fa_test::expect_forward_contained(causal(GetParam(), head_dim),
                                        {Poisoned::kV, 1, 150, 1, 3, value}, cuda_runner(),
                                        Containment::kHeads);
    }
    fa_test::expect_forward_contained(causal(GetParam(), head_dim),
                                      {Poisoned::kK, 0, 150, 1, 5, kNan}, cuda_runner(),
                                      Containment::kHeads);
    fa_test::expect_forward_contained(causal(GetParam(), head_dim),
                                      {Poisoned::kQ, 1, 130, 2, 0, kNan}, cuda_runner(),
                                      Containment::kHeads);
  }
}

// Deterministic mode: the clean and the poisoned run are compared bit for bit, which the
// default mode's dQ atomics would not allow.
TEST_P(CudaNonfinite, BackwardStaysInItsHead) {
  for (Poisoned tensor : {Poisoned::kQ, Poisoned::kK, Poisoned::kV, Poisoned::kDout}) {
    const int head = tensor == Poisoned::kQ || tensor == Poisoned::kDout ? 3 : 1;
    for (int head_dim : {64, 128}) {
      fa_test::expect_backward_contained(causal(GetParam(), head_dim),
                                         {tensor, 1, 150, head, 2, kNan}, deterministic_runner(),
                                         Containment::kHeads);
    }
  }
}

// The default mode (dQ added with atomics, so the runs are compared for finiteness, not bit
// for bit): a NaN key of batch entry 0 must not reach entry 1's dQ, although the last query
// block of entry 0 (200 rows) extends past its end into the rows where entry 1's dQ lies.
TEST_P(CudaNonfinite, BackwardDefaultModeStaysInItsBatchEntry) {
  for (int head_dim : {64, 128}) {
    fa_test::expect_backward_contained(causal(GetParam(), head_dim),
                                       {Poisoned::kK, 0, 10, 1, 2, kNan}, cuda_runner(),
                                       Containment::kFinite);
  }
}

TEST_P(CudaNonfinite, KVCacheStaysInItsHead) {
  fa_test::KVCacheProblem p;
  p.dtype = GetParam();
  p.batch = 2;
  p.nheads = 4;
  p.nheads_k = 2;
  p.seqlen_q = 4;
  p.head_dim = 128;
  p.seqlen_cache = 320;
  p.cache_seqlens = {300, 250};
  p.causal = true;
  p.seed = 2122;
  for (int splits : {1, 3}) {
    p.num_splits = splits;
    fa_test::expect_kvcache_contained(p, {Poisoned::kV, 0, 298, 1, 4, kNan}, cuda_runner(),
                                      Containment::kHeads);
    fa_test::expect_kvcache_contained(p, {Poisoned::kQ, 1, 2, 3, 0, kNan}, cuda_runner(),
                                      Containment::kHeads);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaNonfinite,
                         ::testing::Values(flashattn::DType::kF16, flashattn::DType::kBF16),
                         [](const auto& info) { return flashattn::to_string(info.param); });

}  // namespace
}  // namespace fa_cuda_test
