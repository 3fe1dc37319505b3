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

void check(cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); }

// The inputs: a dense grid over [-140, 10] (every softmax argument is <= the e4m3 kernel's
// offset of 8), the points around the integers where the rounding of x switches, and the
// special values.
std::vector<float> inputs() {
  std::vector<float> x;
  for (int i = 0; i <= 1500000; ++i) x.push_back(-140.f + 150.f * static_cast<float>(i) / 1500000.f);
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
  float *dx = nullptr, *dp = nullptr, *dm = nullptr;
  check(cudaMalloc(&dx, n * sizeof(float)));
  check(cudaMalloc(&dp, n * sizeof(float)));
  check(cudaMalloc(&dm, n * sizeof(float)));
  check(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  exp2_poly_kernel<kDegree><<<(n + 255) / 256, 256>>>(dx, dp, dm, n);
  check(cudaGetLastError());
  std::vector<float> poly(n), mufu(n);
  check(cudaMemcpy(poly.data(), dp, n * sizeof(float), cudaMemcpyDeviceToHost));
  check(cudaMemcpy(mufu.data(), dm, n * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(dx);
  cudaFree(dp);
  cudaFree(dm);

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
      if (poly[i] != 0.f && ++failures <= 5) ADD_FAILURE() << "exp2_poly(" << xi << ") = " << poly[i];
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

TEST(CudaExp2Poly, Degree3) {
  if (!flashattn::cuda_available()) GTEST_SKIP() << "no CUDA device is visible";
  run_degree<3>(8e-5);
}

TEST(CudaExp2Poly, Degree4) {
  if (!flashattn::cuda_available()) GTEST_SKIP() << "no CUDA device is visible";
  run_degree<4>(3e-6);
}

TEST(CudaExp2Poly, Degree5) {
  if (!flashattn::cuda_available()) GTEST_SKIP() << "no CUDA device is visible";
  run_degree<5>(4e-7);
}

}  // namespace
}  // namespace fa_cuda_test
