// Shared by the GPU test files: fixtures that skip cleanly when no GPU is visible (the CUDA
// tests are built into every CUDA build, GPU or not), dense problems by shape, and the
// expectation on a shared check.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "device_runner.hpp"
#include "flashattn/flashattn.hpp"
#include "support/backend_runner.hpp"
#include "support/reference_problem.hpp"

namespace fa_cuda_test {

template <class Base>
class OnGpu : public Base {
 protected:
  void SetUp() override {
    if (!flashattn::cuda_available()) GTEST_SKIP() << "no CUDA device is visible";
  }
};

using CudaTest = OnGpu<::testing::Test>;
template <class Param>
using CudaTestWithParam = OnGpu<::testing::TestWithParam<Param>>;

struct Shape {
  int batch, nheads, nheads_k, seqlen_q, seqlen_k, head_dim;
};

inline fa_test::Problem dense_problem(flashattn::DType dtype, const Shape& s, uint32_t seed) {
  fa_test::Problem p;
  p.dtype = dtype;
  p.batch = s.batch;
  p.nheads = s.nheads;
  p.nheads_k = s.nheads_k;
  p.seqlen_q = s.seqlen_q;
  p.seqlen_k = s.seqlen_k;
  p.head_dim = s.head_dim;
  p.seed = seed;
  return p;
}

inline void expect_passes(const fa_test::CheckResult& result) {
  EXPECT_TRUE(result.passed()) << result.summary();
}

// cuda_runner() with BackwardArgs::deterministic set.
inline fa_test::Runner deterministic_runner() {
  fa_test::Runner runner = cuda_runner();
  const auto backward = runner.backward;
  runner.name += " (deterministic)";
  runner.backward = [backward](const flashattn::BackwardArgs& args) {
    flashattn::BackwardArgs copy = args;
    copy.deterministic = true;
    return backward(copy);
  };
  return runner;
}

// A suite parametrized by dtype that draws a fresh problem (new seed) on every call.
// `seed_base` keeps the suites' inputs apart.
class CudaDtypeSuite : public CudaTestWithParam<flashattn::DType> {
 protected:
  explicit CudaDtypeSuite(uint32_t seed_base) : seed_base_(seed_base) {}

  fa_test::Problem problem(const Shape& s) {
    const uint32_t dtype_seeds = GetParam() == flashattn::DType::kBF16 ? 50000u : 0u;
    return dense_problem(GetParam(), s, seed_base_ + dtype_seeds + next_seed_++);
  }

  // A varlen problem: one entry per sequence.
  fa_test::Problem varlen(int nheads, int nheads_k, int head_dim, std::vector<int> seqlens_q,
                          std::vector<int> seqlens_k) {
    fa_test::Problem p = problem({0, nheads, nheads_k, 0, 0, head_dim});
    p.seqlens_q = std::move(seqlens_q);
    p.seqlens_k = std::move(seqlens_k);
    return p;
  }

 private:
  uint32_t seed_base_;
  uint32_t next_seed_ = 1;
};

}  // namespace fa_cuda_test
