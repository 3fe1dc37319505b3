// The tiled CPU backward (dq, dk, dv after its own forward) against the reference under
// the tolerance rule, over the reference's feature suites, once per supported ISA; and
// its determinism.
#include <omp.h>

#include <cstring>
#include <vector>

#include "test_cpu_backend_support.hpp"

namespace fa_test {
namespace {

const DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

Problem base_problem(DType dtype, uint32_t seed) {
  Problem p;
  p.dtype = dtype;
  p.batch = 2;
  p.nheads = 4;
  p.nheads_k = 2;
  p.seqlen_q = 113;
  p.seqlen_k = 157;
  p.head_dim = 64;
  p.seed = seed;
  // In fp32 the yardstick is as precise as the kernel (both accumulate dP and D = dO.O
  // in fp32, whose cancellation dominates dq/dk), so "2x its error" is a coin flip on the
  // worst of ~10^4 elements; eps of 8 ulp at the largest gradient absorbs that.
  if (dtype == DType::kF32) p.eps_scale = 4.0;
  return p;
}

using CpuBackward = CpuBackend;

TEST_P(CpuBackward, PlainAllDtypes) {
  uint32_t seed = 1000;
  for (DType dtype : kDtypes) {
    expect_passes(check_backward(base_problem(dtype, seed++), cpu()));
  }
}

TEST_P(CpuBackward, CausalAndWindowsBothWays) {
  uint32_t seed = 1010;
  const std::pair<int, int> windows[] = {{-1, 0}, {3, 5}, {0, 0}, {4, -1}, {40, 40}};
  for (auto [left, right] : windows) {
    for (auto [sq, sk] : {std::pair{50, 230}, std::pair{230, 50}, std::pair{200, 200}}) {
      Problem p = base_problem(kDtypes[seed % 3], seed);
      ++seed;
      p.seqlen_q = sq;
      p.seqlen_k = sk;
      p.window_left = left;
      p.window_right = right;
      expect_passes(check_backward(p, cpu()));
    }
  }
}

TEST_P(CpuBackward, AlibiAndSoftcap) {
  uint32_t seed = 1040;
  for (DType dtype : kDtypes) {
    for (bool causal : {false, true}) {
      Problem p = base_problem(dtype, seed++);
      p.alibi = true;
      p.alibi_per_batch = causal;
      p.causal = causal;
      p.softcap = 5.f;
      p.input_scale = 2.f;
      expect_passes(check_backward(p, cpu()));
      p.softcap = 0.f;
      expect_passes(check_backward(p, cpu()));
    }
  }
}

TEST_P(CpuBackward, ExtremeLogits) {
  Problem p = base_problem(DType::kF32, 1060);
  p.softmax_scale = 0.7f;
  p.input_scale = 5.f;
  expect_passes(check_backward(p, cpu()));
}

TEST_P(CpuBackward, HeadDimsAndShortSequences) {
  uint32_t seed = 1070;
  for (int d : {1, 7, 32, 59, 96, 128, 160, 256}) {
    for (int n : {1, 97}) {
      Problem p = base_problem(kDtypes[seed % 3], seed);
      ++seed;
      p.head_dim = d;
      p.seqlen_q = n;
      p.seqlen_k = n + 20;
      p.causal = d % 2 == 1;
      expect_passes(check_backward(p, cpu()));
    }
  }
}

TEST_P(CpuBackward, GqaAndMqaSumOverTheGroup) {
  uint32_t seed = 1100;
  for (DType dtype : kDtypes) {
    for (int nheads_k : {1, 2}) {
      Problem p = base_problem(dtype, seed++);
      p.nheads = 6;
      p.nheads_k = nheads_k;
      p.causal = nheads_k == 1;
      expect_passes(check_backward(p, cpu()));
    }
  }
}

TEST_P(CpuBackward, VarlenWithSequsedK) {
  uint32_t seed = 1120;
  for (DType dtype : kDtypes) {
    Problem p = base_problem(dtype, seed++);
    p.seqlens_q = {1, 130, 0, 97, 150};
    p.seqlens_k = {5, 200, 17, 96, 150};
    p.causal = dtype == DType::kF16;
    expect_passes(check_backward(p, cpu()));
    p.seqused_k = {3, 150, 0, 96, 101};  // keys past seqused_k get zero gradients
    expect_passes(check_backward(p, cpu()));
  }
}

TEST_P(CpuBackward, StridedViews) {
  Problem p = base_problem(DType::kBF16, 1140);
  p.strided = true;
  p.causal = true;
  expect_passes(check_backward(p, cpu()));
}

TEST_P(CpuBackward, DropoutRegeneratesTheForwardMask) {
  uint32_t seed = 1150;
  for (DType dtype : kDtypes) {
    for (float p_drop : {0.1f, 0.6f}) {
      Problem p = base_problem(dtype, seed++);
      p.dropout_p = p_drop;
      p.dropout_seed = 0xfeedull << 40 | seed;
      p.dropout_offset = 12345 + seed;
      p.causal = p_drop > 0.5f;
      expect_passes(check_backward(p, cpu()));
    }
  }
  Problem varlen = base_problem(DType::kF32, seed);
  varlen.seqlens_q = {33, 120};
  varlen.seqlens_k = {97, 70};
  varlen.dropout_p = 0.25f;
  varlen.softcap = 4.f;
  expect_passes(check_backward(varlen, cpu()));
}

// Two runs of the same backward give the same bits (no order-dependent accumulation),
// including with every thread busy on a GQA problem.
TEST_P(CpuBackward, BitwiseDeterministic) {
  for (DType dtype : kDtypes) {
    Problem p = base_problem(dtype, 1170);
    p.nheads = 8;
    p.nheads_k = 2;
    p.seqlen_q = 300;
    p.seqlen_k = 300;
    p.causal = true;
    p.dropout_p = 0.1f;
    const Inputs in = make_inputs(p);
    std::vector<std::vector<uint8_t>> first;
    for (int run = 0; run < 2; ++run) {
      Outputs out = make_outputs(p);
      const flashattn::Launch launch{flashattn::Backend::kCpu};
      ASSERT_TRUE(flashattn::forward(forward_args(p, in, &out), launch).ok());
      flashattn::BackwardArgs args = backward_args(p, in, &out);
      args.deterministic = true;
      ASSERT_TRUE(flashattn::backward(args, launch).ok());
      const std::vector<std::vector<uint8_t>> bytes = {
          out.out.raw_bytes(), out.lse.raw_bytes(), out.dq.raw_bytes(), out.dk.raw_bytes(),
          out.dv.raw_bytes()};
      if (run == 0) {
        first = bytes;
      } else {
        for (size_t t = 0; t < bytes.size(); ++t) {
          EXPECT_TRUE(bytes[t] == first[t]) << "tensor " << t;
        }
      }
    }
  }
}

// The blocks a backward task takes follow the thread count (kernel_set.hpp,
// backward_task_blocks): one thread runs every block of a head in one task, many threads
// one block per task. dq, dk and dv keep their bits, over a causal mask, a window and
// queries and keys of different lengths.
TEST_P(CpuBackward, BitwiseIdenticalAcrossThreadCounts) {
  const std::pair<int, int> windows[] = {{-1, 0}, {70, 20}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (auto [left, right] : windows) {
      Problem p = base_problem(dtype, 1190);
      p.batch = 1;
      p.seqlen_q = 300;
      p.seqlen_k = 290;
      p.window_left = left;
      p.window_right = right;
      const Inputs in = make_inputs(p);
      const int threads = omp_get_max_threads();
      std::vector<std::vector<uint8_t>> first;
      for (int thread_count : {1, 64}) {
        omp_set_num_threads(thread_count);
        Outputs out = make_outputs(p);
        const flashattn::Launch launch{flashattn::Backend::kCpu};
        ASSERT_TRUE(flashattn::forward(forward_args(p, in, &out), launch).ok());
        ASSERT_TRUE(flashattn::backward(backward_args(p, in, &out), launch).ok());
        const std::vector<std::vector<uint8_t>> bytes = {out.dq.raw_bytes(), out.dk.raw_bytes(),
                                                         out.dv.raw_bytes()};
        if (first.empty()) {
          first = bytes;
        } else {
          for (size_t t = 0; t < bytes.size(); ++t) {
            EXPECT_TRUE(bytes[t] == first[t]) << "tensor " << t << ", window " << left;
          }
        }
      }
      omp_set_num_threads(threads);
    }
  }
}

FA_INSTANTIATE_PER_ISA(CpuBackward);

}  // namespace
}  // namespace fa_test
