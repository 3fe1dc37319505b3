// NaN and infinity in q, k, v and dout on the host backends (SPEC: a non-finite input
// propagates through the keys a row sees, and nowhere else). The poisoned elements sit in
// tiles that are partly masked, where a tile product meets masked pairs (0 * NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/naive_attention.hpp"
#include "support/nonfinite_check.hpp"
#include "test_cpu_backend_support.hpp"

namespace fa_test {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Problem causal_problem(DType dtype) {
  Problem p;
  p.dtype = dtype;
  p.batch = 2;
  p.nheads = 4;
  p.nheads_k = 2;
  p.seqlen_q = 200;  // two query blocks and two key tiles, the diagonal tiles partly masked
  p.seqlen_k = 200;
  p.head_dim = 40;
  p.causal = true;
  p.seed = 2101;
  return p;
}

Problem window_problem() {
  Problem p = causal_problem(DType::kF32);
  p.causal = false;
  p.window_left = 30;
  p.window_right = 10;
  p.seqlen_q = 150;  // bottom-right aligned: row i sees keys i + 50 - 30 .. i + 50 + 10
  return p;
}

KVCacheProblem decode_problem(int page_size) {
  KVCacheProblem p;
  p.dtype = DType::kF32;
  p.batch = 2;
  p.nheads = 4;
  p.nheads_k = 2;
  p.seqlen_q = 4;
  p.head_dim = 64;
  p.seqlen_cache = 320;
  p.cache_seqlens = {300, 250};
  p.page_size = page_size;
  p.causal = true;  // query row i sees cache positions <= cache_seqlens - 4 + i
  p.seed = 2102;
  return p;
}

// The example of the issue: one head of 8 keys, a NaN in the last value: only the last
// row sees it.
Problem issue_example() {
  Problem p;
  p.dtype = DType::kF32;
  p.batch = 1;
  p.nheads = 1;
  p.nheads_k = 1;
  p.seqlen_q = 8;
  p.seqlen_k = 8;
  p.head_dim = 16;
  p.causal = true;
  p.seed = 2103;
  return p;
}

using CpuNonfinite = CpuBackend;

TEST_P(CpuNonfinite, ValueOnlyReachesRowsThatSeeIt) {
  expect_forward_contained(issue_example(), {Poisoned::kV, 0, 7, 0, 0, kNan}, cpu(),
                           Containment::kRows);
  for (float value : {kNan, kInf, -kInf}) {
    SCOPED_TRACE(value);
    expect_forward_contained(causal_problem(DType::kF32), {Poisoned::kV, 1, 150, 1, 3, value},
                             cpu(), Containment::kRows);
  }
  expect_forward_contained(causal_problem(DType::kBF16), {Poisoned::kV, 0, 120, 0, 7, kNan},
                           cpu(), Containment::kRows);
  expect_forward_contained(window_problem(), {Poisoned::kV, 1, 100, 0, 0, kNan}, cpu(),
                           Containment::kRows);
}

TEST_P(CpuNonfinite, KeyAndQueryOnlyReachRowsThatSeeThem) {
  expect_forward_contained(causal_problem(DType::kF32), {Poisoned::kK, 0, 150, 1, 5, kNan},
                           cpu(), Containment::kRows);
  expect_forward_contained(window_problem(), {Poisoned::kK, 0, 90, 1, 0, kNan}, cpu(),
                           Containment::kRows);
  expect_forward_contained(causal_problem(DType::kF32), {Poisoned::kQ, 1, 130, 2, 0, kNan},
                           cpu(), Containment::kRows);
}

TEST_P(CpuNonfinite, GradientsOnlyReachPairsThatSeeEachOther) {
  for (Poisoned tensor : {Poisoned::kQ, Poisoned::kK, Poisoned::kV, Poisoned::kDout}) {
    SCOPED_TRACE(static_cast<int>(tensor));
    const int head = tensor == Poisoned::kQ || tensor == Poisoned::kDout ? 3 : 1;
    expect_backward_contained(causal_problem(DType::kF32), {tensor, 1, 150, head, 2, kNan},
                              cpu(), Containment::kRows);
    expect_backward_contained(window_problem(), {tensor, 0, 100, head, 0, kNan}, cpu(),
                              Containment::kRows);
  }
  // An infinity in q or k can make a row's lse +inf or NaN depending on the order of the
  // arithmetic, and the backward follows from it; one in v propagates the same way anywhere.
  expect_backward_contained(window_problem(), {Poisoned::kV, 0, 100, 1, 0, kInf}, cpu(),
                            Containment::kRows);
  expect_backward_contained(issue_example(), {Poisoned::kV, 0, 7, 0, 0, kNan}, cpu(),
                            Containment::kRows);
}

// Packed sequences whose last keys are past seqused_k, no mask: the key blocks are fully
// visible (bf16: the fused products, whose output rows are padded past the live keys). A NaN
// query reaches the dK and dV of the keys its sequence attends, not those of the keys past
// seqused_k (gradient 0) nor another sequence's.
TEST_P(CpuNonfinite, QueryDoesNotReachKeysPastSeqused) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(static_cast<int>(dtype));
    Problem p;
    p.dtype = dtype;
    p.nheads = 4;
    p.nheads_k = 2;
    p.head_dim = 72;
    p.seqlens_q = {70, 40};
    p.seqlens_k = {6, 36};
    p.seqused_k = {5, 16};
    p.seed = 2104;
    expect_backward_contained(p, {Poisoned::kQ, 0, 33, 3, 1, kNan}, cpu(), Containment::kRows);
    expect_backward_contained(p, {Poisoned::kQ, 1, 7, 0, 70, kNan}, cpu(), Containment::kRows);
  }
}

TEST_P(CpuNonfinite, CacheValueOnlyReachesRowsThatSeeIt) {
  for (int page_size : {0, 16}) {
    SCOPED_TRACE(page_size);
    // Batch entry 0: rows 2 and 3 see position 298, rows 0 and 1 do not.
    expect_kvcache_contained(decode_problem(page_size), {Poisoned::kV, 0, 298, 1, 4, kNan}, cpu(),
                             Containment::kRows);
    expect_kvcache_contained(decode_problem(page_size), {Poisoned::kK, 0, 298, 0, 4, kNan}, cpu(),
                             Containment::kRows);
  }
  KVCacheProblem windowed = decode_problem(0);
  windowed.causal = false;
  windowed.window_left = 20;
  windowed.window_right = 0;
  expect_kvcache_contained(windowed, {Poisoned::kV, 1, 230, 0, 0, kInf}, cpu(),
                           Containment::kRows);
}

FA_INSTANTIATE_PER_ISA(CpuNonfinite);

// The reference defines the contract the others are held to: with a NaN in v[7] of the
// issue's example, exactly row 7 is NaN.
TEST(ReferenceNonfinite, OnlyTheRowThatSeesTheValue) {
  const Problem p = issue_example();
  Inputs in = make_inputs(p);
  in.v.set(7 * p.head_dim, kNan);
  Outputs out = make_outputs(p);
  ASSERT_TRUE(flashattn::forward(forward_args(p, in, &out), {flashattn::Backend::kReference}).ok());
  const Rows rows = head_rows(out.out, 0, 0, 0, p.seqlen_q);
  for (int i = 0; i < p.seqlen_q; ++i) {
    EXPECT_EQ(std::isnan(rows[i][0]), i == 7) << "row " << i;
    for (int c = 1; c < p.head_dim; ++c) EXPECT_TRUE(std::isfinite(rows[i][c])) << "row " << i;
  }
}

}  // namespace
}  // namespace fa_test
