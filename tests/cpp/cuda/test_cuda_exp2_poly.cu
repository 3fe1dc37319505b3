// prim::thread::exp2_poly, the MUFU-free 2^x that the Hopper forward's softmax computes a
// share of its weights with (forward_tuning.hpp): on the GPU over a dense grid of x against
// exp2 in fp64, at each degree, with the values where a softmax needs it to agree with
// exp2_approx (the MUFU's ex2.approx.ftz) exactly: -inf and everything at or below -127 give
// 0, NaN gives NaN, 0 gives about 1.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cuda/prim/math.cuh"
#include "cuda_test_support.hpp"

namespace fa_cuda_test {
namespace {

template <int kDegree>
__global__ void exp2_poly_kernel(const float* x, float* poly, float* mufu, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    poly[i] = flashattn::cuda::prim::thread::exp2_poly<kDegree>(x[i]);
    mufu[i] = flashattn::cuda::prim::thread::exp2_approx(x[i]);
  }
}

::testing::AssertionResult ok(cudaError_t e) {
  if (e == cudaSuccess) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << cudaGetErrorString(e);
}

// A device buffer of floats, freed on every way out of the test.
struct DeviceFloats {
  float* ptr = nullptr;
  ~DeviceFloats() { cudaFree(ptr); }
};

// The inputs: a dense grid over [-140, 10] (every softmax argument is <= the e4m3 kernel's
// offset of 8), the points around the integers where the rounding of x switches, and the
// special values.
std::vector<float> inputs() {
  std::vector<float> x;
  constexpr int kSteps = 1500000;
  for (int i = 0; i <= kSteps; ++i) {
    x.push_back(-140.f + 150.f * static_cast<float>(i) / static_cast<float>(kSteps));
  }
  for (int j = -130; j <= 10; ++j) {
    for (float d : {-0.5f, 0.5f}) {
      const float at = static_cast<float>(j) + d;
      x.push_back(at);
      x.push_back(std::nextafter(at, -1e9f));
      x.push_back(std::nextafter(at, 1e9f));
    }
  }
  x.push_back(0.f);
  x.push_back(-0.f);
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  x.push_back(-std::numeric_limits<float>::max());
  return x;
}

template <int kDegree>
void run_degree(double bound) {
  const std::vector<float> x = inputs();
  const int n = static_cast<int>(x.size());
  const size_t bytes = x.size() * sizeof(float);
  DeviceFloats dx, dp, dm;
  ASSERT_TRUE(ok(cudaMalloc(&dx.ptr, bytes)));
  ASSERT_TRUE(ok(cudaMalloc(&dp.ptr, bytes)));
  ASSERT_TRUE(ok(cudaMalloc(&dm.ptr, bytes)));
  ASSERT_TRUE(ok(cudaMemcpy(dx.ptr, x.data(), bytes, cudaMemcpyHostToDevice)));
  exp2_poly_kernel<kDegree><<<(n + 255) / 256, 256>>>(dx.ptr, dp.ptr, dm.ptr, n);
  ASSERT_TRUE(ok(cudaGetLastError()));
  std::vector<float> poly(n), mufu(n);
  ASSERT_TRUE(ok(cudaMemcpy(poly.data(), dp.ptr, bytes, cudaMemcpyDeviceToHost)));
  ASSERT_TRUE(ok(cudaMemcpy(mufu.data(), dm.ptr, bytes, cudaMemcpyDeviceToHost)));

  double worst = 0.0;
  float worst_x = 0.f;
  int failures = 0;
  for (int i = 0; i < n; ++i) {
    const float xi = x[i];
    if (std::isnan(xi)) {
      EXPECT_TRUE(std::isnan(poly[i])) << "exp2_poly(NaN) = " << poly[i];
      continue;
    }
    if (xi <= -127.f) {  // the MUFU flushes these to 0; so must the polynomial
      if (poly[i] != 0.f && ++failures <= 5) {
        ADD_FAILURE() << "exp2_poly(" << xi << ") = " << poly[i];
      }
      EXPECT_EQ(mufu[i], 0.f);
      continue;
    }
    const double exact = std::exp2(static_cast<double>(xi));
    if (exact < 0x1p-126) {  // results below fp32's normal range: only absolutely small
      if (!(std::fabs(poly[i]) <= 0x1p-126) && ++failures <= 5)
        ADD_FAILURE() << "exp2_poly(" << xi << ") = " << poly[i];
      continue;
    }
    const double error = std::fabs(static_cast<double>(poly[i]) / exact - 1.0);
    if (!(error <= worst)) {
      worst = error;
      worst_x = xi;
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT_LE(worst, bound) << "degree " << kDegree << ": relative error " << worst << " at x = "
                          << worst_x;
  // And not so loose that a wrong coefficient would pass: each degree is within 3x of its
  // minimax error.
  EXPECT_GE(worst, bound / 3) << "degree " << kDegree << ": the bound is too loose";
}

using CudaExp2Poly = CudaTest;

TEST_F(CudaExp2Poly, Degree3) { run_degree<3>(8e-5); }
TEST_F(CudaExp2Poly, Degree4) { run_degree<4>(3e-6); }
TEST_F(CudaExp2Poly, Degree5) { run_degree<5>(4e-7); }

}  // namespace
}  // namespace fa_cuda_test
