// FP8 (e4m3): the conversions every backend shares, validation of e4m3 calls and their
// descales, and the CPU backends on e4m3 inputs (forward) and e4m3 KV caches against the
// reference, with a negative control that a wrong descale is caught.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/numeric.hpp"
#include "support/kvcache_problem.hpp"
#include "test_api_cases.hpp"
#include "test_cpu_backend_support.hpp"

namespace fa_test {
namespace {

using flashattn::core::e4m3_to_float;
using flashattn::core::float_to_e4m3;

// e4m3 by its definition: (-1)^s * 2^(e-7) * (1 + m/8), subnormals 2^-6 * m/8, S.1111.111 NaN.
double e4m3_by_definition(int bits) {
  const int sign = bits >> 7, exponent = (bits >> 3) & 15, mantissa = bits & 7;
  if (exponent == 15 && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = exponent == 0 ? std::ldexp(mantissa / 8.0, -6)
                                         : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

// The nearest finite e4m3 pattern by search (ties to the even pattern), saturating at 448.
uint8_t e4m3_by_search(float x) {
  if (std::isnan(x) || std::isinf(x)) return x < 0 ? 0xFF : 0x7F;
  const double target = std::fabs(static_cast<double>(x));
  int best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int bits = 0; bits < 0x7F; ++bits) {
    const double distance = std::fabs(e4m3_by_definition(bits) - target);
    if (distance < best_distance || (distance == best_distance && (bits & 1) == 0)) {
      best = bits;
      best_distance = distance;
    }
  }
  return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | best);
}

TEST(Fp8Conversion, DecodesEveryPattern) {
  for (int bits = 0; bits < 256; ++bits) {
    const double expected = e4m3_by_definition(bits);
    const float got = e4m3_to_float(static_cast<uint8_t>(bits));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << bits;
    } else {
      EXPECT_EQ(static_cast<double>(got), expected) << bits;
      EXPECT_EQ(std::signbit(got), (bits & 0x80) != 0) << bits;
    }
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.f, -9));
}

TEST(Fp8Conversion, RoundsToNearestEvenAndSaturates) {
  // Every finite pattern survives a round trip.
  for (int bits = 0; bits < 256; ++bits) {
    if ((bits & 0x7F) == 0x7F) continue;
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(static_cast<uint8_t>(bits))), bits) << bits;
  }
  // Midpoints between neighbours, and just either side of them.
  for (int bits = 0; bits < 0x7E; ++bits) {
    const float low = e4m3_to_float(static_cast<uint8_t>(bits));
    const float high = e4m3_to_float(static_cast<uint8_t>(bits + 1));
    const float mid = 0.5f * (low + high);
    for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1000.f), -mid}) {
      EXPECT_EQ(float_to_e4m3(x), e4m3_by_search(x)) << x;
    }
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-14.f, 10.f);
  for (int n = 0; n < 20000; ++n) {
    const float x = std::exp2(exponent(rng)) * (n % 2 ? -1.f : 1.f);
    ASSERT_EQ(float_to_e4m3(x), e4m3_by_search(x)) << x;
  }
  EXPECT_EQ(float_to_e4m3(448.f), 0x7E);
  EXPECT_EQ(float_to_e4m3(470.f), 0x7E);
  EXPECT_EQ(float_to_e4m3(1e30f), 0x7E);
  EXPECT_EQ(float_to_e4m3(-1e30f), 0xFE);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7F);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::infinity()), 0xFF);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.f, -10)), 0x00);          // tie: to the even 0
  EXPECT_EQ(float_to_e4m3(1.5f * std::ldexp(1.f, -9)), 0x02);    // tie: to the even 2^-8
}

// ---------------------------------------------------------------- validation ---------

using api_test::check;
using api_test::kInvalid;
using api_test::Rejected;
using flashattn::Backend;
using flashattn::StatusCode;

