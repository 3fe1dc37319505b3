// The cost of the deterministic backward: times flashattn::backward on device buffers with
// deterministic off and on, for the benchmark shapes (16k tokens, 2048 = heads * d), and
// prints ms and TFLOP/s (backward FLOPs = 2.5 x forward). Disabled by default (it measures,
// it checks nothing); run with
//   flashattn_tests --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Deterministic*'
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda_test_support.hpp"
#include "flashattn/flashattn.hpp"

namespace fa_cuda_test {
namespace {

__global__ void fill_random(__nv_bfloat16* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 32768.f) - 1.f);
  }
}

struct Timing {
  float ms[2];  // deterministic off, on
};

// Median of `iters` timed calls.
float time_backward(const flashattn::BackwardArgs& args, const flashattn::Launch& launch, int iters) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int i = 0; i < iters + 3; ++i) {
    cudaEventRecord(start);
    EXPECT_TRUE(flashattn::backward(args, launch).ok());
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float t = 0.f;
    cudaEventElapsedTime(&t, start, stop);
    if (i >= 3) ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

using CudaBackwardTiming = CudaTest;

TEST_F(CudaBackwardTiming, DISABLED_DeterministicOverhead) {
  using flashattn::DType;
  for (int seqlen : {1024, 2048, 4096, 16384}) {
    for (int d : {64, 128, 256}) {
      for (bool causal : {false, true}) {
        const int batch = 16384 / seqlen, heads = 2048 / d;
        const int64_t n = static_cast<int64_t>(batch) * seqlen * heads * d;
        std::vector<void*> buffers;
        auto tensor = [&](uint32_t seed) {
          void* p = nullptr;
          cudaMalloc(&p, n * 2);
          fill_random<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed);
          buffers.push_back(p);
          return flashattn::make_tensor(p, DType::kBF16, {batch, seqlen, heads, d},
                                        {flashattn::DeviceType::kCUDA, 0});
        };
        flashattn::ForwardArgs fwd;
        fwd.q = tensor(1);
        fwd.k = tensor(2);
        fwd.v = tensor(3);
        fwd.out = tensor(4);
        void* lse = nullptr;
        cudaMalloc(&lse, static_cast<size_t>(batch) * heads * seqlen * 4);
        buffers.push_back(lse);
        fwd.lse = flashattn::make_tensor(lse, DType::kF32, {batch, heads, seqlen},
                                         {flashattn::DeviceType::kCUDA, 0});
        fwd.options.causal = causal;
        flashattn::Launch launch;
        launch.backend = flashattn::Backend::kCuda;
        ASSERT_TRUE(flashattn::forward(fwd, launch).ok());
        flashattn::BackwardArgs bwd;
        bwd.q = fwd.q;
        bwd.k = fwd.k;
        bwd.v = fwd.v;
        bwd.out = fwd.out;
        bwd.lse = fwd.lse;
        bwd.options = fwd.options;
        bwd.dout = tensor(5);
        bwd.dq = tensor(6);
        bwd.dk = tensor(7);
        bwd.dv = tensor(8);
        Timing t{};
        for (int det = 0; det < 2; ++det) {
          bwd.deterministic = det == 1;
          size_t bytes = 0;
          ASSERT_TRUE(flashattn::workspace_size(bwd, flashattn::Backend::kCuda, &bytes).ok());
          void* workspace = nullptr;
          cudaMalloc(&workspace, bytes);
          launch.workspace = workspace;
          launch.workspace_bytes = bytes;
          t.ms[det] = time_backward(bwd, launch, 10);
          cudaFree(workspace);
        }
        const double flops = 2.5 * 4.0 * batch * heads * static_cast<double>(seqlen) * seqlen * d *
                             (causal ? 0.5 : 1.0);
        std::printf("bwd bf16 seqlen %d d %d %s: %.3f ms %.1f TFLOP/s | deterministic %.3f ms "
                    "%.1f TFLOP/s (+%.0f%%)\n",
                    seqlen, d, causal ? "causal" : "full", t.ms[0], flops / t.ms[0] / 1e9,
                    t.ms[1], flops / t.ms[1] / 1e9, 100.0 * (t.ms[1] / t.ms[0] - 1.0));
        for (void* p : buffers) cudaFree(p);
        ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      }
    }
  }
}

}  // namespace
}  // namespace fa_cuda_test
