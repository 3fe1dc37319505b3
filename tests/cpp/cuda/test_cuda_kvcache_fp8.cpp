// The CUDA forward_kvcache over an e4m3 (FP8) cache, q and out in fp16 or bf16, against the
// reference on the same quantized cache (fa_test::check_kvcache: out, lse and the updated
// caches under FA2's rule): decode and prefill tiles, contiguous and paged, split-KV, GQA and
// MQA, appends with descales per (batch entry, KV head), causal, cache lengths per entry,
// rotary, cache_batch_idx and leftpad, head dims run by a wider kernel or through the padded
// copies. Besides: every e4m3 pattern converts exactly, the appended bytes are the CPU
// backend's bit for bit, and a wrong descale fails the same rule (the negative control).
// CudaKVCacheSanitize.Fp8Problems holds the small problems compute-sanitizer runs.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "cuda_test_support.hpp"
#include "support/kvcache_problem.hpp"

namespace fa_cuda_test {
namespace {

using fa_test::KVCacheProblem;
using flashattn::Backend;
using flashattn::DType;

class CudaKVCacheFp8 : public CudaTestWithParam<DType> {
 protected:
  KVCacheProblem problem(int head_dim = 128) {
    KVCacheProblem p;
    p.dtype = GetParam();
    p.fp8_cache = true;
    p.batch = 3;
    p.nheads = 8;
    p.nheads_k = 2;
    p.seqlen_q = 1;
    p.head_dim = head_dim;
    p.seqlen_cache = 300;
    p.seed = (GetParam() == DType::kBF16 ? 97000u : 87000u) + next_seed_++;
    return p;
  }

  static void expect_passes_on_cuda(const KVCacheProblem& p) {
    expect_passes(fa_test::check_kvcache(p, cuda_runner()));
  }