// A valid e4m3 forward over host tensors (b=2, sq=5, sk=7, h=4/2, d=16), bf16 out.
struct Fp8ForwardCase : api_test::NoCopy {
  HostTensor q{DType::kF8E4M3, {2, 5, 4, 16}}, k{DType::kF8E4M3, {2, 7, 2, 16}},
      v{DType::kF8E4M3, {2, 7, 2, 16}}, out{DType::kBF16, {2, 5, 4, 16}},
      lse{DType::kF32, {2, 4, 5}}, descale{DType::kF32, {2, 2}};
  flashattn::ForwardArgs args;
  Fp8ForwardCase() {
    args.q = q.view();
    args.k = k.view();
    args.v = v.view();
    args.out = out.view();
    args.lse = lse.view();
    args.descale = {descale.view(), descale.view(), descale.view()};
  }
};

TEST(Fp8Validation, ValidCallsPass) {
  Fp8ForwardCase c;
  EXPECT_TRUE(check(c.args).ok()) << check(c.args).message();
  HostTensor fp16_out(DType::kF16, {2, 5, 4, 16});
  c.args.out = fp16_out.view();
  EXPECT_TRUE(check(c.args).ok()) << check(c.args).message();
  c.args.descale = {};  // no descales: factors of 1
  EXPECT_TRUE(check(c.args).ok()) << check(c.args).message();
  HostTensor one(DType::kF32, {1});
  c.args.descale.k = one.view();
  EXPECT_TRUE(check(c.args).ok()) << check(c.args).message();
}

TEST(Fp8Validation, OperandsAndOutput) {
  Fp8ForwardCase c;
  HostTensor bf16_k(DType::kBF16, {2, 7, 2, 16});
  c.args.k = bf16_k.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "k", "dtype e4m3"));
  Fp8ForwardCase d;
  HostTensor fp32_out(DType::kF32, {2, 5, 4, 16});
  d.args.out = fp32_out.view();
  EXPECT_TRUE(Rejected(check(d.args), kInvalid, "out", "bf16 or fp16"));
  HostTensor e4m3_out(DType::kF8E4M3, {2, 5, 4, 16});
  d.args.out = e4m3_out.view();
  EXPECT_TRUE(Rejected(check(d.args), kInvalid, "out", "bf16 or fp16"));
}

TEST(Fp8Validation, Descales) {
  Fp8ForwardCase c;
  HostTensor wrong_shape(DType::kF32, {2, 4});  // nheads, not nheads_k
  c.args.descale.v = wrong_shape.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "descale.v", "nheads_k=2"));
  HostTensor wrong_dtype(DType::kF16, {2, 2});
  c.args.descale.v = wrong_dtype.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "descale.v", "dtype fp32"));
  HostTensor two(DType::kF32, {2});
  c.args.descale.v = two.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "descale.v", "batch=2"));

  api_test::ForwardCase bf16(api_test::Problem{DType::kBF16});
  HostTensor descale(DType::kF32, {2, 2});
  bf16.args.descale.q = descale.view();
  EXPECT_TRUE(Rejected(check(bf16.args), kInvalid, "descale.q", "not e4m3"));
}

TEST(Fp8Validation, NoBackwardAndNoCudaWithoutAGpu) {
  api_test::BackwardCase b(api_test::Problem{DType::kF8E4M3});
  EXPECT_TRUE(Rejected(check(b.args), StatusCode::kUnsupported, "q", "no backward"));

  // CUDA-declared views that validation never reads: validation lets an e4m3 forward through
  // to the CUDA backend (the Hopper kernel's plan decides), which without a GPU refuses it
  // (where CUDA is usable the runtime would see through these host pointers, so this part
  // runs only without it).
  if (flashattn::cuda_available()) return;
  Fp8ForwardCase c;
  flashattn::ForwardArgs moved = c.args;
  for (flashattn::Tensor* t : {&moved.q, &moved.k, &moved.v, &moved.out, &moved.lse,
                               &moved.descale.q, &moved.descale.k, &moved.descale.v}) {
    *t = api_test::on_device(*t, flashattn::DeviceType::kCUDA);
  }
  EXPECT_EQ(flashattn::supported(moved, Backend::kCuda).code(), StatusCode::kUnsupported);
}

