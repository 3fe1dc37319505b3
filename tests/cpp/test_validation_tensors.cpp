// Validation of the tensors of forward and backward: presence, null pointers, dtypes,
// ranks, shapes, strides, head counts, head dims and index-type overflow. Every test
// breaks one thing in a valid call and asserts the code and the argument named.
#include <gtest/gtest.h>

#include <cstdint>

#include "test_api_cases.hpp"

namespace api_test {
namespace {

using flashattn::Backend;
using flashattn::StatusCode;
using flashattn::Tensor;

TEST(ValidationTensors, ValidCallsPass) {
  ForwardCase f;
  EXPECT_TRUE(check(f.args).ok()) << check(f.args).message();
  BackwardCase b;
  EXPECT_TRUE(check(b.args).ok()) << check(b.args).message();
  f.args.lse = Tensor{};  // lse is optional in the forward
  EXPECT_TRUE(check(f.args).ok()) << check(f.args).message();
}

TEST(ValidationTensors, MissingRequiredTensor) {
  ForwardCase f;
  f.args.k = Tensor{};
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "k", "got none"));
  ForwardCase g;
  g.args.out = Tensor{};
  EXPECT_TRUE(Rejected(check(g.args), kInvalid, "out", "got none"));
  BackwardCase b;
  b.args.lse = Tensor{};
  EXPECT_TRUE(Rejected(check(b.args), kInvalid, "lse", "got none"));
  BackwardCase c;
  c.args.dv = Tensor{};
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "dv", "got none"));
  // The message spells out the shape the argument must have.
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "dv",
                       "expected a tensor [batch=2, seqlen_k=7, nheads_k=2, head_dim_v=16]"));
  BackwardCase d;
  d.args.dq = Tensor{};
  EXPECT_TRUE(Rejected(check(d.args), kInvalid, "dq",
                       "expected a tensor [batch=2, seqlen_q=5, nheads=4, head_dim=16]"));
}

TEST(ValidationTensors, NullPointer) {
  ForwardCase f;
  f.args.v.data = nullptr;
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "v", "nullptr"));
  ForwardCase g;
  g.args.lse.data = nullptr;
  EXPECT_TRUE(Rejected(check(g.args), kInvalid, "lse", "nullptr"));
}

TEST(ValidationTensors, NullPointerOfAnEmptyTensorIsFine) {
  Problem p;
  p.seqlen_q = 0;
  ForwardCase f(p);
  f.args.q.data = nullptr;
  f.args.out.data = nullptr;
  f.args.lse.data = nullptr;
  EXPECT_TRUE(check(f.args).ok()) << check(f.args).message();
}

TEST(ValidationTensors, DtypeMismatch) {
  ForwardCase f;
  f.args.k.dtype = DType::kBF16;
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "k", "dtype fp32"));
  ForwardCase g;
  g.args.lse.dtype = DType::kF16;
  EXPECT_TRUE(Rejected(check(g.args), kInvalid, "lse", "dtype fp32"));
  BackwardCase b;
  b.args.dq.dtype = DType::kF16;
  EXPECT_TRUE(Rejected(check(b.args), kInvalid, "dq", "dtype fp32"));
  ForwardCase h;
  h.args.q.dtype = DType::kI32;
  EXPECT_TRUE(Rejected(check(h.args), kInvalid, "q", "fp32, fp16 or bf16"));
}

TEST(ValidationTensors, WrongRank) {
  ForwardCase f;
  f.args.k.rank = 3;
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "k", "rank 4"));
  ForwardCase g;
  g.args.q.rank = 3;  // a packed layout without cu_seqlens
  EXPECT_TRUE(Rejected(check(g.args), kInvalid, "q", "rank 4"));
  ForwardCase h;
  h.args.lse.rank = 2;
  EXPECT_TRUE(Rejected(check(h.args), kInvalid, "lse", "shape"));
  ForwardCase z;
  z.args.out.rank = 0;  // data without a shape
  EXPECT_TRUE(Rejected(check(z.args), kInvalid, "out", "got []"));
}

// Every dimension of every tensor whose sizes are not read from itself is checked
// against the sizes read from q, k and v.
struct Dimension {
  const char* tensor;
  int dim;
};

class ForwardShape : public ::testing::TestWithParam<Dimension> {};

Tensor* forward_tensor(ForwardCase& f, const std::string& name) {
  if (name == "k") return &f.args.k;
  if (name == "v") return &f.args.v;
  if (name == "out") return &f.args.out;
  return &f.args.lse;
}

TEST_P(ForwardShape, MismatchNamesTheTensor) {
  ForwardCase f;
  forward_tensor(f, GetParam().tensor)->shape[GetParam().dim] += 1;
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, GetParam().tensor, "expected shape"));
}

INSTANTIATE_TEST_SUITE_P(EveryDimension, ForwardShape,
                         ::testing::Values(Dimension{"k", 0}, Dimension{"k", 3}, Dimension{"v", 0},
                                           Dimension{"v", 1}, Dimension{"v", 2},
                                           Dimension{"out", 0}, Dimension{"out", 1},
                                           Dimension{"out", 2}, Dimension{"out", 3},
                                           Dimension{"lse", 0}, Dimension{"lse", 1},
                                           Dimension{"lse", 2}));

class BackwardShape : public ::testing::TestWithParam<Dimension> {};

Tensor* backward_tensor(BackwardCase& b, const std::string& name) {
  if (name == "dout") return &b.args.dout;
  if (name == "dq") return &b.args.dq;
  if (name == "dk") return &b.args.dk;
  if (name == "dv") return &b.args.dv;
  if (name == "out") return &b.args.out;
  return &b.args.lse;
}

