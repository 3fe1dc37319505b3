// Validation of AttentionOptions: scale, window/causal, softcap, dropout, ALiBi slopes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "test_api_cases.hpp"

namespace api_test {
namespace {

using flashattn::Backend;
using flashattn::StatusCode;
using flashattn::Tensor;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(ValidationOptions, CausalWithARightWindowConflicts) {
  ForwardCase f;
  f.args.options.causal = true;
  f.args.options.window_right = 3;
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "options.window_right", "causal"));
}

TEST(ValidationOptions, CausalAgreesWithRightWindowZeroOrUnbounded) {
  for (int right : {-1, 0}) {
    ForwardCase f;
    f.args.options.causal = true;
    f.args.options.window_left = 2;
    f.args.options.window_right = right;
    EXPECT_TRUE(check(f.args).ok()) << check(f.args).message();
  }
}

TEST(ValidationOptions, WindowBelowMinusOne) {
  ForwardCase f;
  f.args.options.window_left = -2;
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "options.window_left", ">= -1"));
  ForwardCase g;
  g.args.options.window_right = -7;
  EXPECT_TRUE(Rejected(check(g.args), kInvalid, "options.window_right", ">= -1"));
}

TEST(ValidationOptions, DropoutOutsideZeroOne) {
  for (float p : {-0.1f, 1.f, 1.5f, kNaN}) {
    ForwardCase f;
    f.args.options.dropout_p = p;
    EXPECT_TRUE(Rejected(check(f.args), kInvalid, "options.dropout_p", "[0, 1)")) << "p=" << p;
  }
  ForwardCase g;
  g.args.options.dropout_p = 0.999f;
  EXPECT_TRUE(check(g.args).ok()) << check(g.args).message();
}

TEST(ValidationOptions, NegativeOrNonFiniteSoftcap) {
  for (float cap : {-1.f, kNaN, kInf}) {
    ForwardCase f;
    f.args.options.softcap = cap;
    EXPECT_TRUE(Rejected(check(f.args), kInvalid, "options.softcap", ">= 0")) << "softcap=" << cap;
  }
}

TEST(ValidationOptions, NonFiniteScale) {
  for (float scale : {kNaN, kInf, -kInf}) {
    ForwardCase f;
    f.args.options.softmax_scale = scale;
    EXPECT_TRUE(Rejected(check(f.args), kInvalid, "options.softmax_scale", "finite")) << scale;
  }
}

TEST(ValidationOptions, AlibiSlopesPerHeadOrPerBatchAndHead) {
  ForwardCase f;
  HostTensor shared(DType::kF32, {f.p.nheads});
  HostTensor per_batch(DType::kF32, {f.p.batch, f.p.nheads});
  f.args.options.alibi_slopes = shared.view();
  EXPECT_TRUE(check(f.args).ok()) << check(f.args).message();
  f.args.options.alibi_slopes = per_batch.view();
  EXPECT_TRUE(check(f.args).ok()) << check(f.args).message();
}

TEST(ValidationOptions, AlibiSlopesWrongShapeOrDtype) {
  ForwardCase f;
  HostTensor wrong_heads(DType::kF32, {f.p.nheads + 1});
  f.args.options.alibi_slopes = wrong_heads.view();
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "options.alibi_slopes", "[nheads=4]"));
  HostTensor half(DType::kF16, {f.p.nheads});
  f.args.options.alibi_slopes = half.view();
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "options.alibi_slopes", "dtype fp32"));
}

TEST(ValidationOptions, DropoutWithAKVCacheMustBeZero) {
  KVCacheCase c;
  c.args.options.dropout_p = 0.1f;
  EXPECT_TRUE(Rejected(flashattn::supported(c.args, Backend::kReference), kInvalid,
                       "options.dropout_p", "KV cache"));
}

TEST(ValidationOptions, BackwardChecksTheOptionsToo) {
  BackwardCase b;
  b.args.options.window_left = -3;
  EXPECT_TRUE(
      Rejected(flashattn::supported(b.args, Backend::kReference), kInvalid, "options.window_left"));
}

}  // namespace
}  // namespace api_test