 private:
  uint32_t next_seed_ = 1;
};

TEST_P(CudaKVCacheFp8, DecodeContiguousAndPaged) {
  for (int page_size : {0, 16, 256}) {
    for (int seqlen_new : {0, 1}) {
      KVCacheProblem p = problem();
      p.page_size = page_size;
      p.seqlen_cache = 700;
      p.seqlen_new = seqlen_new;
      expect_passes_on_cuda(p);
    }
  }
}

// Head dims the e4m3 kernels serve: 128 and 256 compiled, 64 and 96 in the 128 kernel, 72
// (not a multiple of 16) through the padded copies.
TEST_P(CudaKVCacheFp8, HeadDims) {
  for (int d : {64, 96, 128, 256, 72}) {
    KVCacheProblem p = problem(d);
    p.seqlen_new = 1;
    expect_passes_on_cuda(p);
  }
}

// Appends of several rows with causal and windowed masks relative to the updated cache, and
// cache lengths per entry (0 included), with descales per (batch entry, KV head) or one.
TEST_P(CudaKVCacheFp8, AppendCausalAndLengthsPerEntry) {
  for (bool one_descale : {false, true}) {
    KVCacheProblem p = problem();
    p.batch = 4;
    p.cache_seqlens = {0, 1, 77, 250};
    p.seqlen_q = 3;
    p.seqlen_new = 3;
    p.causal = true;
    p.one_descale = one_descale;
    expect_passes_on_cuda(p);
  }
  KVCacheProblem windowed = problem();
  windowed.seqlen_q = 5;
  windowed.seqlen_new = 5;
  windowed.window_left = 30;
  windowed.window_right = 0;
  expect_passes_on_cuda(windowed);
}

// Packed rows past the decode tile: the KV kernel's prefill tile (the forward kernel reads no
// e4m3 cache), contiguous and paged.
TEST_P(CudaKVCacheFp8, PrefillTile) {
  for (int d : {128, 256}) {
    for (int page_size : {0, 32}) {
      KVCacheProblem p = problem(d);
      p.seqlen_q = 70;
      p.seqlen_new = 70;
      p.seqlen_cache = 400;
      p.page_size = page_size;
      p.causal = true;
      expect_passes_on_cuda(p);
    }
  }
}

TEST_P(CudaKVCacheFp8, SplitKv) {
  for (int splits : {0, 1, 3, 64}) {
    KVCacheProblem p = problem();
    p.batch = 2;
    p.seqlen_cache = 3000;
    p.cache_seqlens = {2999, 1700};
    p.seqlen_new = 1;
    p.num_splits = splits;
    expect_passes_on_cuda(p);
  }
  KVCacheProblem paged = problem();
  paged.page_size = 16;
  paged.seqlen_cache = 3000;
  paged.num_splits = 0;
  expect_passes_on_cuda(paged);
}

TEST_P(CudaKVCacheFp8, GqaMqaAlibiSoftcap) {
  KVCacheProblem mqa = problem();
  mqa.nheads = 8;
  mqa.nheads_k = 1;
  mqa.seqlen_new = 1;
  expect_passes_on_cuda(mqa);
  KVCacheProblem wide = problem();
  wide.nheads = 32;
  wide.nheads_k = 2;  // 16 query heads per KV head: a full decode tile
  expect_passes_on_cuda(wide);
  KVCacheProblem shaped = problem();
  shaped.alibi = true;
  shaped.softcap = 30.f;
  shaped.seqlen_new = 2;
  shaped.seqlen_q = 2;
  shaped.causal = true;
  expect_passes_on_cuda(shaped);
}

TEST_P(CudaKVCacheFp8, RotaryBatchIdxAndLeftpad) {
  for (bool interleaved : {false, true}) {
    KVCacheProblem p = problem();
    p.seqlen_new = 4;
    p.seqlen_q = 4;
    p.rotary_dim = 64;
    p.rotary_interleaved = interleaved;
    p.causal = true;
    expect_passes_on_cuda(p);
  }
  KVCacheProblem indexed = problem();
  indexed.cache_batch_idx = true;
  indexed.seqlen_new = 1;
  indexed.cache_leftpad = {0, 3, 17};
  indexed.cache_seqlens = {10, 200, 37};
  expect_passes_on_cuda(indexed);
}

// The decode tile multiplies in fp16 whatever q's type, each q row scaled by a power of two
// of its own. Each (batch entry, KV head) gets q rows of another magnitude, k's descale
// divided by it so that the logits stay of order one: in bf16 past fp16's range (1e30, 3e5)
// and below its normal range (1e-6, 1e-30), where an unscaled conversion would overflow or
// lose the digits the scores need; inside a group the rows differ by factors of 2 and 4,
// so a row read with another row's factor would fail. Contiguous, paged and split.
TEST_P(CudaKVCacheFp8, QueryRowsOfEveryMagnitude) {
  const bool bf16 = GetParam() == DType::kBF16;
  const std::vector<float> magnitudes =
      bf16 ? std::vector<float>{1e30f, 1e-30f, 3e5f, 1e-6f, 1.f, 7e4f}
           : std::vector<float>{1000.f, 1e-3f, 100.f, 0.01f, 1.f, 30.f};
  const float in_group[4] = {1.f, 0.25f, 2.f, 0.5f};
  for (int page_size : {0, 16}) {
    for (int splits : {1, 3}) {
      KVCacheProblem p = problem();
      p.page_size = page_size;
      p.num_splits = splits;
      p.seqlen_cache = 600;
      p.seqlen_new = 0;
      fa_test::KVCacheInputs in = fa_test::make_kvcache_inputs(p);
      const int group = p.nheads / p.nheads_k;
      for (int64_t n = 0; n < in.q.numel(); ++n) {
        const int head = static_cast<int>(n / p.head_dim % p.nheads);
        const int b = static_cast<int>(n / (static_cast<int64_t>(p.head_dim) * p.nheads));
        const float magnitude = magnitudes[(b * p.nheads_k + head / group) % magnitudes.size()];
        in.q.set(n, in.q.get(n) * magnitude * in_group[head % group % 4]);
      }
      ASSERT_EQ(in.k_descale.numel(), p.batch * p.nheads_k);
      for (int64_t n = 0; n < in.k_descale.numel(); ++n) {
        in.k_descale.set(n, in.k_descale.get(n) / magnitudes[n % magnitudes.size()]);
      }
      expect_passes(fa_test::check_kvcache(p, cuda_runner(), in));
    }
  }
}

// With one key, out is v * v_descale: a d = 256 row holding the 256 patterns comes back
// exactly (fp16 and bf16 hold every e4m3 value), NaN patterns as NaN.
TEST_P(CudaKVCacheFp8, EveryE4m3PatternConvertsExactly) {
  KVCacheProblem p = problem(256);
  p.batch = 1;
  p.nheads = 3;
  p.nheads_k = 1;
  p.seqlen_cache = 16;
  p.cache_seqlens = {1};
  const fa_test::KVCacheInputs made = fa_test::make_kvcache_inputs(p);
  fa_test::KVCacheInputs in = made;
  auto* v_bytes = static_cast<uint8_t*>(in.v_cache.view().data);
  for (int i = 0; i < 256; ++i) v_bytes[i] = static_cast<uint8_t>(i);  // position 0, head 0
  in.v_descale.fill(1.f);
  fa_test::KVCacheOutputs out = fa_test::make_kvcache_outputs(p, in);
  const flashattn::Status status =
      cuda_runner().forward_kvcache(fa_test::kvcache_args(p, in, &out));
  ASSERT_TRUE(status.ok()) << status.message();
  for (int h = 0; h < p.nheads; ++h) {
    for (int i = 0; i < 256; ++i) {
      const float expected = flashattn::core::e4m3_to_float(static_cast<uint8_t>(i));
      const float got = out.out.get(h * 256 + i);
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(got)) << "pattern " << i;
      } else {
        EXPECT_EQ(got, expected) << "pattern " << i << ", head " << h;
      }
    }
  }
}

