// The shared check of support/reference_problem.hpp and kvcache_problem.hpp: the reference
// passes it (with zero error, being its own yardstick), and a backend that is slightly
// wrong, forgets an element or fails is caught.
#include <gtest/gtest.h>

#include <cmath>

#include "flashattn/flashattn.hpp"
#include "support/kvcache_problem.hpp"
#include "support/reference_problem.hpp"

namespace fa_test {
namespace {

using flashattn::Backend;
using flashattn::Status;

Problem mixed_problem() {
  Problem p;
  p.dtype = DType::kBF16;
  p.seqlens_q = {3, 20, 1};
  p.seqlens_k = {9, 17, 5};
  p.seqused_k = {9, 11, 0};
  p.causal = true;
  p.softcap = 10.f;
  p.alibi = true;
  p.dropout_p = 0.15f;
  p.strided = true;
  p.head_dim = 32;
  p.seed = 501;
  return p;
}

TEST(ReferenceProblem, ReferencePassesTheSharedChecks) {
  const Runner reference = host_runner(Backend::kReference);
  const CheckResult forward = check_forward(mixed_problem(), reference);
  EXPECT_TRUE(forward.passed()) << forward.summary();
  EXPECT_EQ(forward.quantities.size(), 2u);

  const CheckResult backward = check_backward(mixed_problem(), reference);
  EXPECT_TRUE(backward.passed()) << backward.summary();
  ASSERT_EQ(backward.quantities.size(), 5u);
  for (const QuantityCheck& q : backward.quantities) {
    EXPECT_EQ(q.report.error, 0.0) << q.name;
    if (q.name != "lse") {
      EXPECT_GT(q.report.baseline, 0.0) << q.name;  // P was rounded
    }
  }

  KVCacheProblem cache;
  cache.page_size = 16;
  cache.seqlen_new = 2;
  cache.seqlen_q = 2;
  cache.rotary_dim = 32;
  cache.causal = true;
  cache.seed = 502;
  const CheckResult kvcache = check_kvcache(cache, reference);
  EXPECT_TRUE(kvcache.passed()) << kvcache.summary();
  EXPECT_EQ(kvcache.quantities.size(), 4u);
}

// The reference, with `damage` applied to its forward outputs.
Runner damaged_reference(std::function<void(const flashattn::ForwardArgs&)> damage) {
  Runner runner = host_runner(Backend::kReference);
  runner.name = "damaged reference";
  const auto forward = runner.forward;
  runner.forward = [forward, damage](const flashattn::ForwardArgs& args) {
    const Status status = forward(args);
    damage(args);
    return status;
  };
  return runner;
}

float* first_out_element(const flashattn::ForwardArgs& args) {
  return static_cast<float*>(args.out.data);
}

TEST(ReferenceProblem, CatchesAWrongValueAMissingElementAndAFailure) {
  Problem p = mixed_problem();
  p.dtype = DType::kF32;  // so the damage below is a plain float edit

  const Runner off_by_a_little = damaged_reference(
      [](const flashattn::ForwardArgs& a) { *first_out_element(a) += 1e-3f; });
  const CheckResult wrong = check_forward(p, off_by_a_little);
  EXPECT_FALSE(wrong.passed()) << wrong.summary();

  const Runner forgetful = damaged_reference(
      [](const flashattn::ForwardArgs& a) { *first_out_element(a) = std::nanf(""); });
  EXPECT_FALSE(check_forward(p, forgetful).passed());

  Runner failing = host_runner(Backend::kReference);
  failing.forward = [](const flashattn::ForwardArgs&) {
    return Status(flashattn::StatusCode::kInternal, "boom");
  };
  const CheckResult failed = check_forward(p, failing);
  EXPECT_FALSE(failed.passed());
  EXPECT_NE(failed.summary().find("boom"), std::string::npos) << failed.summary();
}

}  // namespace
}  // namespace fa_test
