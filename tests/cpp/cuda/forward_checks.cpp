#include "forward_checks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "device_runner.hpp"
#include "tensor_span.hpp"

namespace fa_cuda_test {
namespace {

using fa_test::Inputs;
using fa_test::Outputs;
using fa_test::Problem;
using flashattn::cpu::ReferencePrecision;

// The row of out (flattened over batch and sequence) and the head of lse element `n`:
// lse is [b, h, sq] dense, [h, total_q] varlen.
struct RowHead {
  int64_t row;
  int64_t head;
};
RowHead row_head_of_lse(const Problem& p, int64_t n) {
  if (p.varlen()) return {n % p.total_q(), n / p.total_q()};
  const int64_t batch = n / (int64_t{p.nheads} * p.seqlen_q);
  return {batch * p.seqlen_q + n % p.seqlen_q, (n / p.seqlen_q) % p.nheads};
}

bool is_minus_inf(float x) { return std::isinf(x) && x < 0; }

// The exact and the low-precision reference's forward of `p` on `inputs`.
::testing::AssertionResult run_references(const Problem& p, const Inputs& inputs, Outputs* exact,
                                          Outputs* lowp) {
  const flashattn::Status referenced = fa_test::reference_runner(ReferencePrecision::kExact)
                                           .forward(fa_test::forward_args(p, inputs, exact));
  const flashattn::Status referenced_lowp =
      fa_test::reference_runner(ReferencePrecision::kLowPrecisionNaive)
          .forward(fa_test::forward_args(p, inputs, lowp));
  if (referenced.ok() && referenced_lowp.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << referenced.message() << referenced_lowp.message();
}

}  // namespace

void expect_empty_rows_exact(const Problem& p) {
  SCOPED_TRACE(p.describe());
  const Inputs inputs = fa_test::make_inputs(p);
  Outputs tested = fa_test::make_outputs(p);
  Outputs exact = fa_test::make_outputs(p);
  const flashattn::Status ran = cuda_runner().forward(fa_test::forward_args(p, inputs, &tested));
  ASSERT_TRUE(ran.ok()) << ran.message();
  const flashattn::Status referenced = fa_test::reference_runner(ReferencePrecision::kExact)
                                           .forward(fa_test::forward_args(p, inputs, &exact));
  ASSERT_TRUE(referenced.ok()) << referenced.message();
  int64_t empty_rows = 0;
  for (int64_t n = 0; n < exact.lse.numel(); ++n) {
    if (!is_minus_inf(exact.lse.get(n))) continue;
    ++empty_rows;
    EXPECT_TRUE(is_minus_inf(tested.lse.get(n))) << "lse[" << n << "] = " << tested.lse.get(n);
    const RowHead at = row_head_of_lse(p, n);
    const int64_t first = (at.row * p.nheads + at.head) * p.dim_v();
    for (int64_t c = 0; c < p.dim_v(); ++c) {
      const float value = tested.out.get(first + c);
      if (value != 0.f) {
        ADD_FAILURE() << "out row " << at.row << " head " << at.head << " has no visible key but "
                      << "out[" << c << "] = " << value;
        break;
      }
    }
  }
  EXPECT_GT(empty_rows, 0) << "the problem has no row without a visible key";
}

void expect_gaps_untouched(const Problem& p) {
  SCOPED_TRACE(p.describe());
  const Inputs inputs = fa_test::make_inputs(p);
  Outputs tested = fa_test::make_outputs(p);
  const std::vector<uint8_t> before = tested.out.raw_bytes();
  const flashattn::Status ran = cuda_runner().forward(fa_test::forward_args(p, inputs, &tested));
  ASSERT_TRUE(ran.ok()) << ran.message();
  const std::vector<uint8_t> after = tested.out.raw_bytes();

  // raw_bytes() starts where the view does: a HostTensor's view begins its storage.
  std::vector<bool> element_byte(before.size(), false);
  const auto element = static_cast<int64_t>(flashattn::dtype_size(p.dtype));
  for (int64_t offset : element_offsets(tested.out.view())) {
    for (int64_t b = 0; b < element; ++b) element_byte[offset * element + b] = true;
  }
  int64_t gap_bytes = 0, changed = 0;
  for (size_t b = 0; b < before.size(); ++b) {
    if (element_byte[b]) continue;
    ++gap_bytes;
    if (before[b] != after[b]) ++changed;
  }
  EXPECT_GT(gap_bytes, 0) << "out has no gap to check";
  EXPECT_EQ(changed, 0) << "bytes written into the gaps of out, of " << gap_bytes;
}

void expect_passes_without_lse(const Problem& p) {
  const Inputs inputs = fa_test::make_inputs(p);
  Outputs tested = fa_test::make_outputs(p);
  Outputs exact = fa_test::make_outputs(p);
  Outputs lowp = fa_test::make_outputs(p);
  flashattn::ForwardArgs args = fa_test::forward_args(p, inputs, &tested);
  args.lse = flashattn::Tensor{};

  fa_test::CheckResult result;
  result.problem = p.describe() + " without lse on cuda";
  result.status = cuda_runner().forward(args);
  ASSERT_TRUE(run_references(p, inputs, &exact, &lowp));
  if (result.status.ok()) {
    fa_test::compare(&result, "out", tested.out, exact.out, lowp.out,
                     fa_test::tolerance_eps(p.dtype, exact.out, p.eps_scale));
  }
  EXPECT_TRUE(result.passed()) << result.summary();
}

void expect_unused_keys_ignored(const Problem& p) {
  SCOPED_TRACE(p.describe());
  ASSERT_TRUE(p.varlen() && !p.seqused_k.empty()) << "needs a varlen problem with seqused_k";
  Inputs inputs = fa_test::make_inputs(p);
  Outputs exact = fa_test::make_outputs(p);
  Outputs lowp = fa_test::make_outputs(p);
  ASSERT_TRUE(run_references(p, inputs, &exact, &lowp));

  // Rows [k_row0 + seqused_k, k_row0 + seqlen_k) of each sequence: NaN in K, +Inf and NaN in V.
  const int64_t k_row = int64_t{p.nheads_k} * p.head_dim;
  const int64_t v_row = int64_t{p.nheads_k} * p.dim_v();
  int64_t poisoned = 0;
  for (int b = 0; b < p.sequences(); ++b) {
    for (int r = p.seqused_k[b]; r < p.seqlens_k[b]; ++r) {
      const int64_t row = p.k_row0(b) + r;
      for (int64_t i = 0; i < k_row; ++i) inputs.k.set(row * k_row + i, NAN);
      for (int64_t i = 0; i < v_row; ++i) inputs.v.set(row * v_row + i, i % 2 ? INFINITY : NAN);
      ++poisoned;
    }
  }
  ASSERT_GT(poisoned, 0) << "no key past seqused_k to poison";
  Outputs tested = fa_test::make_outputs(p);
  fa_test::CheckResult result;
  result.problem = p.describe() + " with NaN and Inf past seqused_k, on cuda";
  result.status = cuda_runner().forward(fa_test::forward_args(p, inputs, &tested));
  if (result.status.ok()) {
    fa_test::compare(&result, "out", tested.out, exact.out, lowp.out,
                     fa_test::tolerance_eps(p.dtype, exact.out, p.eps_scale));
    fa_test::compare(&result, "lse", tested.lse, exact.lse, lowp.lse,
                     fa_test::tolerance_eps(flashattn::DType::kF32, exact.lse, 64 * p.eps_scale));
  }
  EXPECT_TRUE(result.passed()) << result.summary();
}

}  // namespace fa_cuda_test
