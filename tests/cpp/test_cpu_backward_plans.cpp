// The two plans of the tiled CPU backward (backward.cpp): the dK/dV and dQ passes, and the
// one pass per (sequence, KV head). The driver picks between them by the thread count and
// the scratch size, which is only sound if they give the same bits: each test runs both,
// forced, on the same inputs and compares dq, dk and dv byte for byte, once per ISA build
// (the emulated bf16 builds take the bf16 products and their fused pairs).
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cpu/tiled/tiled.hpp"
#include "test_cpu_backend_support.hpp"

namespace fa_test {
namespace {

using flashattn::cpu::tiled::BackwardPlan;
using flashattn::cpu::tiled::force_backward_plan;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Problem plan_problem(DType dtype, uint32_t seed) {
  Problem p;
  p.dtype = dtype;
  p.batch = 2;
  p.nheads = 4;
  p.nheads_k = 2;
  p.seqlen_q = 211;  // not a multiple of any block size
  p.seqlen_k = 305;
  p.head_dim = 64;
  p.seed = seed;
  return p;
}

// Element (b, row, head, e) of a dense [batch, seqlen, heads, d] tensor.
int64_t dense_index(const Problem& p, int seqlen, int heads, int b, int row, int head, int e) {
  return ((static_cast<int64_t>(b) * seqlen + row) * heads + head) * p.head_dim + e;
}

class CpuBackwardPlans : public CpuBackend {
 protected:
  void TearDown() override {
    force_backward_plan(BackwardPlan::kAutomatic);
    CpuBackend::TearDown();
  }

  // dq, dk and dv of the backward under `plan`, after one forward shared by the plans.
  static std::vector<std::vector<uint8_t>> gradients(const Problem& p, const Inputs& in,
                                                     const Outputs& forward, BackwardPlan plan) {
    force_backward_plan(plan);
    Outputs out = make_outputs(p);
    out.out = forward.out;
    out.lse = forward.lse;
    const flashattn::Launch launch{flashattn::Backend::kCpu};
    EXPECT_TRUE(flashattn::backward(backward_args(p, in, &out), launch).ok());
    return {out.dq.raw_bytes(), out.dk.raw_bytes(), out.dv.raw_bytes()};
  }

  // Both plans on `in`, under each thread count: the same bytes.
  static void expect_same_bits(const Problem& p, const Inputs& in) {
    SCOPED_TRACE(p.describe());
    force_backward_plan(BackwardPlan::kAutomatic);
    Outputs forward = make_outputs(p);
    ASSERT_TRUE(
        flashattn::forward(forward_args(p, in, &forward), {flashattn::Backend::kCpu}).ok());
    const int threads = omp_get_max_threads();
    for (int thread_count : {1, 3}) {
      omp_set_num_threads(thread_count);
      const auto two = gradients(p, in, forward, BackwardPlan::kTwoPasses);
      const auto one = gradients(p, in, forward, BackwardPlan::kOnePass);
      const char* names[] = {"dq", "dk", "dv"};
      for (size_t t = 0; t < two.size(); ++t) {
        EXPECT_TRUE(one[t] == two[t]) << names[t] << ", " << thread_count << " threads";
      }
    }
    omp_set_num_threads(threads);
  }

  static void expect_same_bits(const Problem& p) { expect_same_bits(p, make_inputs(p)); }
};

TEST_P(CpuBackwardPlans, MasksAndLengths) {
  uint32_t seed = 3000;
  const std::pair<int, int> windows[] = {{-1, -1}, {-1, 0}, {50, 20}, {0, 0}, {7, -1}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (auto [left, right] : windows) {
      for (auto [sq, sk] : {std::pair{211, 305}, std::pair{305, 97}, std::pair{1, 130}}) {
        Problem p = plan_problem(dtype, seed++);
        p.seqlen_q = sq;
        p.seqlen_k = sk;
        p.window_left = left;
        p.window_right = right;
        expect_same_bits(p);
      }
    }
  }
}

TEST_P(CpuBackwardPlans, GqaMqaAndHeadDims) {
  uint32_t seed = 3100;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int nheads_k : {1, 3}) {
      for (int d : {59, 128}) {
        Problem p = plan_problem(dtype, seed++);
        p.nheads = 6;
        p.nheads_k = nheads_k;
        p.head_dim = d;
        p.causal = nheads_k == 1;
        expect_same_bits(p);
      }
    }
  }
}

TEST_P(CpuBackwardPlans, DropoutSoftcapAlibi) {
  uint32_t seed = 3200;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool causal : {false, true}) {
      Problem p = plan_problem(dtype, seed++);
      p.causal = causal;
      p.dropout_p = 0.3f;
      p.dropout_seed = 0xabcdull << 32 | seed;
      expect_same_bits(p);
      p.dropout_p = 0.f;
      p.softcap = 5.f;
      p.input_scale = 2.f;
      expect_same_bits(p);
      p.softcap = 0.f;
      p.alibi = true;
      p.alibi_per_batch = causal;
      expect_same_bits(p);
    }
  }
}

TEST_P(CpuBackwardPlans, VarlenAndStrided) {
  uint32_t seed = 3300;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Problem p = plan_problem(dtype, seed++);
    p.seqlens_q = {1, 130, 0, 97, 250};
    p.seqlens_k = {5, 200, 17, 96, 150};
    p.causal = true;
    expect_same_bits(p);
    p.seqused_k = {3, 150, 0, 96, 101};
    p.causal = false;
    p.window_left = 30;
    expect_same_bits(p);
    Problem strided = plan_problem(dtype, seed++);
    strided.strided = true;
    strided.causal = true;
    expect_same_bits(strided);
  }
}

// A NaN or an infinity in a partly masked tile is set aside in each product that reads
// it (nonfinite.hpp); the one pass runs those products in the same pairs.
TEST_P(CpuBackwardPlans, NonfiniteInputs) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (float value : {kNan, kInf}) {
      Problem p = plan_problem(dtype, 3400);
      p.causal = true;
      Inputs in = make_inputs(p);
      in.v.set(dense_index(p, p.seqlen_k, p.nheads_k, 1, 200, 1, 3), value);
      in.k.set(dense_index(p, p.seqlen_k, p.nheads_k, 0, 150, 0, 5), value);
      in.q.set(dense_index(p, p.seqlen_q, p.nheads, 1, 100, 2, 0), value);
      in.dout.set(dense_index(p, p.seqlen_q, p.nheads, 0, 120, 3, 7), value);
      expect_same_bits(p, in);
    }
  }
}

FA_INSTANTIATE_PER_ISA(CpuBackwardPlans);

}  // namespace
}  // namespace fa_test
