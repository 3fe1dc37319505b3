// Checks of the CUDA forward that the shared tolerance check (fa_test::check_forward) does
// not make, each on a fresh problem through cuda_runner():
// - rows without a visible key give exactly out = 0 and lse = -inf (docs/contract.md), not merely
//   something within the tolerance of 0;
// - a strided out keeps the bytes of its gaps;
// - a call without lse still computes out;
// - keys past seqused_k take no part, even when they hold NaN or Inf (the kernels load whole
//   key blocks; SPEC.md: a key a row cannot see must not reach it).
#pragma once

#include "support/reference_problem.hpp"

namespace fa_cuda_test {

void expect_empty_rows_exact(const fa_test::Problem& problem);
void expect_gaps_untouched(const fa_test::Problem& problem);
void expect_passes_without_lse(const fa_test::Problem& problem);
void expect_unused_keys_ignored(const fa_test::Problem& varlen_with_seqused_k);

}  // namespace fa_cuda_test
