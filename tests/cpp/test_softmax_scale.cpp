// AttentionOptions::softmax_scale: unset means 1/sqrt(head_dim); a set value, 0 included,
// is used as given (FlashAttention-2 reads softmax_scale=0.0 as a scale of 0).
#include <gtest/gtest.h>

#include <cmath>

#include "support/reference_problem.hpp"

namespace fa_test {
namespace {

Problem small(uint32_t seed) {
  Problem p;
  p.dtype = DType::kF32;
  p.batch = 1;
  p.nheads = 2;
  p.nheads_k = 1;
  p.seqlen_q = 37;
  p.seqlen_k = 37;
  p.head_dim = 24;
  p.causal = true;
  p.seed = seed;
  return p;
}

class SoftmaxScale : public ::testing::TestWithParam<flashattn::Backend> {};

TEST_P(SoftmaxScale, UnsetIsInverseSqrtHeadDim) {
  const Problem p = small(2111);
  const Inputs in = make_inputs(p);
  Outputs unset = make_outputs(p), explicit_scale = make_outputs(p);
  ASSERT_TRUE(flashattn::forward(forward_args(p, in, &unset), {GetParam()}).ok());
  flashattn::ForwardArgs args = forward_args(p, in, &explicit_scale);
  args.options.softmax_scale = static_cast<float>(1.0 / std::sqrt(24.0));
  ASSERT_TRUE(flashattn::forward(args, {GetParam()}).ok());
  EXPECT_EQ(max_abs_diff(unset.out, explicit_scale.out), 0.0);
}

TEST_P(SoftmaxScale, ZeroAveragesTheVisibleValues) {
  const Problem p = small(2112);
  const Inputs in = make_inputs(p);
  Outputs out = make_outputs(p);
  flashattn::ForwardArgs args = forward_args(p, in, &out);
  args.options.softmax_scale = 0.f;
  ASSERT_TRUE(flashattn::forward(args, {GetParam()}).ok());
  // Causal, square: row i sees keys 0..i with equal weight, and lse = log(i + 1).
  for (int h = 0; h < p.nheads; ++h) {
    for (int i = 0; i < p.seqlen_q; ++i) {
      EXPECT_NEAR(out.lse.get(h * p.seqlen_q + i), std::log(i + 1.0), 1e-5);
      for (int c = 0; c < p.head_dim; ++c) {
        double mean = 0.0;
        for (int j = 0; j <= i; ++j) mean += in.v.get(j * p.head_dim + c) / (i + 1);
        ASSERT_NEAR(out.out.get((i * p.nheads + h) * p.head_dim + c), mean, 1e-5)
            << "head " << h << " row " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, SoftmaxScale,
                         ::testing::Values(flashattn::Backend::kReference,
                                           flashattn::Backend::kCpu),
                         [](const auto& info) { return flashattn::to_string(info.param); });

}  // namespace
}  // namespace fa_test