TEST(Fp8Validation, KVCache) {
  api_test::KVCacheCase c(api_test::KVCacheShape{}, api_test::Problem{DType::kBF16});
  HostTensor k8(DType::kF8E4M3, {c.k_cache.size(0), c.k_cache.size(1), c.k_cache.size(2),
                                 c.k_cache.size(3)});
  HostTensor v8 = k8;
  HostTensor descale(DType::kF32, {c.p.batch, c.p.nheads_k});
  c.args.k_cache = k8.view();
  c.args.v_cache = v8.view();
  c.args.descale.k = descale.view();
  c.args.descale.v = descale.view();
  EXPECT_TRUE(check(c.args).ok()) << check(c.args).message();
  c.args.descale.q = descale.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "descale.q", "not e4m3"));
  c.args.descale.q = {};
  c.args.v_cache = c.v_cache.view();  // bf16 beside an e4m3 k_cache
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "v_cache", "dtype e4m3"));

  api_test::KVCacheCase plain(api_test::KVCacheShape{}, api_test::Problem{DType::kBF16});
  plain.args.descale.k = descale.view();
  EXPECT_TRUE(Rejected(check(plain.args), kInvalid, "descale.k", "not e4m3"));

  api_test::KVCacheCase e4m3_q(api_test::KVCacheShape{}, api_test::Problem{DType::kF8E4M3});
  EXPECT_TRUE(Rejected(check(e4m3_q.args), StatusCode::kUnsupported, "q", "bf16 or fp16"));
}

// ---------------------------------------------------------------- the reference -------

// The reference on e4m3 inputs with descales equals the reference on the dequantized
// inputs (x * descale of the row's batch entry and KV head, made here) in fp32.
TEST(Fp8Reference, IsTheFunctionOfTheDequantizedInputs) {
  Problem p;
  p.dtype = DType::kF8E4M3;
  p.batch = 2;
  p.nheads = 6;
  p.nheads_k = 2;
  p.seqlen_q = 9;
  p.seqlen_k = 13;
  p.head_dim = 16;
  p.causal = true;
  p.seed = 41;
  const Inputs in = make_inputs(p);
  Outputs fp8 = make_outputs(p);
  ASSERT_TRUE(flashattn::forward(forward_args(p, in, &fp8), {Backend::kReference}).ok());

  Problem plain = p;
  plain.dtype = DType::kF32;
  Inputs dequantized = make_inputs(plain);
  const struct {
    const HostTensor& from;
    const HostTensor& descale;
    HostTensor* to;
    int heads;
  } operands[] = {{in.q, in.q_descale, &dequantized.q, p.nheads},
                  {in.k, in.k_descale, &dequantized.k, p.nheads_k},
                  {in.v, in.v_descale, &dequantized.v, p.nheads_k}};
  for (const auto& o : operands) {
    const int64_t row = o.heads * int64_t(p.head_dim);
    const int64_t per_batch = o.from.numel() / p.batch;
    for (int64_t n = 0; n < o.from.numel(); ++n) {
      const int64_t b = n / per_batch;
      const int64_t head = (n % row) / p.head_dim;
      const int64_t kv_head = head / (o.heads / p.nheads_k);
      o.to->set(n, o.from.get(n) * o.descale.get(b * p.nheads_k + kv_head));
    }
  }
  Outputs fp32 = make_outputs(plain);
  ASSERT_TRUE(
      flashattn::forward(forward_args(plain, dequantized, &fp32), {Backend::kReference}).ok());
  // The two differ by the fp32 rounding of x * descale made here and by out's bf16.
  EXPECT_LE(max_abs_diff(fp8.out, fp32.out), std::ldexp(1.0, -8) * max_abs(fp32.out));
  EXPECT_LT(max_abs_diff(fp8.lse, fp32.lse), 1e-5);
}

// ---------------------------------------------------------------- the CPU backend ------

using CpuFp8 = CpuBackend;

Problem fp8_problem(uint32_t seed) {
  Problem p;
  p.dtype = DType::kF8E4M3;
  p.batch = 2;
  p.nheads = 4;
  p.nheads_k = 2;
  p.seqlen_q = 70;
  p.seqlen_k = 150;
  p.head_dim = 64;
  p.seed = seed;
  return p;
}

