// A deliberately plain softmax attention for one (batch, head), written from docs/contract.md with
// none of the library's code (no core::visible_keys, nothing from the reference), so the
// reference can be checked against arithmetic that does not share its mistakes.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "support/host_tensor.hpp"
#include "support/reference_problem.hpp"

namespace fa_test {

using Rows = std::vector<std::vector<double>>;

struct NaiveOptions {
  double scale = 0.0;  // 0: 1/sqrt(d)
  int window_left = -1;   // -1: unbounded
  int window_right = -1;  // causal: 0
  double softcap = 0.0;
  double alibi_slope = 0.0;
};

struct NaiveResult {
  Rows out;                 // [sq][dv]
  std::vector<double> lse;  // [sq]; -inf for a row that sees no key
  Rows p;                   // [sq][sk]; 0 where masked
};

// `value_dim` sizes the output rows even when there is no key (and so no row of v).
NaiveResult naive_attention(const Rows& q, const Rows& k, const Rows& v, int value_dim,
                            const NaiveOptions& options);

// Rows row0 .. row0+rows-1 of head `head`: of batch entry `batch` in a [b, s, h, d]
// tensor, or of a packed [total, h, d] tensor (batch ignored). Read in logical order.
Rows head_rows(const HostTensor& t, int batch, int head, int row0, int rows);

// The lse of row `row` of sequence b, head h, in a dense [b, h, sq] or varlen [h, total_q]
// lse tensor.
double lse_at(const Problem& problem, const HostTensor& lse, int b, int head, int row);

// Every (sequence, head) of `outputs` (out, lse) against naive_attention on the problem's
// inputs (no dropout): |x - naive| <= tolerance * max(1, |naive|) elementwise, masked
// rows included (out 0, lse -inf).
::testing::AssertionResult matches_naive(const Problem& problem, const Inputs& inputs,
                                         const Outputs& outputs, double tolerance);

}  // namespace fa_test
