// Properties of the tiled CPU backend beyond agreement with the reference: bitwise
// determinism (also across thread counts), no writes outside the outputs, masked rows,
// NaN containment, split-KV = no split, and per-thread memory independent of seqlen.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/tiled/kernel_set.hpp"
#include "support/kvcache_problem.hpp"
#include "support/naive_attention.hpp"
#include "test_cpu_backend_support.hpp"

namespace fa_test {
namespace {

using flashattn::Backend;
constexpr flashattn::Launch kCpu{Backend::kCpu};

Problem small_problem(DType dtype, uint32_t seed) {
  Problem p;
  p.dtype = dtype;
  p.batch = 2;
  p.nheads = 4;
  p.nheads_k = 2;
  p.seqlen_q = 300;
  p.seqlen_k = 280;
  p.head_dim = 40;
  p.seed = seed;
  return p;
}

struct CpuRun {
  Inputs in;
  Outputs out;
};

CpuRun run_cpu(const Problem& p, bool with_backward) {
  CpuRun run{make_inputs(p), make_outputs(p)};
  EXPECT_TRUE(flashattn::forward(forward_args(p, run.in, &run.out), kCpu).ok());
  if (with_backward) {
    EXPECT_TRUE(flashattn::backward(backward_args(p, run.in, &run.out), kCpu).ok());
  }
  return run;
}

std::vector<std::vector<uint8_t>> all_bytes(const Outputs& o) {
  return {o.out.raw_bytes(), o.lse.raw_bytes(), o.dq.raw_bytes(), o.dk.raw_bytes(),
          o.dv.raw_bytes()};
}

// The bytes of `t` outside its logical elements (the gaps of a strided view).
std::vector<uint8_t> gap_bytes(HostTensor t) {
  for (int64_t n = 0; n < t.numel(); ++n) t.set(n, 0.f);
  return t.raw_bytes();
}

using CpuProperties = CpuBackend;

TEST_P(CpuProperties, BitwiseIdenticalAcrossRunsAndThreadCounts) {
  Problem p = small_problem(DType::kBF16, 3000);
  p.window_left = 70;
  p.window_right = 20;
  p.dropout_p = 0.2f;
  const int threads = omp_get_max_threads();
  const CpuRun first = run_cpu(p, true);
  const CpuRun again = run_cpu(p, true);
  EXPECT_EQ(all_bytes(first.out), all_bytes(again.out));
  omp_set_num_threads(1);
  const CpuRun single = run_cpu(p, true);
  omp_set_num_threads(threads);
  EXPECT_EQ(all_bytes(first.out), all_bytes(single.out));
}

TEST_P(CpuProperties, StridedOutputsLeaveTheGapsAlone) {
  Problem p = small_problem(DType::kF16, 3010);
  p.strided = true;
  CpuRun run{make_inputs(p), make_outputs(p)};
  const std::vector<uint8_t> out_gaps = gap_bytes(run.out.out);
  const std::vector<uint8_t> dq_gaps = gap_bytes(run.out.dq);
  const std::vector<uint8_t> dk_gaps = gap_bytes(run.out.dk);
  ASSERT_TRUE(flashattn::forward(forward_args(p, run.in, &run.out), kCpu).ok());
  ASSERT_TRUE(flashattn::backward(backward_args(p, run.in, &run.out), kCpu).ok());
  EXPECT_EQ(out_gaps, gap_bytes(run.out.out));
  EXPECT_EQ(dq_gaps, gap_bytes(run.out.dq));
  EXPECT_EQ(dk_gaps, gap_bytes(run.out.dk));
}

TEST_P(CpuProperties, FullyMaskedRowsGiveZerosAndInfiniteLse) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Problem p = small_problem(dtype, 3020);
    p.seqlen_q = 250;
    p.seqlen_k = 100;  // causal: rows i < 150 see no key
    p.causal = true;
    const CpuRun run = run_cpu(p, true);
    for (const HostTensor* t : {&run.out.out, &run.out.lse, &run.out.dq, &run.out.dk,
                                &run.out.dv}) {
      EXPECT_FALSE(has_nan(*t));
    }
    for (int b = 0; b < p.batch; ++b) {
      for (int h = 0; h < p.nheads; ++h) {
        const Rows out = head_rows(run.out.out, b, h, 0, p.seqlen_q);
        const Rows dq = head_rows(run.out.dq, b, h, 0, p.seqlen_q);
        for (int i = 0; i < p.seqlen_q; ++i) {
          const bool masked = i < p.seqlen_q - p.seqlen_k;
          EXPECT_EQ(masked, std::isinf(lse_at(p, run.out.lse, b, h, i))) << "row " << i;
          if (!masked) continue;
          for (double x : out[i]) ASSERT_EQ(x, 0.0);
          for (double x : dq[i]) ASSERT_EQ(x, 0.0);
        }
      }
    }
  }
}

