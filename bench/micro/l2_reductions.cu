// How fast L2 takes fp32 reductions, by the shape of the requests: the measurement behind the
// backward's dQ additions (sm90/bwd_kernel.cuh adds whole 128-byte lines). Every block adds
// 64 x 256 fp32 tiles, row stride 2048 floats as in the dQ accumulator [rows, heads, d], into
// a 16 MB buffer that stays in L2; the payload rate is tile bytes over time (best of 6).
//
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o l2_reductions bench/micro/l2_reductions.cu
//   ./l2_reductions
//
// H200, 2026-11-30 (132 and 264 blocks alike): 8-byte atomics in the mma accumulator layout
// (8 rows x 32 B per instruction) 1.94 TB/s; 16-byte atomics, 16 rows x 32 B 1.94, 8 rows x 64 B
// 2.65, 4 rows x 128 B 3.23, a warp's 512 contiguous bytes 3.23; cp.reduce.async.bulk of 1 KB
// rows 3.23; plain 16-byte stores 4.02. (Measured with this program's first version, a scratch
// copy issuing the same request shapes; this file has been compiled, not yet run.)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "best_time.cuh"

namespace {

constexpr int kRows = 64, kCols = 256, kRowStride = 2048, kTiles = 32, kThreads = 256;

enum Shape {
  kFragmentPairs,  // 8-byte atomics as an mma accumulator holds them: 8 rows x 32 B
  kQuads32,        // 16-byte atomics, 2 lanes a row: 16 rows x 32 B
  kQuads64,        // 4 lanes a row: 8 rows x 64 B
  kQuads128,       // 8 lanes a row: 4 rows x 128 B (whole lines)
  kQuadsRow,       // 32 lanes a row: 512 contiguous bytes
  kBulkReduce,     // cp.reduce.async.bulk, one 1 KB row per request
  kStores,         // plain 16-byte stores, for the ceiling
};

template <Shape kShape>
__global__ void __launch_bounds__(kThreads, 1) add_tiles(float* buffer, int iterations) {
  extern __shared__ __align__(128) float source[];  // one tile of ones, for the bulk reduce
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  for (int i = tid; i < kRows * kCols; i += kThreads) source[i] = 1.f;
  __syncthreads();
  const float4 one4 = make_float4(1.f, 1.f, 1.f, 1.f);
  for (int it = 0; it < iterations; ++it) {
    float* tile = buffer + static_cast<size_t>((blockIdx.x * 7 + it) % kTiles) * kRows * kRowStride;
    // Warp w covers rows [16 (w % 4), + 16) and columns [128 (w / 4), + 128).
    float* warp_tile = tile + 16 * (warp % 4) * kRowStride + 128 * (warp / 4);
    if constexpr (kShape == kFragmentPairs) {
      for (int j = 0; j < 16; ++j) {
        for (int half = 0; half < 2; ++half) {
          atomicAdd(reinterpret_cast<float2*>(warp_tile + (lane / 4 + 8 * half) * kRowStride +
                                              8 * j + 2 * (lane % 4)),
                    make_float2(1.f, 1.f));
        }
      }
    } else if constexpr (kShape == kQuads32 || kShape == kQuads64 || kShape == kQuads128) {
      constexpr int kLanesPerRow = kShape == kQuads32 ? 2 : kShape == kQuads64 ? 4 : 8;
      constexpr int kRowsPerPass = 32 / kLanesPerRow;
      for (int row0 = 0; row0 < 16; row0 += kRowsPerPass) {
        for (int col = 4 * (lane % kLanesPerRow); col < 128; col += 4 * kLanesPerRow) {
          atomicAdd(reinterpret_cast<float4*>(warp_tile +
                                              (row0 + lane / kLanesPerRow) * kRowStride + col),
                    one4);
        }
      }
    } else if constexpr (kShape == kQuadsRow || kShape == kStores) {
      for (int q = tid; q < kRows * kCols / 4; q += kThreads) {
        float4* at = reinterpret_cast<float4*>(tile + q / (kCols / 4) * kRowStride +
                                               4 * (q % (kCols / 4)));
        if constexpr (kShape == kStores) {
          *at = one4;
        } else {
          atomicAdd(at, one4);
        }
      }
    } else if constexpr (kShape == kBulkReduce) {
      if (tid < kRows) {
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        const auto row = static_cast<uint32_t>(__cvta_generic_to_shared(source + tid * kCols));
        asm volatile(
            "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                tile + tid * kRowStride),
            "r"(row), "r"(kCols * 4)
            : "memory");
        asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory");
      }
    }
  }
  if constexpr (kShape == kBulkReduce) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

template <Shape kShape>
int measure(float* buffer, int blocks, const char* name) {
  constexpr int kSmem = kRows * kCols * 4 + 1024, kIterations = 400;
  MICRO_CHECK(cudaFuncSetAttribute(add_tiles<kShape>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  auto launch = [&] { add_tiles<kShape><<<blocks, kThreads, kSmem>>>(buffer, kIterations); };
  float best = 0.f;
  if (best_time_ms(launch, 6, &best) != 0) return 1;
  const double bytes = static_cast<double>(blocks) * kIterations * kRows * kCols * 4;
  std::printf("%-40s %4d blocks: %.3f ms, %.2f TB/s\n", name, blocks, best, bytes / best / 1e9);
  return 0;
}

}  // namespace

int main() {
  int sms = 0;
  MICRO_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  float* buffer = nullptr;
  const size_t bytes = static_cast<size_t>(kTiles) * kRows * kRowStride * 4;
  MICRO_CHECK(cudaMalloc(&buffer, bytes));
  MICRO_CHECK(cudaMemset(buffer, 0, bytes));
  int failed = 0;
  for (int blocks : {sms, 2 * sms}) {
    failed |= measure<kFragmentPairs>(buffer, blocks, "8-byte atomics, 8 rows x 32 B");
    failed |= measure<kQuads32>(buffer, blocks, "16-byte atomics, 16 rows x 32 B");
    failed |= measure<kQuads64>(buffer, blocks, "16-byte atomics, 8 rows x 64 B");
    failed |= measure<kQuads128>(buffer, blocks, "16-byte atomics, 4 rows x 128 B");
    failed |= measure<kQuadsRow>(buffer, blocks, "16-byte atomics, 512 B of a row");
    failed |= measure<kBulkReduce>(buffer, blocks, "cp.reduce.async.bulk, 1 KB rows");
    failed |= measure<kStores>(buffer, blocks, "16-byte stores");
  }
  MICRO_CHECK(cudaFree(buffer));
  return failed;
}
