// What the CUDA calls on a launch path cost the calling thread: the runtime and driver calls
// the library makes per attention call (pointer queries for its placement check, the kernel
// attribute for dynamic shared memory, TMA tensor-map encoding, device queries, the launch
// itself), each timed alone over many calls, median of rounds. These decide which host work
// is worth caching (issue 19's host time per call); the library's own figure per call is
// `flashattn-bench --host-time N`.
//
//   nvcc -std=c++17 -O2 -Isrc -Iinclude -o host_calls bench/micro/host_calls.cu
//   ./host_calls
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "best_time.cuh"
#include "cuda/sm90/tensor_map.hpp"

namespace {

__global__ void empty_kernel(int) {}

__global__ void smem_kernel(int) {
  extern __shared__ int smem[];
  if (threadIdx.x == 1024) smem[0] = 0;  // never: the kernel only needs its attribute
}

// Median over `rounds` of the microseconds per call of `call()` over `calls` calls; the
// call returns false to stop the probe (a failed CUDA call, already printed).
template <class Call>
double median_us(Call call, int calls = 20000, int rounds = 7) {
  std::vector<double> per_call;
  for (int round = 0; round < rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) {
      if (!call()) return -1;
    }
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    per_call.push_back(took.count() / calls);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main() {
  void* buffer = nullptr;
  MICRO_CHECK(cudaMalloc(&buffer, 64 << 20));
  cudaStream_t stream;
  MICRO_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int device = 0;
  MICRO_CHECK(cudaGetDevice(&device));

  struct Row {
    const char* what;
    double us;
  };
  std::vector<Row> rows;
  rows.push_back({"cudaGetDevice", median_us([&] {
                    int d = 0;
                    return ok(cudaGetDevice(&d), "cudaGetDevice");
                  })});
  rows.push_back({"cudaDeviceGetAttribute (SM count)", median_us([&] {
                    int sms = 0;
                    return ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                              "cudaDeviceGetAttribute");
                  })});
  rows.push_back({"cudaPointerGetAttributes (device memory)", median_us([&] {
                    cudaPointerAttributes a{};
                    return ok(cudaPointerGetAttributes(&a, static_cast<char*>(buffer) + 4096),
                              "cudaPointerGetAttributes");
                  })});
  std::vector<char> host(4096);
  rows.push_back({"cudaPointerGetAttributes (pageable host memory)", median_us([&] {
                    cudaPointerAttributes a{};
                    return ok(cudaPointerGetAttributes(&a, host.data()), "cudaPointerGetAttributes");
                  })});
  rows.push_back({"cudaFuncSetAttribute (max dynamic shared memory)", median_us([&] {
                    return ok(cudaFuncSetAttribute(smem_kernel,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   200 * 1024),
                              "cudaFuncSetAttribute");
                  })});
  // The backward's map of q: bf16 [4][4096][16][128], boxes of 64 rows.
  const flashattn::cuda::sm90::OperandExtent extent{128, 4096, 16, 4, 16 * 128, 128,
                                                    4096 * 16 * 128, 2};
  rows.push_back({"cuTensorMapEncodeTiled (one operand map)", median_us([&] {
                    CUtensorMap map;
                    const std::string error =
                        flashattn::cuda::sm90::encode_operand_tensor_map(&map, buffer, extent, 64);
                    if (!error.empty()) std::printf("encode: %s\n", error.c_str());
                    return error.empty();
                  })});
  // Launches queue faster than an empty kernel runs only for a while: a sync per 64.
  int launched = 0;
  rows.push_back({"empty kernel launch (<<<132, 128>>>, one sync per 64)", median_us([&] {
                    empty_kernel<<<132, 128, 0, stream>>>(0);
                    if (++launched % 64 == 0 && !ok(cudaStreamSynchronize(stream), "sync")) {
                      return false;
                    }
                    return ok(cudaGetLastError(), "launch");
                  }, 6400)});
  rows.push_back({"smem kernel launch (200 KB dynamic shared memory)", median_us([&] {
                    smem_kernel<<<132, 128, 200 * 1024, stream>>>(0);
                    if (++launched % 64 == 0 && !ok(cudaStreamSynchronize(stream), "sync")) {
                      return false;
                    }
                    return ok(cudaGetLastError(), "launch");
                  }, 6400)});
  for (const Row& row : rows) {
    if (row.us < 0) return 1;
    std::printf("%-56s %8.3f us\n", row.what, row.us);
  }
  MICRO_CHECK(cudaStreamSynchronize(stream));
  MICRO_CHECK(cudaFree(buffer));
  return 0;
}