TEST_P(CpuProperties, NanInOneQueryRowStaysInThatRow) {
  Problem p = small_problem(DType::kF32, 3030);
  p.causal = true;
  const CpuRun clean = run_cpu(p, false);
  Inputs dirty_in = clean.in;
  const int b = 1, row = 130, head = 2;
  dirty_in.q.set(((int64_t(b) * p.seqlen_q + row) * p.nheads + head) * p.head_dim,
                 std::numeric_limits<float>::quiet_NaN());
  Outputs dirty = make_outputs(p);
  ASSERT_TRUE(flashattn::forward(forward_args(p, dirty_in, &dirty), kCpu).ok());
  for (int bb = 0; bb < p.batch; ++bb) {
    for (int h = 0; h < p.nheads; ++h) {
      const Rows got = head_rows(dirty.out, bb, h, 0, p.seqlen_q);
      const Rows expected = head_rows(clean.out.out, bb, h, 0, p.seqlen_q);
      for (int i = 0; i < p.seqlen_q; ++i) {
        if (bb == b && h == head && i == row) {
          EXPECT_TRUE(std::isnan(got[i][0]));
        } else {
          ASSERT_EQ(got[i], expected[i]) << "batch " << bb << " head " << h << " row " << i;
        }
      }
    }
  }
}

// Split-KV changes only how partial results are merged (fp32 rounding), and the cache
// is appended to identically.
TEST_P(CpuProperties, SplitKvMatchesNoSplit) {
  KVCacheProblem p;
  p.dtype = DType::kF32;
  p.batch = 2;
  p.nheads = 4;
  p.nheads_k = 1;
  p.seqlen_q = 3;
  p.seqlen_new = 3;
  p.seqlen_cache = 900;
  p.head_dim = 64;
  p.causal = true;
  p.seed = 3040;
  const KVCacheInputs in = make_kvcache_inputs(p);
  KVCacheOutputs unsplit = make_kvcache_outputs(p, in);
  p.num_splits = 1;
  ASSERT_TRUE(flashattn::forward_kvcache(kvcache_args(p, in, &unsplit), kCpu).ok());
  for (int splits : {2, 5, 9}) {
    p.num_splits = splits;
    KVCacheOutputs split = make_kvcache_outputs(p, in);
    ASSERT_TRUE(flashattn::forward_kvcache(kvcache_args(p, in, &split), kCpu).ok());
    EXPECT_LE(max_abs_diff(split.out, unsplit.out), 1e-6) << splits << " splits";
    EXPECT_LE(max_abs_diff(split.lse, unsplit.lse), 1e-5) << splits << " splits";
    EXPECT_EQ(max_abs_diff(split.k_cache, unsplit.k_cache), 0.0);
  }
}

// O(threads x tile): what a thread needs does not grow with the sequence.
TEST_P(CpuProperties, ScratchIndependentOfSeqlen) {
  const flashattn::cpu::tiled::KernelSet& kernels = flashattn::cpu::tiled::selected_kernels();
  flashattn::core::BackwardParams params;
  params.head_dim = 128;
  params.head_dim_v = 128;
  params.seqlen_q = params.seqlen_k = 1024;
  const size_t forward_small = kernels.forward_scratch_floats(params);
  const size_t backward_small = kernels.backward_scratch_floats(params);
  params.seqlen_q = params.seqlen_k = 1 << 20;
  EXPECT_EQ(forward_small, kernels.forward_scratch_floats(params));
  EXPECT_EQ(backward_small, kernels.backward_scratch_floats(params));
  EXPECT_LT(forward_small * sizeof(float), size_t{4} << 20);
}

FA_INSTANTIATE_PER_ISA(CpuProperties);

}  // namespace
}  // namespace fa_test
