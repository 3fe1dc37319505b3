// Validation of the packed varlen layout: cu_seqlens, seqused_k, max_seqlen and the
// rank-3 tensors.
#include <gtest/gtest.h>

#include "test_api_cases.hpp"

namespace api_test {
namespace {

using flashattn::Backend;
using flashattn::StatusCode;
using flashattn::Tensor;

TEST(ValidationVarlen, ValidPackedCallPasses) {
  VarlenCase c({3, 0, 5}, {4, 2, 6});
  EXPECT_TRUE(check(c.args).ok()) << check(c.args).message();
  HostTensor used = fa_test::int32_tensor({4, 0, 3});
  c.args.varlen.seqused_k = used.view();
  EXPECT_TRUE(check(c.args).ok()) << check(c.args).message();
}

TEST(ValidationVarlen, CuSeqlensWrongLength) {
  VarlenCase c({3, 5}, {4, 6});
  HostTensor longer = fa_test::int32_tensor({0, 4, 10, 10});
  c.args.varlen.cu_seqlens_k = longer.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "varlen.cu_seqlens_k", "batch+1=3"));
  VarlenCase d({3, 5}, {4, 6});
  HostTensor empty(DType::kI32, {0});
  d.args.varlen.cu_seqlens_q = empty.view();
  EXPECT_TRUE(Rejected(check(d.args), kInvalid, "varlen.cu_seqlens_q", "batch + 1 >= 1"));
}

TEST(ValidationVarlen, CuSeqlensNotStartingAtZero) {
  VarlenCase c({3, 5}, {4, 6});
  c.cu_seqlens_q.set(0, 1);
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "varlen.cu_seqlens_q", "[0] = 0"));
}

TEST(ValidationVarlen, CuSeqlensDecreasing) {
  VarlenCase c({3, 5, 2}, {4, 6, 1});
  c.cu_seqlens_k.set(2, 3);  // 0, 4, 3, 11
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "varlen.cu_seqlens_k", "non-decreasing"));
}

TEST(ValidationVarlen, CuSeqlensLastEntryIsNotTheRowCount) {
  VarlenCase c({3, 5}, {4, 6});
  c.cu_seqlens_q.set(2, 7);
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "varlen.cu_seqlens_q", "total_q=8"));
}

TEST(ValidationVarlen, SequenceLongerThanMaxSeqlen) {
  VarlenCase c({3, 5}, {4, 6});
  c.args.varlen.max_seqlen_q = 4;
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "varlen.max_seqlen_q", "has 5"));
  VarlenCase d({3, 5}, {4, 6});
  d.args.varlen.max_seqlen_k = -1;
  EXPECT_TRUE(Rejected(check(d.args), kInvalid, "varlen.max_seqlen_k", ">= 0"));
}

TEST(ValidationVarlen, CuSeqlensMustBeInt32) {
  VarlenCase c({3, 5}, {4, 6});
  HostTensor floats = fa_test::float_tensor({0, 3, 8});
  c.args.varlen.cu_seqlens_q = floats.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "varlen.cu_seqlens_q", "dtype int32"));
}

TEST(ValidationVarlen, CuSeqlensKMissing) {
  VarlenCase c({3, 5}, {4, 6});
  c.args.varlen.cu_seqlens_k = Tensor{};
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "varlen.cu_seqlens_k", "got none"));
}

TEST(ValidationVarlen, VarlenTensorsWithoutCuSeqlensQ) {
  ForwardCase f;
  HostTensor cu = fa_test::int32_tensor({0, 7, 14});
  f.args.varlen.cu_seqlens_k = cu.view();
  EXPECT_TRUE(Rejected(check(f.args), kInvalid, "varlen.cu_seqlens_q", "varlen.cu_seqlens_k"));
}

TEST(ValidationVarlen, SequsedKBeyondTheSequence) {
  VarlenCase c({3, 5}, {4, 6});
  HostTensor used = fa_test::int32_tensor({4, 7});
  c.args.varlen.seqused_k = used.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "varlen.seqused_k", "[1] in 0..6"));
  HostTensor short_used = fa_test::int32_tensor({4});
  c.args.varlen.seqused_k = short_used.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "varlen.seqused_k", "batch=2"));
}

TEST(ValidationVarlen, PackedTensorsHaveRankThree) {
  VarlenCase c({3, 5}, {4, 6});
  ForwardCase dense;
  c.args.q = dense.args.q;
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "q", "rank 3"));
}

TEST(ValidationVarlen, LseIsHeadsByTotalQ) {
  VarlenCase c({3, 5}, {4, 6});
  HostTensor dense_lse(DType::kF32, {2, c.p.nheads, 5});
  c.args.lse = dense_lse.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "lse", "[nheads=4, total_q=8]"));
}

// Offsets in device memory are not read (that would need a copy and a synchronization):
// a device-declared call with bad offsets is not rejected for its contents. Only
// meaningful where the runtime cannot tell that these pointers are host memory.
TEST(ValidationVarlen, DeviceOffsetsAreNotRead) {
  if (flashattn::cuda_available()) GTEST_SKIP() << "needs a machine where CUDA is not usable";
  VarlenCase c({3, 5}, {4, 6}, Problem{DType::kF16});
  c.cu_seqlens_q.set(0, 2);
  flashattn::ForwardArgs args = c.args;
  for (Tensor* t : {&args.q, &args.k, &args.v, &args.out, &args.lse, &args.varlen.cu_seqlens_q,
                    &args.varlen.cu_seqlens_k}) {
    *t = on_device(*t, flashattn::DeviceType::kCUDA);
  }
  EXPECT_EQ(flashattn::supported(args, Backend::kCuda).code(), StatusCode::kUnsupported)
      << flashattn::supported(args, Backend::kCuda).message();
}

}  // namespace
}  // namespace api_test