TEST_P(CpuFp8, ForwardAgainstTheReference) {
  uint32_t seed = 5000;
  for (int head_dim : {16, 64, 128, 256}) {
    for (DType out : {DType::kBF16, DType::kF16}) {
      Problem p = fp8_problem(seed++);
      p.head_dim = head_dim;
      p.out_dtype = out;
      expect_passes(check_forward(p, cpu()));
    }
  }
}

TEST_P(CpuFp8, ForwardDescalesAndOptions) {
  uint32_t seed = 5100;
  for (Problem::Descales descales :
       {Problem::Descales::kNone, Problem::Descales::kPerHead, Problem::Descales::kOne}) {
    Problem p = fp8_problem(seed++);
    p.descales = descales;
    expect_passes(check_forward(p, cpu()));
    p.causal = true;
    p.softcap = 20.f;
    expect_passes(check_forward(p, cpu()));
    p.causal = false;
    p.softcap = 0.f;
    p.window_left = 20;
    p.window_right = 5;
    p.alibi = true;
    expect_passes(check_forward(p, cpu()));
  }
  Problem mqa = fp8_problem(seed++);
  mqa.nheads = 8;
  mqa.nheads_k = 1;
  expect_passes(check_forward(mqa, cpu()));
  Problem varlen = fp8_problem(seed++);
  varlen.seqlens_q = {5, 0, 70, 33};
  varlen.seqlens_k = {9, 20, 150, 1};
  expect_passes(check_forward(varlen, cpu()));
}

// A wrong descale is caught: the same check with the tested call reading the v (or k)
// descales of the wrong (batch, KV head), as a mixed-up index would, fails the rule.
TEST_P(CpuFp8, AWrongDescaleFails) {
  for (int which = 0; which < 2; ++which) {
    Problem p = fp8_problem(5200 + which);
    const Inputs in = make_inputs(p);
    const HostTensor& right = which == 0 ? in.v_descale : in.k_descale;
    HostTensor wrong = right;
    for (int64_t n = 0; n < wrong.numel(); ++n) wrong.set(n, right.get(wrong.numel() - 1 - n));
    Outputs tested = make_outputs(p), exact = make_outputs(p), lowp = make_outputs(p);
    flashattn::ForwardArgs args = forward_args(p, in, &tested);
    (which == 0 ? args.descale.v : args.descale.k) = wrong.view();
    ASSERT_TRUE(flashattn::forward(args, {Backend::kCpu}).ok());
    ASSERT_TRUE(flashattn::forward(forward_args(p, in, &exact), {Backend::kReference}).ok());
    ASSERT_TRUE(reference_runner(flashattn::cpu::ReferencePrecision::kLowPrecisionNaive)
                    .forward(forward_args(p, in, &lowp))
                    .ok());
    const ToleranceReport report =
        tolerance_check(tested.out, exact.out, lowp.out, tolerance_eps(DType::kBF16, exact.out, 1));
    EXPECT_FALSE(report.passed()) << (which == 0 ? "v" : "k") << " descale: error "
                                  << report.error << " within " << report.bound;
  }
}

// Every e4m3 bit pattern read by the tiles' vector loads: with one key, out is v itself, so
// a head dim of 256 holding the 256 patterns gives them back exactly (bf16 holds every
// e4m3 value), NaN patterns as NaN.
TEST_P(CpuFp8, EveryE4m3PatternReadsExactly) {
  HostTensor q(DType::kF8E4M3, {1, 3, 1, 256}), k(DType::kF8E4M3, {1, 1, 1, 256}),
      v(DType::kF8E4M3, {1, 1, 1, 256}), out(DType::kBF16, {1, 3, 1, 256});
  auto* v_bytes = static_cast<uint8_t*>(v.view().data);
  for (int i = 0; i < 256; ++i) v_bytes[i] = static_cast<uint8_t>(i);
  q.fill(1.f);
  k.fill(0.5f);
  flashattn::ForwardArgs args;
  args.q = q.view();
  args.k = k.view();
  args.v = v.view();
  args.out = out.view();
  ASSERT_TRUE(flashattn::forward(args, {Backend::kCpu}).ok());
  for (int row = 0; row < 3; ++row) {
    for (int i = 0; i < 256; ++i) {
      const float expected = e4m3_to_float(static_cast<uint8_t>(i));
      const float got = out.get(row * 256 + i);
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(got)) << i;
      } else {
        EXPECT_EQ(got, expected) << "pattern " << i;
      }
    }
  }
}

