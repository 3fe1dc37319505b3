// The reference forward against facts that do not depend on it: a hand-written naive
// attention, and identities between problems (causal = window(-1, 0), GQA = MHA with
// repeated KV heads, varlen = per-sequence dense, strided = contiguous).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "flashattn/flashattn.hpp"
#include "support/naive_attention.hpp"
#include "support/reference_problem.hpp"

namespace fa_test {
namespace {

using flashattn::Backend;
using flashattn::Status;

constexpr double kFp32Tolerance = 2e-6;

struct ReferenceRun {
  Inputs in;
  Outputs out;
};

ReferenceRun run_reference(const Problem& problem) {
  ReferenceRun run{make_inputs(problem), make_outputs(problem)};
  const Status status =
      flashattn::forward(forward_args(problem, run.in, &run.out), {Backend::kReference});
  EXPECT_TRUE(status.ok()) << problem.describe() << ": " << status.message();
  return run;
}

Problem fp32_problem(uint32_t seed) {
  Problem p;
  p.dtype = DType::kF32;
  p.batch = 2;
  p.nheads = 3;
  p.nheads_k = 3;
  p.seqlen_q = 17;
  p.seqlen_k = 23;
  p.head_dim = 16;
  p.seed = seed;
  return p;
}

void expect_matches_naive(const Problem& p, double tolerance = kFp32Tolerance) {
  const ReferenceRun run = run_reference(p);
  EXPECT_TRUE(matches_naive(p, run.in, run.out, tolerance)) << p.describe();
}

TEST(ReferenceForward, PlainMatchesNaive) {
  Problem p = fp32_problem(101);
  p.distribution = Distribution::kUniform;
  expect_matches_naive(p);
}

TEST(ReferenceForward, HalfPrecisionInputsMatchNaiveWithinOneOutputRounding) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    Problem p = fp32_problem(102);
    p.dtype = dtype;
    // The naive sees the same rounded inputs; only the output's rounding separates them.
    expect_matches_naive(p, dtype == DType::kF16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7));
  }
}

TEST(ReferenceForward, CausalMatchesNaiveBothWays) {
  for (auto [sq, sk] : {std::pair{9, 30}, std::pair{30, 9}, std::pair{20, 20}}) {
    Problem p = fp32_problem(103);
    p.seqlen_q = sq;
    p.seqlen_k = sk;
    p.causal = true;
    expect_matches_naive(p);
  }
}

TEST(ReferenceForward, CausalEqualsWindowUnboundedLeftZeroRight) {
  Problem causal = fp32_problem(104);
  causal.seqlen_q = 31;
  causal.seqlen_k = 12;
  causal.causal = true;
  Problem window = causal;
  window.causal = false;
  window.window_left = -1;
  window.window_right = 0;
  const ReferenceRun a = run_reference(causal);
  const ReferenceRun b = run_reference(window);
  EXPECT_EQ(max_abs_diff(a.out.out, b.out.out), 0.0);
  EXPECT_EQ(max_abs_diff(a.out.lse, b.out.lse), 0.0);
}

TEST(ReferenceForward, WindowsMatchNaive) {
  const std::pair<int, int> windows[] = {{3, 5}, {0, 0}, {-1, 2}, {4, -1}, {0, -1}, {40, 40}};
  uint32_t seed = 105;
  for (auto [left, right] : windows) {
    for (auto [sq, sk] : {std::pair{13, 29}, std::pair{29, 13}}) {
      Problem p = fp32_problem(seed++);
      p.seqlen_q = sq;
      p.seqlen_k = sk;
      p.window_left = left;
      p.window_right = right;
      expect_matches_naive(p);
    }
  }
}

TEST(ReferenceForward, AlibiAndSoftcapMatchNaive) {
  uint32_t seed = 120;
  for (bool per_batch : {false, true}) {
    for (bool causal : {false, true}) {
      Problem p = fp32_problem(seed++);
      p.alibi = true;
      p.alibi_per_batch = per_batch;
      p.causal = causal;
      p.softcap = 5.f;
      p.input_scale = 3.f;  // logits far beyond the cap
      expect_matches_naive(p);
      p.softcap = 0.f;
      expect_matches_naive(p);
    }
  }
}

TEST(ReferenceForward, SoftmaxScaleAndExtremeLogits) {
  Problem p = fp32_problem(125);
  p.softmax_scale = 0.7f;
  p.input_scale = 6.f;  // scores in the hundreds: exp overflows without the max shift
  expect_matches_naive(p, 1e-5);
}

TEST(ReferenceForward, SeqlensOneToThousand) {
  uint32_t seed = 130;
  for (int n : {1, 17, 127, 1000}) {
    for (bool causal : {false, true}) {
      Problem p = fp32_problem(seed++);
      p.batch = 1;
      p.nheads = n > 200 ? 1 : 2;
      p.nheads_k = p.nheads;
      p.seqlen_q = p.seqlen_k = n;
      p.head_dim = 8;
      p.causal = causal;
      expect_matches_naive(p);
    }
  }
}