// The appended rows are quantized as the CPU backends do (x / descale, nearest even,
// saturating at 448): the caches match the tiled CPU backend's and the reference's bit for
// bit, saturated entries included, contiguous and paged. (Rotated keys are compared within
// the rounding of the rotation, by check_kvcache.)
TEST_P(CudaKVCacheFp8, AppendedBytesMatchTheCpuBackends) {
  for (int page_size : {0, 16}) {
    KVCacheProblem p = problem();
    p.seqlen_new = 5;
    p.seqlen_q = 5;
    p.page_size = page_size;
    p.input_scale = 200.f;  // some appended values / descale pass 448
    const fa_test::KVCacheInputs in = fa_test::make_kvcache_inputs(p);
    fa_test::KVCacheOutputs gpu = fa_test::make_kvcache_outputs(p, in);
    const flashattn::Status ran =
        cuda_runner().forward_kvcache(fa_test::kvcache_args(p, in, &gpu));
    ASSERT_TRUE(ran.ok()) << ran.message();
    for (Backend backend : {Backend::kCpu, Backend::kReference}) {
      fa_test::KVCacheOutputs cpu = fa_test::make_kvcache_outputs(p, in);
      ASSERT_TRUE(
          flashattn::forward_kvcache(fa_test::kvcache_args(p, in, &cpu), {backend}).ok());
      EXPECT_EQ(gpu.k_cache.raw_bytes(), cpu.k_cache.raw_bytes()) << p.describe();
      EXPECT_EQ(gpu.v_cache.raw_bytes(), cpu.v_cache.raw_bytes()) << p.describe();
    }
    int saturated = 0;
    for (int64_t n = 0; n < gpu.v_cache.numel(); ++n) {
      saturated += std::fabs(gpu.v_cache.get(n)) == 448.f;
    }
    EXPECT_GT(saturated, 0) << "the problem meant to saturate some appended values";
  }
}

