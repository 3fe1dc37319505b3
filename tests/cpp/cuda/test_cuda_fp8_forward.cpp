// The FP8 (e4m3) forward on Hopper (sm90/fwd_kernel.cuh with FwdShape::kFp8) through the public
// API, against the reference on the same e4m3 inputs (fa_test::check_forward): the kernel's
// error against the fp32 reference on the dequantized inputs must stay within twice the error
// of the naive algorithm that rounds P to e4m3 before P V (the reference's low-precision run),
// plus eps from out's type. Descales differ per batch entry and KV head; a negative control
// reads them mixed up and must fail. Elsewhere than on a Hopper GPU the call is refused (the
// last test) and the rest skips.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/device_limits.hpp"
#include "cuda_test_support.hpp"
#include "support/reference_problem.hpp"

namespace fa_cuda_test {
namespace {

using fa_test::Problem;
using flashattn::DType;

bool device_runs_sm90a() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  flashattn::cuda::DeviceLimits limits;
  return flashattn::cuda::device_limits(device, &limits).ok() && limits.sm90a;
}

// Parametrized by out's dtype.
class CudaFp8Forward : public CudaTestWithParam<DType> {
 protected:
  void SetUp() override {
    CudaTestWithParam<DType>::SetUp();
    if (IsSkipped()) return;
    if (!device_runs_sm90a()) GTEST_SKIP() << "the FP8 forward runs on Hopper (sm_90a) only";
  }

  Problem problem(int batch, int nheads, int nheads_k, int seqlen_q, int seqlen_k, int d) {
    Problem p = dense_problem(DType::kF8E4M3, {batch, nheads, nheads_k, seqlen_q, seqlen_k, d},
                              seed_++ + (GetParam() == DType::kF16 ? 70000u : 0u));
    p.out_dtype = GetParam();
    return p;
  }

  static void expect_passes_on_cuda(const Problem& p) {
    expect_passes(fa_test::check_forward(p, cuda_runner()));
  }