TEST(ReferenceForward, UnequalSeqlensBothWays) {
  uint32_t seed = 140;
  for (auto [sq, sk] : {std::pair{1, 300}, std::pair{300, 1}, std::pair{64, 200}}) {
    for (bool causal : {false, true}) {
      Problem p = fp32_problem(seed++);
      p.nheads = p.nheads_k = 2;
      p.seqlen_q = sq;
      p.seqlen_k = sk;
      p.causal = causal;
      expect_matches_naive(p);
    }
  }
}

TEST(ReferenceForward, ValueHeadDimMayDiffer) {
  Problem p = fp32_problem(145);
  p.head_dim = 24;
  p.head_dim_v = 8;
  Inputs in = make_inputs(p);
  Outputs out = make_outputs(p);
  const Status status = flashattn::forward(forward_args(p, in, &out), {Backend::kReference});
  if (status.code() == flashattn::StatusCode::kUnsupported) {
    GTEST_SKIP() << "the API does not accept d_v != d yet: " << status.message();
  }
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(matches_naive(p, in, out, kFp32Tolerance));
}

TEST(ReferenceForward, GqaEqualsMhaWithRepeatedKvHeads) {
  Problem gqa = fp32_problem(150);
  gqa.nheads = 6;
  gqa.nheads_k = 2;
  gqa.causal = true;
  gqa.alibi = true;
  Problem mha = gqa;
  mha.nheads_k = 6;
  const ReferenceRun grouped = run_reference(gqa);

  Inputs repeated = make_inputs(mha);
  const int group = gqa.nheads / gqa.nheads_k;
  for (HostTensor* t : {&repeated.k, &repeated.v}) {
    const HostTensor& source = t == &repeated.k ? grouped.in.k : grouped.in.v;
    const int64_t d = t->size(3);
    for (int64_t row = 0; row < gqa.batch * gqa.seqlen_k; ++row) {
      for (int h = 0; h < mha.nheads; ++h) {
        for (int64_t c = 0; c < d; ++c) {
          t->set((row * mha.nheads + h) * d + c,
                 source.get((row * gqa.nheads_k + h / group) * d + c));
        }
      }
    }
  }
  repeated.q = grouped.in.q;
  repeated.alibi_slopes = grouped.in.alibi_slopes;
  Outputs outputs = make_outputs(mha);
  ASSERT_TRUE(flashattn::forward(forward_args(mha, repeated, &outputs), {Backend::kReference}).ok());
  EXPECT_EQ(max_abs_diff(grouped.out.out, outputs.out), 0.0);
  EXPECT_EQ(max_abs_diff(grouped.out.lse, outputs.lse), 0.0);
}

TEST(ReferenceForward, VarlenEqualsPerSequenceDense) {
  Problem varlen = fp32_problem(160);
  varlen.seqlens_q = {5, 0, 17, 33, 4};
  varlen.seqlens_k = {7, 3, 17, 1, 0};
  varlen.nheads = 4;
  varlen.nheads_k = 2;
  varlen.causal = true;
  varlen.alibi = true;
  varlen.alibi_per_batch = true;
  for (bool used : {false, true}) {
    varlen.seqused_k = used ? std::vector<int>{4, 3, 0, 1, 0} : std::vector<int>{};
    const ReferenceRun run = run_reference(varlen);
    for (int b = 0; b < varlen.sequences(); ++b) {
      const Problem dense = dense_sequence(varlen, b);
      const Inputs in = dense_sequence_inputs(varlen, run.in, b);
      Outputs out = make_outputs(dense);
      ASSERT_TRUE(flashattn::forward(forward_args(dense, in, &out), {Backend::kReference}).ok());
      for (int h = 0; h < varlen.nheads; ++h) {
        EXPECT_EQ(head_rows(run.out.out, b, h, varlen.q_row0(b), dense.seqlen_q),
                  head_rows(out.out, 0, h, 0, dense.seqlen_q))
            << "sequence " << b << " head " << h;
        for (int i = 0; i < dense.seqlen_q; ++i) {
          EXPECT_EQ(lse_at(varlen, run.out.lse, b, h, i), lse_at(dense, out.lse, 0, h, i));
        }
      }
    }
  }
}

TEST(ReferenceForward, VarlenMatchesNaive) {
  Problem p = fp32_problem(165);
  p.seqlens_q = {1, 40, 9};
  p.seqlens_k = {30, 12, 9};
  p.seqused_k = {17, 12, 2};
  p.alibi = true;
  p.alibi_per_batch = true;
  p.window_left = 5;
  p.window_right = 2;
  expect_matches_naive(p);
}

// Every logical element of `t` set to 0, so what remains differs only in the gaps.
std::vector<uint8_t> gap_bytes(HostTensor t) {
  for (int64_t n = 0; n < t.numel(); ++n) t.set(n, 0.f);
  return t.raw_bytes();
}

