// How fast the tensor cores run one wgmma shape back to back, by N and by where A comes from:
// the measurement behind the backward's product shapes (sm90/bwd_kernel.cuh multiplies 64 x 64
// x 128 products with both operands in shared memory). Every block (one per SM) has 1 or 2
// warpgroups, each issuing m64nNk16 bf16 wgmma instructions into one fp32 accumulator, four per
// commit group, with A from shared memory K-major (ss), MN-major (ss_mn, as the backward reads
// dS^T for dQ) or registers (rs), and B K-major from shared memory. The operands are zeros; the
// rate is 2 * 64 * N * 16 flops per instruction over the kernel's time (best of 5).
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a \
//       -Isrc -Iinclude -o wgmma_rate bench/micro/wgmma_rate.cu
//   ./wgmma_rate
//
// Its figures on the H200 are in bench/RESULTS.md (twentieth session).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "best_time.cuh"

#include "cuda/prim/math.cuh"
#include "cuda/sm90/swizzle128_tile.cuh"
#include "cuda/sm90/wgmma.cuh"
#include "cuda/sm90/wgmma_descriptor.cuh"

namespace {

using flashattn::cuda::sm90::Major;
using flashattn::cuda::sm90::Swizzle128Tile;
using flashattn::cuda::sm90::WgmmaOperand;
namespace wg = flashattn::cuda::sm90::warpgroup;

enum class ASource { kSmemK, kSmemMN, kRegisters };

constexpr int kKSteps = 4;        // k = 64 per commit group
constexpr int kIters = 4096;      // commit groups per warpgroup
constexpr int kTileBytes = 64 * 256 * 2;  // room for any operand tile below (32 KB)


template <int N, ASource kA, int kWarpgroups>
__global__ void __launch_bounds__(128 * kWarpgroups, 1) rate_kernel(float* sink) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = flashattn::cuda::prim::smem_addr(smem_raw);
  const uint32_t base = raw + (1024 - raw % 1024) % 1024;
  // Zero the tiles: per warpgroup an A tile, then one B tile all share.
  for (uint32_t i = threadIdx.x * 16; i < (kWarpgroups + 1) * kTileBytes; i += blockDim.x * 16) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(base + i), "r"(0));
  }
  wg::fence_proxy_async_shared();
  __syncthreads();
  const int warpgroup = threadIdx.x / 128;
  using AK = WgmmaOperand<Swizzle128Tile<64, 64>, Major::kK>;    // [M = 64][K = 64]
  using AMN = WgmmaOperand<Swizzle128Tile<64, 64>, Major::kMN>;  // [K = 64][M = 64]
  using B = WgmmaOperand<Swizzle128Tile<N, 64>, Major::kK>;      // [N][K = 64]
  const uint64_t a_desc = kA == ASource::kSmemMN
                              ? AMN::descriptor(base + warpgroup * kTileBytes)
                              : AK::descriptor(base + warpgroup * kTileBytes);
  const uint64_t b_desc = B::descriptor(base + kWarpgroups * kTileBytes);
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  uint32_t a[4];  // zeros the compiler cannot see as constants
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(a[i]) : "r"(base + 4 * i));
  }
  wg::fence();
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      if constexpr (kA == ASource::kRegisters) {
        wg::mma_rs<N, __nv_bfloat16, false>(d, a, B::advance(b_desc, ks), true);
      } else if constexpr (kA == ASource::kSmemMN) {
        wg::mma_ss<N, __nv_bfloat16, true, false>(d, AMN::advance(a_desc, ks),
                                                  B::advance(b_desc, ks), true);
      } else {
        wg::mma_ss<N, __nv_bfloat16, false, false>(d, AK::advance(a_desc, ks),
                                                   B::advance(b_desc, ks), true);
      }
    }
    wg::commit_group();
    wg::wait_group<1>();
  }
  wg::wait_group<0>();
  wg::fence_operands(d);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) sum += d[i];
  if (sum != 0.f) sink[blockIdx.x] = sum;  // never true: keeps the products alive
#endif
}

template <int N, ASource kA, int kWarpgroups>
int measure(int sms, float* sink) {
  auto kernel = &rate_kernel<N, kA, kWarpgroups>;
  const int smem = (kWarpgroups + 1) * kTileBytes + 1024;
  MICRO_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  float best = 0.f;
  if (best_time_ms([&] { kernel<<<sms, 128 * kWarpgroups, smem>>>(sink); }, 5, &best) != 0) {
    return 1;
  }
  const double flops = 2.0 * 64 * N * 16 * kKSteps * kIters * kWarpgroups * sms;
  const char* source = kA == ASource::kRegisters ? "rs" : kA == ASource::kSmemMN ? "ss_mn" : "ss";
  std::printf("N %3d  A %-5s  warpgroups %d  %7.1f TFLOP/s  (%.3f ms)\n", N, source, kWarpgroups,
              flops / (best * 1e-3) / 1e12, best);
  return 0;
}

template <ASource kA, int kWarpgroups>
int measure_all_n(int sms, float* sink) {
  return measure<64, kA, kWarpgroups>(sms, sink) | measure<128, kA, kWarpgroups>(sms, sink) |
         measure<256, kA, kWarpgroups>(sms, sink);
}

}  // namespace

int main() {
  int device = 0, sms = 0;
  MICRO_CHECK(cudaGetDevice(&device));
  MICRO_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  float* sink = nullptr;
  MICRO_CHECK(cudaMalloc(&sink, sms * sizeof(float)));
  int failed = 0;
  failed |= measure_all_n<ASource::kSmemK, 1>(sms, sink);
  failed |= measure_all_n<ASource::kSmemK, 2>(sms, sink);
  failed |= measure_all_n<ASource::kSmemMN, 2>(sms, sink);
  failed |= measure_all_n<ASource::kRegisters, 1>(sms, sink);
  failed |= measure_all_n<ASource::kRegisters, 2>(sms, sink);
  MICRO_CHECK(cudaFree(sink));
  return failed;
}
