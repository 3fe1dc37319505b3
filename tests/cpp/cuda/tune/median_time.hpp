// The tuners' timing: the median of CUDA-event-timed calls on the default stream.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <vector>

#include "flashattn/flashattn.hpp"

namespace fa_tune_timing {

// Median milliseconds of `iters` calls call(i) after `warmup` untimed ones (i counts on across
// both, so a caller can rotate input sets with it); nothing when a call fails (its message
// is printed).
template <class Call>
std::optional<float> median_ms(Call&& call, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) call(i);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(start);
    const flashattn::Status status = call(warmup + i);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    if (!status.ok()) {
      std::printf("error: %s\n", status.message().c_str());
      break;
    }
    float t = 0.f;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (ms.size() != static_cast<size_t>(iters)) return std::nullopt;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace fa_tune_timing