TEST_P(BackwardShape, MismatchNamesTheTensor) {
  BackwardCase b;
  backward_tensor(b, GetParam().tensor)->shape[GetParam().dim] += 1;
  EXPECT_TRUE(Rejected(check(b.args), kInvalid, GetParam().tensor, "expected shape"));
}

INSTANTIATE_TEST_SUITE_P(
    EveryDimension, BackwardShape,
    ::testing::Values(Dimension{"dout", 0}, Dimension{"dout", 1}, Dimension{"dout", 2},
                      Dimension{"dout", 3}, Dimension{"dq", 0}, Dimension{"dq", 1},
                      Dimension{"dq", 2}, Dimension{"dq", 3}, Dimension{"dk", 0},
                      Dimension{"dk", 1}, Dimension{"dk", 2}, Dimension{"dk", 3},
                      Dimension{"dv", 0}, Dimension{"dv", 1}, Dimension{"dv", 2},
                      Dimension{"dv", 3}, Dimension{"out", 1}, Dimension{"lse", 2}));

TEST(ValidationTensors, SeqlenOfKAndVMustAgree) {
  ForwardCase f;
  f.args.k.shape[1] = 3;  // k defines seqlen_k; v then disagrees
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "v", "seqlen_k=3"));
}

TEST(ValidationTensors, LastDimensionNotContiguous) {
  ForwardCase f;
  f.args.q.stride[3] = 3;
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "q",
                       "expected last dimension contiguous (stride 1), got stride 3"));
  BackwardCase b;
  b.args.dk.stride[3] = 2;
  EXPECT_TRUE(Rejected(check(b.args), kInvalid, "dk", "stride 1"));
}

TEST(ValidationTensors, StridedViewsAreValid) {
  Problem p;
  ForwardCase f(p);
  HostTensor q = HostTensor::strided(p.dtype, {p.batch, p.seqlen_q, p.nheads, p.head_dim}, 2, 5);
  HostTensor out = HostTensor::strided(p.dtype, {p.batch, p.seqlen_q, p.nheads, p.head_dim}, 1, 3);
  f.args.q = q.view();
  f.args.out = out.view();
  EXPECT_TRUE(check(f.args).ok()) << check(f.args).message();
}

TEST(ValidationTensors, NheadsKMustDivideNheads) {
  Problem p;
  p.nheads = 32;
  p.nheads_k = 5;
  ForwardCase f(p);
  EXPECT_TRUE(
      Rejected(check(f.args), kInvalid, "k", "expected nheads_k dividing nheads=32, got 5"));
}

TEST(ValidationTensors, HeadDimOutOfRange) {
  Problem p;
  p.head_dim = 264;
  ForwardCase f(p);
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "q", "head_dim in 1..256, got 264"));
}

TEST(ValidationTensors, EveryHeadDimUpTo256IsAccepted) {
  for (int64_t d : {1, 3, 8, 59, 96, 256}) {
    Problem p;
    p.head_dim = d;
    ForwardCase f(p);
    EXPECT_TRUE(check(f.args).ok()) << "d=" << d << ": " << check(f.args).message();
  }
}

TEST(ValidationTensors, HeadDimVDifferentFromHeadDimIsUnsupportedForNow) {
  ForwardCase f;
  HostTensor v(f.p.dtype, {f.p.batch, f.p.seqlen_k, f.p.nheads_k, 8});
  HostTensor out(f.p.dtype, {f.p.batch, f.p.seqlen_q, f.p.nheads, 8});
  f.args.v = v.view();
  f.args.out = out.view();
  EXPECT_TRUE(Rejected(check(f.args), StatusCode::kUnsupported, "v", "head_dim_v=8"));
}

TEST(ValidationTensors, NegativeSizeOrStride) {
  ForwardCase f;
  f.args.k.shape[1] = -1;
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "k", "sizes >= 0"));
  ForwardCase g;
  g.args.v.stride[0] = -8;
  EXPECT_TRUE(Rejected(check(g.args), kInvalid, "v", "strides >= 0"));
}

TEST(ValidationTensors, SizeBeyondInt32) {
  ForwardCase f;
  f.args.k.shape[1] = int64_t{1} << 31;
  f.args.v.shape[1] = int64_t{1} << 31;
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "k", "2^31-1"));
}

TEST(ValidationTensors, OffsetBeyondInt64) {
  ForwardCase f;
  f.args.k.stride[0] = int64_t{1} << 62;
  f.args.k.shape[0] = 3;
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "k", "int64"));
}

// More than 2^31 elements is valid input (offsets are 64-bit): validation accepts it
// (it never reads q, k, v, so views over a small buffer stand in for the real thing).
TEST(ValidationTensors, MoreThanTwoToThe31ElementsIsValid) {
  Problem p;
  p.batch = 1;
  p.seqlen_q = 1;
  p.nheads = 1;
  p.nheads_k = 1;
  p.head_dim = 128;
  ForwardCase f(p);
  const int64_t seqlen_k = int64_t{1} << 24;  // 2^24 * 128 = 2^31 elements
  for (Tensor* t : {&f.args.k, &f.args.v}) {
    *t = flashattn::make_tensor(t->data, t->dtype, {1, seqlen_k + 1, 1, 128});
  }
  EXPECT_GT(f.args.k.numel(), int64_t{1} << 31);
  EXPECT_TRUE(check(f.args).ok()) << check(f.args).message();
}

}  // namespace
}  // namespace api_test