// The negative control: the same rule fails when the kernel reads the descales of the wrong
// (batch entry, KV head), as a mixed-up index would, for k's (the score scale) and v's (the
// output factor), on the decode and the prefill tile.
TEST_P(CudaKVCacheFp8, AWrongDescaleFails) {
  for (int seqlen_q : {1, 40}) {
    for (int which = 0; which < 2; ++which) {
      KVCacheProblem p = problem();
      p.seqlen_q = seqlen_q;
      const fa_test::KVCacheInputs in = fa_test::make_kvcache_inputs(p);
      const fa_test::HostTensor& right = which == 0 ? in.v_descale : in.k_descale;
      fa_test::HostTensor wrong = right;
      for (int64_t n = 0; n < wrong.numel(); ++n) wrong.set(n, right.get(wrong.numel() - 1 - n));
      fa_test::KVCacheOutputs tested = fa_test::make_kvcache_outputs(p, in);
      fa_test::KVCacheOutputs exact = fa_test::make_kvcache_outputs(p, in);
      fa_test::KVCacheOutputs lowp = fa_test::make_kvcache_outputs(p, in);
      flashattn::KVCacheArgs args = fa_test::kvcache_args(p, in, &tested);
      (which == 0 ? args.descale.v : args.descale.k) = wrong.view();
      const flashattn::Status ran = cuda_runner().forward_kvcache(args);
      ASSERT_TRUE(ran.ok()) << ran.message();
      using flashattn::cpu::ReferencePrecision;
      ASSERT_TRUE(fa_test::reference_runner(ReferencePrecision::kExact)
                      .forward_kvcache(fa_test::kvcache_args(p, in, &exact))
                      .ok());
      ASSERT_TRUE(fa_test::reference_runner(ReferencePrecision::kLowPrecisionNaive)
                      .forward_kvcache(fa_test::kvcache_args(p, in, &lowp))
                      .ok());
      const fa_test::ToleranceReport report = fa_test::tolerance_check(
          tested.out, exact.out, lowp.out, fa_test::tolerance_eps(p.dtype, exact.out));
      EXPECT_FALSE(report.passed()) << (which == 0 ? "v" : "k") << " descale, seqlen_q "
                                    << seqlen_q << ": error " << report.error << " within "
                                    << report.bound;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaKVCacheFp8, ::testing::Values(DType::kF16, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(flashattn::to_string(info.param));
                         });

using CudaKVCacheSanitize = CudaTest;

// Small e4m3 problems for compute-sanitizer: a split decode with an append over a contiguous
// cache whose ring turns over (d = 128: 4 stages), a paged one with a leftpad that is not a
// page multiple, the prefill tile (a block-wide conversion and barrier), and the padded copies.
TEST_F(CudaKVCacheSanitize, Fp8Problems) {
  KVCacheProblem decode;
  decode.dtype = DType::kBF16;
  decode.fp8_cache = true;
  decode.batch = 2;
  decode.nheads = 8;
  decode.nheads_k = 2;
  decode.head_dim = 128;
  decode.seqlen_cache = 700;
  decode.cache_seqlens = {650, 90};
  decode.seqlen_new = 1;
  decode.num_splits = 2;
  KVCacheProblem paged = decode;
  paged.dtype = DType::kF16;
  paged.page_size = 16;
  paged.cache_leftpad = {5, 0};
  paged.num_splits = 1;
  paged.causal = true;
  KVCacheProblem prefill = decode;
  prefill.head_dim = 256;
  prefill.cache_seqlens = {150, 30};
  prefill.seqlen_q = 40;
  prefill.seqlen_new = 40;
  prefill.causal = true;
  KVCacheProblem padded = paged;
  padded.head_dim = 40;
  padded.num_splits = 2;
  for (const KVCacheProblem& p : {decode, paged, prefill, padded}) {
    expect_passes(fa_test::check_kvcache(p, cuda_runner()));
  }
}

}  // namespace
}  // namespace fa_cuda_test
