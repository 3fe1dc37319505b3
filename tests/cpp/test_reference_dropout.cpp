// Dropout in the reference: the surviving elements are exactly those for which
// core::dropout_keep(seed, offset, b * nheads + h, row, col) holds, with row and col the
// positions within the sequence, and survivors are scaled by 1 / (1 - p). With V = I the
// output row i is the dropped-out probability row p_i * z_i itself, which exposes the mask.
#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.hpp"
#include "flashattn/flashattn.hpp"
#include "support/naive_attention.hpp"
#include "support/reference_problem.hpp"

namespace fa_test {
namespace {

using flashattn::Backend;

constexpr flashattn::Launch kReference{Backend::kReference};

Problem dropout_problem(uint32_t seed) {
  Problem p;
  p.dtype = DType::kF32;
  p.batch = 2;
  p.nheads = 4;
  p.nheads_k = 2;
  p.seqlen_q = 40;
  p.seqlen_k = 64;
  p.head_dim = 64;  // = seqlen_k, so V can be the identity
  p.dropout_p = 0.25f;
  p.dropout_seed = 0x0123456789ABCDEFull;
  p.dropout_offset = 0x100000007ull;  // both 32-bit halves of the offset matter
  p.seed = seed;
  return p;
}

// Row j of every sequence's V becomes e_j.
void make_values_identity(const Problem& p, Inputs* in) {
  for (int b = 0; b < p.sequences(); ++b) {
    for (int j = 0; j < p.keys_of(b); ++j) {
      const int64_t row = p.varlen() ? p.k_row0(b) + j : int64_t(b) * p.seqlen_k + j;
      for (int h = 0; h < p.nheads_k; ++h) {
        for (int c = 0; c < p.dim_v(); ++c) {
          in->v.set((row * p.nheads_k + h) * p.dim_v() + c, c == j ? 1.f : 0.f);
        }
      }
    }
  }
}

struct MaskCount {
  int64_t visible = 0;
  int64_t kept = 0;
};

// Every output element against p_ij * z_ij recomputed here from the naive p and Philox.
MaskCount expect_output_is_dropped_probabilities(const Problem& p) {
  Inputs in = make_inputs(p);
  make_values_identity(p, &in);
  Outputs out = make_outputs(p);
  EXPECT_TRUE(flashattn::forward(forward_args(p, in, &out), kReference).ok());
  const uint32_t threshold = flashattn::core::dropout_threshold(p.dropout_p);
  const double rescale = 1.0 / (1.0 - double(p.dropout_p));
  MaskCount count;
  for (int b = 0; b < p.sequences(); ++b) {
    const int q0 = p.q_row0(b), k0 = p.k_row0(b);
    const int sq = p.seqlen_q_of(b), sk = p.keys_of(b);
    for (int h = 0; h < p.nheads; ++h) {
      const int hk = h / (p.nheads / p.nheads_k);
      NaiveOptions options;
      options.window_right = p.causal ? 0 : -1;
      const NaiveResult naive = naive_attention(
          head_rows(in.q, b, h, q0, sq), head_rows(in.k, b, hk, k0, sk),
          head_rows(in.v, b, hk, k0, sk), p.dim_v(), options);
      const Rows got = head_rows(out.out, b, h, q0, sq);
      const uint32_t bh = static_cast<uint32_t>(b * p.nheads + h);
      for (int i = 0; i < sq; ++i) {
        for (int j = 0; j < sk; ++j) {
          const bool keep =
              flashattn::core::dropout_keep(p.dropout_seed, p.dropout_offset, bh, i, j, threshold);
          const double expected = naive.p[i][j] * (keep ? rescale : 0.0);
          EXPECT_NEAR(got[i][j], expected, 1e-6) << "sequence " << b << " head " << h
                                                 << " row " << i << " col " << j;
          if (naive.p[i][j] > 0) {
            ++count.visible;
            count.kept += keep;
          }
        }
      }
    }
  }
  return count;
}

TEST(ReferenceDropout, KeepMaskIsPhiloxOfPositionsWithinTheSequence) {
  Problem dense = dropout_problem(301);
  dense.causal = true;
  expect_output_is_dropped_probabilities(dense);

  Problem varlen = dropout_problem(302);
  varlen.seqlens_q = {10, 30, 7};
  varlen.seqlens_k = {64, 20, 33};
  expect_output_is_dropped_probabilities(varlen);
}

TEST(ReferenceDropout, KeptFractionIsOneMinusP) {
  for (float rate : {0.1f, 0.5f, 0.9f}) {
    Problem p = dropout_problem(310);
    p.seqlen_q = 64;
    p.dropout_p = rate;
    const MaskCount count = expect_output_is_dropped_probabilities(p);
    ASSERT_EQ(count.visible, int64_t(p.batch) * p.nheads * 64 * 64);
    // 32768 Bernoulli draws: the standard deviation of the fraction is below 0.003.
    EXPECT_NEAR(double(count.kept) / count.visible, 1.0 - rate, 0.015) << "p = " << rate;
  }
}

TEST(ReferenceDropout, LseIgnoresDropout) {
  Problem with = dropout_problem(320);
  Problem without = with;
  without.dropout_p = 0.f;
  const Inputs in = make_inputs(with);
  Outputs a = make_outputs(with), b = make_outputs(without);
  ASSERT_TRUE(flashattn::forward(forward_args(with, in, &a), kReference).ok());
  ASSERT_TRUE(flashattn::forward(forward_args(without, in, &b), kReference).ok());
  EXPECT_EQ(max_abs_diff(a.lse, b.lse), 0.0);
  EXPECT_GT(max_abs_diff(a.out, b.out), 0.0);
}

TEST(ReferenceDropout, SameSeedAndOffsetRepeatDifferentOnesDoNot) {
  const Problem base = dropout_problem(330);
  const Inputs in = make_inputs(base);
  const auto run = [&](uint64_t seed, uint64_t offset) {
    Problem p = base;
    p.dropout_seed = seed;
    p.dropout_offset = offset;
    Outputs out = make_outputs(p);
    EXPECT_TRUE(flashattn::forward(forward_args(p, in, &out), kReference).ok());
    return out.out;
  };
  const HostTensor first = run(7, 1000);
  EXPECT_EQ(max_abs_diff(first, run(7, 1000)), 0.0);
  EXPECT_GT(max_abs_diff(first, run(7, 1001)), 0.0);
  EXPECT_GT(max_abs_diff(first, run(7, 1000 + (uint64_t(1) << 32))), 0.0);
  EXPECT_GT(max_abs_diff(first, run(8, 1000)), 0.0);
  EXPECT_GT(max_abs_diff(first, run(7 + (uint64_t(1) << 32), 1000)), 0.0);
}

// p is resolved to 1/256 (8-bit numbers, as FlashAttention-2 draws them): the threshold is
// round(256 p), saturated so that p just below 1 still keeps the value 255.
TEST(ReferenceDropout, ThresholdIsPInUnitsOf256) {
  using flashattn::core::dropout_threshold;
  EXPECT_EQ(dropout_threshold(0.f), 0u);
  EXPECT_EQ(dropout_threshold(0.1f), 26u);   // 25.6
  EXPECT_EQ(dropout_threshold(0.25f), 64u);
  EXPECT_EQ(dropout_threshold(0.5f), 128u);
  EXPECT_EQ(dropout_threshold(0.9f), 230u);  // 230.4
  EXPECT_EQ(dropout_threshold(0.999f), 255u);
}

// The kernels' quad-ordered form of the keep-test (bit 4 w + b: column 16 (col / 16) +
// 8 (b / 2) + 2 w + b % 2) is the keep-test itself, and the keep-test reads byte 2 tile + e of
// word w for column 8 tile + 2 w + e of the group.
TEST(ReferenceDropout, KeepQuadsAreTheKeepTest) {
  const uint32_t threshold = flashattn::core::dropout_threshold(0.3f);
  const uint64_t seed = 0xFEDCBA9876543210ull, offset = 0x300000011ull;
  for (uint32_t bh : {0u, 5u, 1000u}) {
    for (uint32_t row = 0; row < 40; row += 3) {
      for (uint32_t col = 0; col < 64; ++col) {
        const uint32_t bits =
            flashattn::core::dropout_keep_quads(seed, offset, bh, row, col, threshold);
        ASSERT_EQ(bits >> 16, 0u);
        for (uint32_t w = 0; w < 4; ++w) {
          for (uint32_t b = 0; b < 4; ++b) {
            const uint32_t column = col / 16 * 16 + 8 * (b / 2) + 2 * w + b % 2;
            ASSERT_EQ((bits >> (4 * w + b)) & 1u,
                      flashattn::core::dropout_keep(seed, offset, bh, row, column, threshold))
                << "bh " << bh << " row " << row << " col " << col << " w " << w << " b " << b;
          }
        }
        const flashattn::core::PhiloxWords draws =
            flashattn::core::dropout_draws(seed, offset, bh, row, col);
        const uint32_t i = col % 16;
        const uint32_t byte = (draws.w[(i / 2) % 4] >> (8 * (2 * (i / 8) + i % 2))) & 0xFFu;
        ASSERT_EQ(flashattn::core::dropout_value(draws, i), byte);
      }
    }
  }
}

}  // namespace
}  // namespace fa_test