 private:
  uint32_t seed_ = 60000;
};

TEST_P(CudaFp8Forward, HeadDimsAndSeqlens) {
  const struct {
    int sq, sk;
  } lengths[] = {{1, 1}, {77, 130}, {130, 77}, {128, 192}, {200, 513}, {1, 300}};
  for (int d : {64, 128, 256}) {
    for (auto [sq, sk] : lengths) {
      for (bool causal : {false, true}) {
        Problem p = problem(2, 2, 1, sq, sk, d);
        p.causal = causal;
        expect_passes_on_cuda(p);
      }
    }
  }
}

// Descales per (batch entry, KV head), one per tensor, none; several KV heads so that a
// mixed-up index shows.
TEST_P(CudaFp8Forward, Descales) {
  for (Problem::Descales descales :
       {Problem::Descales::kPerHead, Problem::Descales::kOne, Problem::Descales::kNone}) {
    for (int d : {64, 128, 256}) {
      Problem p = problem(3, 6, 3, 90, 260, d);
      p.descales = descales;
      expect_passes_on_cuda(p);
    }
  }
}

TEST_P(CudaFp8Forward, MasksSoftcapAlibi) {
  for (int d : {64, 128, 256}) {
    Problem causal = problem(2, 4, 2, 300, 300, d);
    causal.causal = true;
    causal.softcap = 20.f;
    expect_passes_on_cuda(causal);
    Problem window = problem(2, 4, 2, 250, 400, d);
    window.window_left = 60;
    window.window_right = 7;
    window.alibi = true;
    expect_passes_on_cuda(window);
    Problem fewer_keys = problem(1, 2, 2, 300, 100, d);  // causal rows without keys
    fewer_keys.causal = true;
    fewer_keys.alibi = true;
    fewer_keys.alibi_per_batch = true;
    expect_passes_on_cuda(fewer_keys);
  }
}

// Large logits (past exp's fp32 range without the max subtracted) and e4m3's saturated
// range. Bounded: the tensor cores sum FP8 products in fewer bits than fp32, so a score of
// size L is off by about L * 2^-12 (the lse's eps, reference_problem.cpp), and two keys whose
// scores lie that close trade weight by a factor exp(L * 2^-12). The emulation the rule
// compares with rounds P only, so scores stay within a few hundred here (an H200 run with
// scores in the thousands, normal inputs * 60, missed the rule on one such row).
TEST_P(CudaFp8Forward, ExtremeLogits) {
  for (int d : {64, 128}) {
    Problem p = problem(1, 2, 1, 150, 270, d);
    p.input_scale = 6.f;
    expect_passes_on_cuda(p);
    p.distribution = fa_test::Distribution::kUniform;
    p.input_scale = 400.f;
    p.softmax_scale = 0.0001f;
    expect_passes_on_cuda(p);
  }
}

TEST_P(CudaFp8Forward, GqaMqaAndManyTiles) {
  Problem gqa = problem(2, 8, 2, 200, 333, 128);
  expect_passes_on_cuda(gqa);
  Problem mqa = problem(1, 6, 1, 64, 700, 64);
  mqa.causal = true;
  expect_passes_on_cuda(mqa);
  Problem many = problem(2, 150, 10, 140, 200, 64);  // more tiles than SMs; paired causal order
  many.causal = true;
  expect_passes_on_cuda(many);
  Problem from_registers = problem(1, 140, 4, 5, 300, 256);  // d = 256: O from registers
  expect_passes_on_cuda(from_registers);
  // d = 64 causal with more keys than fwd_sm90_use_narrow's bound: the 192-row tile under a
  // causal mask (shorter causal calls take the 128-row tile).
  Problem wide_causal = problem(1, 2, 2, 450, 2100, 64);
  wide_causal.causal = true;
  expect_passes_on_cuda(wide_causal);
  // d = 128 past fwd_sm90_fp8_use_narrow's bounds: the 192-key blocks (shorter calls take the
  // 128-key ones), without a mask, causal, and with a window and softcap.
  Problem long_keys = problem(1, 4, 2, 130, 2200, 128);
  expect_passes_on_cuda(long_keys);
  Problem long_causal = problem(1, 2, 1, 300, 4200, 128);
  long_causal.causal = true;
  expect_passes_on_cuda(long_causal);
  Problem long_window = problem(1, 2, 1, 200, 2500, 128);
  long_window.window_left = 700;
  long_window.window_right = 30;
  long_window.softcap = 15.f;
  expect_passes_on_cuda(long_window);
}

// Varlen with empty sequences and seqused_k: rows of V past a sequence's keys hold the next
// sequence's values, which must not reach the output.
TEST_P(CudaFp8Forward, Varlen) {
  for (int d : {64, 128, 256}) {
    Problem p = problem(0, 4, 2, 0, 0, d);
    p.seqlens_q = {5, 0, 70, 200};
    p.seqlens_k = {9, 20, 150, 333};
    expect_passes_on_cuda(p);
    p.causal = true;
    p.seqused_k = {9, 3, 100, 201};
    expect_passes_on_cuda(p);
  }
}

TEST_P(CudaFp8Forward, StridedViews) {
  Problem strided = problem(2, 4, 2, 100, 180, 128);
  strided.strided = true;
  expect_passes_on_cuda(strided);
}

// The negative control: the same check with the call reading the v (or k) descale of the next
// (batch entry, KV head), as an index off by one would, must fail. (Reversing them instead
// left an H200 run within the rule once: with four random descales, the pairs a reversal
// swaps can be close; a rotation changes every factor unless all four are.)
TEST_P(CudaFp8Forward, AWrongDescaleFails) {
  for (int which = 0; which < 2; ++which) {
    Problem p = problem(2, 4, 2, 70, 150, 128);
    fa_test::Runner wrong = cuda_runner();
    const auto forward = wrong.forward;
    wrong.forward = [forward, which](const flashattn::ForwardArgs& args) {
      flashattn::ForwardArgs mixed = args;
      flashattn::Tensor& t = which == 0 ? mixed.descale.v : mixed.descale.k;
      const int64_t n = t.shape[0] * t.shape[1];  // [batch, nheads_k], contiguous
      fa_test::HostTensor rotated(DType::kF32, {t.shape[0], t.shape[1]});
      const float* right = static_cast<const float*>(t.data);
      for (int64_t i = 0; i < n; ++i) rotated.set(i, right[(i + 1) % n]);
      t = rotated.view();
      return forward(mixed);
    };
    const fa_test::CheckResult result = fa_test::check_forward(p, wrong);
    ASSERT_TRUE(result.status.ok()) << result.status.message();
    EXPECT_FALSE(result.passed()) << (which == 0 ? "v" : "k")
                                  << " descales mixed up, yet: " << result.summary();
  }
}

INSTANTIATE_TEST_SUITE_P(Out, CudaFp8Forward, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& param) {
                           return std::string(flashattn::to_string(param.param));
                         });

using CudaFp8Refusal = CudaTest;

// Where the FP8 kernel cannot run the call, it is refused, never run elsewhere: head dims
// without an FP8 kernel everywhere, and everything off Hopper.
TEST_F(CudaFp8Refusal, HeadDimsWithoutAKernelAndOtherGpus) {
  Problem p = dense_problem(DType::kF8E4M3, {1, 2, 1, 20, 30, 96}, 5);
  const fa_test::Inputs in = fa_test::make_inputs(p);
  fa_test::Outputs out = fa_test::make_outputs(p);
  const flashattn::Status status = cuda_runner().forward(fa_test::forward_args(p, in, &out));
  EXPECT_EQ(status.code(), flashattn::StatusCode::kUnsupported) << status.message();
  EXPECT_NE(status.message().find("e4m3"), std::string::npos) << status.message();
  if (!device_runs_sm90a()) {
    p.head_dim = 128;
    const fa_test::Inputs in128 = fa_test::make_inputs(p);
    fa_test::Outputs out128 = fa_test::make_outputs(p);
    const flashattn::Status other =
        cuda_runner().forward(fa_test::forward_args(p, in128, &out128));
    EXPECT_EQ(other.code(), flashattn::StatusCode::kUnsupported) << other.message();
    EXPECT_NE(other.message().find("Hopper"), std::string::npos) << other.message();
  }
}

}  // namespace
}  // namespace fa_cuda_test
