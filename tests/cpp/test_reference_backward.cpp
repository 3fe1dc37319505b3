// The reference backward against central finite differences of its own forward (in
// fp32 storage, fp64 arithmetic) and against identities between problems.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "flashattn/flashattn.hpp"
#include "support/naive_attention.hpp"
#include "support/reference_problem.hpp"

namespace fa_test {
namespace {

using flashattn::Backend;
using flashattn::Status;

constexpr flashattn::Launch kReference{Backend::kReference};

struct Gradients {
  Inputs in;
  Outputs out;  // out, lse and dq, dk, dv
};

Gradients run_reference(const Problem& p) {
  Gradients g{make_inputs(p), make_outputs(p)};
  Status status = flashattn::forward(forward_args(p, g.in, &g.out), kReference);
  EXPECT_TRUE(status.ok()) << status.message();
  status = flashattn::backward(backward_args(p, g.in, &g.out), kReference);
  EXPECT_TRUE(status.ok()) << status.message();
  return g;
}

// L = sum(out * dout) for the current inputs.
double loss(const Problem& p, const Inputs& in, Outputs* scratch) {
  EXPECT_TRUE(flashattn::forward(forward_args(p, in, scratch), kReference).ok());
  double sum = 0.0;
  for (int64_t n = 0; n < scratch->out.numel(); ++n) {
    sum += double(scratch->out.get(n)) * in.dout.get(n);
  }
  return sum;
}

// Every element of dq, dk, dv against (L(x + h) - L(x - h)) / 2h.
void expect_gradients_match_finite_differences(const Problem& p) {
  ASSERT_EQ(p.dtype, DType::kF32);
  Gradients g = run_reference(p);
  Outputs scratch = make_outputs(p);
  // Large enough that the fp32 rounding of out stays far below the signal, small enough
  // that the O(h^2) truncation does too.
  const float step = 1e-2f;
  const struct {
    const char* name;
    HostTensor* input;
    const HostTensor* gradient;
  } pairs[] = {{"dq", &g.in.q, &g.out.dq}, {"dk", &g.in.k, &g.out.dk}, {"dv", &g.in.v, &g.out.dv}};
  for (const auto& pair : pairs) {
    for (int64_t n = 0; n < pair.input->numel(); ++n) {
      const float x = pair.input->get(n);
      const float up = x + step, down = x - step;
      pair.input->set(n, up);
      const double loss_up = loss(p, g.in, &scratch);
      pair.input->set(n, down);
      const double loss_down = loss(p, g.in, &scratch);
      pair.input->set(n, x);
      const double numeric = (loss_up - loss_down) / (double(up) - double(down));
      const double analytic = pair.gradient->get(n);
      EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-3 * std::fabs(numeric))
          << pair.name << " element " << n << " of " << p.describe();
    }
    EXPECT_GT(max_abs(*pair.gradient), 0.05) << pair.name << " is suspiciously small";
  }
}

Problem small_problem(uint32_t seed) {
  Problem p;
  p.dtype = DType::kF32;
  p.batch = 2;
  p.nheads = 4;
  p.nheads_k = 2;
  p.head_dim = 8;
  p.seed = seed;
  return p;
}

TEST(ReferenceBackward, FiniteDifferencesWithCausalSoftcapAlibiGqa) {
  for (auto [sq, sk] : {std::pair{6, 9}, std::pair{9, 5}}) {  // the second masks rows 0..3
    Problem p = small_problem(sq * 100 + sk);
    p.seqlen_q = sq;
    p.seqlen_k = sk;
    p.causal = true;
    p.softcap = 1.5f;
    p.alibi = true;
    p.input_scale = 1.5f;
    expect_gradients_match_finite_differences(p);
  }
}

TEST(ReferenceBackward, FiniteDifferencesWithDropoutVarlenWindow) {
  Problem p = small_problem(202);
  p.seqlens_q = {3, 6, 2};
  p.seqlens_k = {5, 4, 3};
  p.seqused_k = {4, 4, 0};
  p.window_left = 2;
  p.window_right = 1;
  p.dropout_p = 0.3f;
  p.alibi = true;
  p.alibi_per_batch = true;
  expect_gradients_match_finite_differences(p);
}

TEST(ReferenceBackward, MaskedRowsAndUnusedKeysHaveZeroGradients) {
  Problem p = small_problem(210);
  p.seqlens_q = {12, 4};
  p.seqlens_k = {5, 9};
  p.seqused_k = {5, 6};  // keys 6..8 of the second sequence are not part of it
  p.causal = true;       // rows 0..6 of the first sequence see no key
  const Gradients g = run_reference(p);
  for (const HostTensor* t : {&g.out.dq, &g.out.dk, &g.out.dv}) EXPECT_FALSE(has_nan(*t));
  for (int h = 0; h < p.nheads; ++h) {
    const Rows dq = head_rows(g.out.dq, 0, h, 0, 7);
    for (const auto& row : dq) {
      for (double x : row) EXPECT_EQ(x, 0.0);
    }
  }
  for (int hk = 0; hk < p.nheads_k; ++hk) {
    for (const HostTensor* t : {&g.out.dk, &g.out.dv}) {
      const Rows unused = head_rows(*t, 0, hk, 5 + 6, 3);
      for (const auto& row : unused) {
        for (double x : row) EXPECT_EQ(x, 0.0);
      }
      EXPECT_GT(max_abs(*t), 0.0);
    }
  }
}

TEST(ReferenceBackward, GqaGradientsSumOverTheGroup) {
  Problem gqa = small_problem(220);
  gqa.nheads = 6;
  gqa.nheads_k = 2;
  gqa.seqlen_q = 11;
  gqa.seqlen_k = 13;
  gqa.causal = true;
  gqa.softcap = 3.f;
  const Gradients grouped = run_reference(gqa);

  Problem mha = gqa;
  mha.nheads_k = gqa.nheads;
  const int group = gqa.nheads / gqa.nheads_k;
  Inputs in = make_inputs(mha);
  in.q = grouped.in.q;
  in.dout = grouped.in.dout;
  const int64_t rows = gqa.batch * gqa.seqlen_k, d = gqa.head_dim;
  for (int64_t row = 0; row < rows; ++row) {
    for (int h = 0; h < mha.nheads; ++h) {
      for (int64_t c = 0; c < d; ++c) {
        const int64_t from = (row * gqa.nheads_k + h / group) * d + c;
        in.k.set((row * mha.nheads + h) * d + c, grouped.in.k.get(from));
        in.v.set((row * mha.nheads + h) * d + c, grouped.in.v.get(from));
      }
    }
  }
  Outputs out = make_outputs(mha);
  ASSERT_TRUE(flashattn::forward(forward_args(mha, in, &out), kReference).ok());
  ASSERT_TRUE(flashattn::backward(backward_args(mha, in, &out), kReference).ok());

  EXPECT_EQ(max_abs_diff(grouped.out.dq, out.dq), 0.0);
  for (auto [grouped_grad, repeated_grad] :
       {std::pair{&grouped.out.dk, &out.dk}, std::pair{&grouped.out.dv, &out.dv}}) {
    for (int64_t row = 0; row < rows; ++row) {
      for (int hk = 0; hk < gqa.nheads_k; ++hk) {
        for (int64_t c = 0; c < d; ++c) {
          double sum = 0.0;
          for (int h = hk * group; h < (hk + 1) * group; ++h) {
            sum += repeated_grad->get((row * mha.nheads + h) * d + c);
          }
          EXPECT_NEAR(grouped_grad->get((row * gqa.nheads_k + hk) * d + c), sum,
                      1e-6 * std::max(1.0, std::fabs(sum)));
        }
      }
    }
  }
}

TEST(ReferenceBackward, VarlenGradientsEqualPerSequenceDense) {
  Problem varlen = small_problem(230);
  varlen.seqlens_q = {4, 9, 1};
  varlen.seqlens_k = {6, 9, 7};
  varlen.causal = true;
  varlen.alibi = true;
  const Gradients packed = run_reference(varlen);
  for (int b = 0; b < varlen.sequences(); ++b) {
    const Problem dense = dense_sequence(varlen, b);
    const Inputs in = dense_sequence_inputs(varlen, packed.in, b);
    Outputs out = make_outputs(dense);
    ASSERT_TRUE(flashattn::forward(forward_args(dense, in, &out), kReference).ok());
    ASSERT_TRUE(flashattn::backward(backward_args(dense, in, &out), kReference).ok());
    for (int h = 0; h < varlen.nheads; ++h) {
      EXPECT_EQ(head_rows(packed.out.dq, b, h, varlen.q_row0(b), dense.seqlen_q),
                head_rows(out.dq, 0, h, 0, dense.seqlen_q));
    }
    for (int hk = 0; hk < varlen.nheads_k; ++hk) {
      EXPECT_EQ(head_rows(packed.out.dk, b, hk, varlen.k_row0(b), dense.seqlen_k),
                head_rows(out.dk, 0, hk, 0, dense.seqlen_k));
      EXPECT_EQ(head_rows(packed.out.dv, b, hk, varlen.k_row0(b), dense.seqlen_k),
                head_rows(out.dv, 0, hk, 0, dense.seqlen_k));
    }
  }
}

TEST(ReferenceBackward, StridedGradientsEqualContiguous) {
  Problem contiguous = small_problem(240);
  contiguous.dtype = DType::kF16;
  contiguous.seqlen_q = 10;
  contiguous.seqlen_k = 14;
  contiguous.window_left = 3;
  contiguous.window_right = 3;
  Problem strided = contiguous;
  strided.strided = true;
  const Gradients a = run_reference(contiguous);
  const Gradients b = run_reference(strided);
  EXPECT_EQ(max_abs_diff(a.out.dq, b.out.dq), 0.0);
  EXPECT_EQ(max_abs_diff(a.out.dk, b.out.dk), 0.0);
  EXPECT_EQ(max_abs_diff(a.out.dv, b.out.dv), 0.0);
}

TEST(ReferenceBackward, LowPrecisionYardstickStaysCloseToExact) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    Problem p = small_problem(250);
    p.dtype = dtype;
    p.seqlen_q = 19;
    p.seqlen_k = 23;
    p.head_dim = 32;
    p.causal = true;
    p.dropout_p = 0.2f;
    const Runner exact = reference_runner(flashattn::cpu::ReferencePrecision::kExact);
    const Runner lowp = reference_runner(flashattn::cpu::ReferencePrecision::kLowPrecisionNaive);
    const Inputs in = make_inputs(p);
    Outputs a = make_outputs(p), b = make_outputs(p);
    ASSERT_TRUE(exact.forward(forward_args(p, in, &a)).ok());
    ASSERT_TRUE(exact.backward(backward_args(p, in, &a)).ok());
    ASSERT_TRUE(lowp.forward(forward_args(p, in, &b)).ok());
    ASSERT_TRUE(lowp.backward(backward_args(p, in, &b)).ok());
    const double ulp = dtype == DType::kF32 ? 1e-6 : dtype == DType::kF16 ? 1e-3 : 8e-3;
    for (auto [name, x, y] : {std::tuple{"dq", &a.dq, &b.dq},
                              std::tuple{"dk", &a.dk, &b.dk},
                              std::tuple{"dv", &a.dv, &b.dv}}) {
      const double difference = max_abs_diff(*x, *y);
      EXPECT_LT(difference, 20 * ulp * std::max(1.0, max_abs(*x)))
          << name << " " << flashattn::to_string(dtype);
      if (dtype != DType::kF32) {
        EXPECT_GT(difference, 0.0) << name;
      }
    }
  }
}

}  // namespace
}  // namespace fa_test