KVCacheProblem fp8_cache_problem(DType dtype, uint32_t seed) {
  KVCacheProblem p;
  p.dtype = dtype;
  p.fp8_cache = true;
  p.batch = 3;
  p.nheads = 8;
  p.nheads_k = 2;
  p.seqlen_q = 1;
  p.head_dim = 128;
  p.seqlen_cache = 300;
  p.seed = seed;
  return p;
}

TEST_P(CpuFp8, KVCacheDecodeAndAppend) {
  uint32_t seed = 5300;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    KVCacheProblem p = fp8_cache_problem(dtype, seed++);
    expect_passes(check_kvcache(p, cpu()));
    p.seqlen_new = 3;
    p.seqlen_q = 3;
    p.causal = true;
    expect_passes(check_kvcache(p, cpu()));
    p.one_descale = true;
    p.num_splits = 3;
    expect_passes(check_kvcache(p, cpu()));
  }
}

TEST_P(CpuFp8, KVCachePagedRotaryAndBatchIdx) {
  uint32_t seed = 5400;
  KVCacheProblem paged = fp8_cache_problem(DType::kBF16, seed++);
  paged.page_size = 32;
  paged.seqlen_new = 2;
  paged.seqlen_q = 2;
  expect_passes(check_kvcache(paged, cpu()));
  KVCacheProblem rotary = fp8_cache_problem(DType::kBF16, seed++);
  rotary.seqlen_new = 4;
  rotary.seqlen_q = 4;
  rotary.rotary_dim = 32;
  rotary.causal = true;
  expect_passes(check_kvcache(rotary, cpu()));
  KVCacheProblem indexed = fp8_cache_problem(DType::kF16, seed++);
  indexed.cache_batch_idx = true;
  indexed.seqlen_new = 1;
  indexed.cache_leftpad = {0, 3, 1};
  indexed.cache_seqlens = {10, 200, 37};
  expect_passes(check_kvcache(indexed, cpu()));
}

// The appended rows are quantized exactly as the reference does (x / descale, rounded to
// nearest even, saturating): the caches match bit for bit, saturated entries included.
TEST_P(CpuFp8, AppendedRowsMatchTheReferenceBitwise) {
  KVCacheProblem p = fp8_cache_problem(DType::kBF16, 5500);
  p.seqlen_new = 5;
  p.seqlen_q = 5;
  p.input_scale = 200.f;  // some appended values / descale pass 448
  const KVCacheInputs in = make_kvcache_inputs(p);
  KVCacheOutputs tested = make_kvcache_outputs(p, in), exact = make_kvcache_outputs(p, in);
  ASSERT_TRUE(flashattn::forward_kvcache(kvcache_args(p, in, &tested), {Backend::kCpu}).ok());
  ASSERT_TRUE(
      flashattn::forward_kvcache(kvcache_args(p, in, &exact), {Backend::kReference}).ok());
  EXPECT_EQ(tested.k_cache.raw_bytes(), exact.k_cache.raw_bytes());
  EXPECT_EQ(tested.v_cache.raw_bytes(), exact.v_cache.raw_bytes());
  int saturated = 0;
  for (int64_t n = 0; n < tested.k_cache.numel(); ++n) {
    saturated += std::fabs(tested.k_cache.get(n)) == 448.f;
  }
  EXPECT_GT(saturated, 0) << "the problem meant to saturate some appended values";
}

FA_INSTANTIATE_PER_ISA(CpuFp8);

}  // namespace
}  // namespace fa_test