TEST(ReferenceForward, StridedViewsEqualContiguousAndLeaveGapsAlone) {
  Problem contiguous = fp32_problem(170);
  contiguous.dtype = DType::kBF16;
  contiguous.nheads_k = 1;
  contiguous.causal = true;
  Problem strided = contiguous;
  strided.strided = true;
  const ReferenceRun a = run_reference(contiguous);
  ReferenceRun b{make_inputs(strided), make_outputs(strided)};
  ASSERT_EQ(max_abs_diff(a.in.q, b.in.q), 0.0);  // same seed, same logical inputs
  const std::vector<uint8_t> gaps_before = gap_bytes(b.out.out);
  ASSERT_TRUE(flashattn::forward(forward_args(strided, b.in, &b.out), {Backend::kReference}).ok());
  EXPECT_EQ(max_abs_diff(a.out.out, b.out.out), 0.0);
  EXPECT_EQ(max_abs_diff(a.out.lse, b.out.lse), 0.0);
  EXPECT_EQ(gaps_before, gap_bytes(b.out.out));
}

TEST(ReferenceForward, FullyMaskedRowsGiveZeroOutAndInfiniteLse) {
  uint32_t seed = 180;
  for (auto [left, right] : {std::pair{-1, 0}, std::pair{1, 1}}) {
    Problem p = fp32_problem(seed++);
    p.seqlen_q = 20;
    p.seqlen_k = 6;  // rows i < 14 - left have no key
    p.window_left = left;
    p.window_right = right;
    const ReferenceRun run = run_reference(p);
    EXPECT_FALSE(has_nan(run.out.out));
    EXPECT_FALSE(has_nan(run.out.lse));
    int masked_rows = 0;
    for (int b = 0; b < p.batch; ++b) {
      for (int h = 0; h < p.nheads; ++h) {
        const Rows out = head_rows(run.out.out, b, h, 0, p.seqlen_q);
        for (int i = 0; i < p.seqlen_q; ++i) {
          const bool masked = i + p.seqlen_k - p.seqlen_q + right < 0;
          const double lse = lse_at(p, run.out.lse, b, h, i);
          EXPECT_EQ(masked, lse == -std::numeric_limits<double>::infinity()) << "row " << i;
          if (!masked) continue;
          ++masked_rows;
          for (double x : out[i]) EXPECT_EQ(x, 0.0);
        }
      }
    }
    EXPECT_GT(masked_rows, 0);
    expect_matches_naive(p);
  }
}

TEST(ReferenceForward, NanInOneQueryRowStaysInThatRow) {
  Problem p = fp32_problem(190);
  p.causal = true;
  p.seqlen_q = p.seqlen_k;
  ReferenceRun clean = run_reference(p);
  Inputs dirty_in = clean.in;
  const int b = 1, row = 4, head = 2;
  dirty_in.q.set(((int64_t(b) * p.seqlen_q + row) * p.nheads + head) * p.head_dim,
                 std::numeric_limits<float>::quiet_NaN());
  Outputs dirty = make_outputs(p);
  ASSERT_TRUE(flashattn::forward(forward_args(p, dirty_in, &dirty), {Backend::kReference}).ok());
  for (int bb = 0; bb < p.batch; ++bb) {
    for (int h = 0; h < p.nheads; ++h) {
      const Rows got = head_rows(dirty.out, bb, h, 0, p.seqlen_q);
      const Rows expected = head_rows(clean.out.out, bb, h, 0, p.seqlen_q);
      for (int i = 0; i < p.seqlen_q; ++i) {
        if (bb == b && h == head && i == row) {
          EXPECT_TRUE(std::isnan(got[i][0]));
        } else {
          EXPECT_EQ(got[i], expected[i]) << "batch " << bb << " head " << h << " row " << i;
        }
      }
    }
  }
}

TEST(ReferenceForward, LowPrecisionYardstickRoundsOnlyWhereKernelsDo) {
  const Runner exact = reference_runner(flashattn::cpu::ReferencePrecision::kExact);
  const Runner lowp = reference_runner(flashattn::cpu::ReferencePrecision::kLowPrecisionNaive);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    Problem p = fp32_problem(195);
    p.dtype = dtype;
    p.causal = true;
    const Inputs in = make_inputs(p);
    Outputs a = make_outputs(p), b = make_outputs(p);
    ASSERT_TRUE(exact.forward(forward_args(p, in, &a)).ok());
    ASSERT_TRUE(lowp.forward(forward_args(p, in, &b)).ok());
    const double difference = max_abs_diff(a.out, b.out);
    if (dtype == DType::kF32) {
      EXPECT_LT(difference, 1e-5);
    } else {
      // Rounding P to the dtype moves the output, but only by a few of its ulps.
      EXPECT_GT(difference, 0.0) << flashattn::to_string(dtype);
      EXPECT_LT(difference, dtype == DType::kF16 ? 4e-3 : 3e-2) << flashattn::to_string(dtype);
    }
    EXPECT_LT(max_abs_diff(a.lse, b.lse), 1e-5);
  }
}

}  // namespace
}  // namespace fa_test
