// What the standalone micro benchmarks of bench/micro share: a CUDA call checked with the
// failing call's text, and the best time of a launch repeated after one warm-up.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>

// In a function returning int: print the failing call and return 1.
#define MICRO_CHECK(call)                                                            \
  do {                                                                               \
    const cudaError_t e = (call);                                                    \
    if (e != cudaSuccess) {                                                          \
      std::printf("%s: %s\n", #call, cudaGetErrorString(e));                         \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

// The shortest of `reps` timed runs of `launch()` (which enqueues one kernel), after one
// untimed run; milliseconds in *best. Returns 0, or 1 after printing a failed CUDA call.
template <class Launch>
int best_time_ms(Launch launch, int reps, float* best) {
  cudaEvent_t start, stop;
  MICRO_CHECK(cudaEventCreate(&start));
  MICRO_CHECK(cudaEventCreate(&stop));
  *best = 1e30f;
  for (int rep = 0; rep <= reps; ++rep) {
    MICRO_CHECK(cudaEventRecord(start));
    launch();
    MICRO_CHECK(cudaGetLastError());
    MICRO_CHECK(cudaEventRecord(stop));
    MICRO_CHECK(cudaEventSynchronize(stop));
    float ms = 0.f;
    MICRO_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (rep > 0 && ms < *best) *best = ms;
  }
  MICRO_CHECK(cudaEventDestroy(start));
  MICRO_CHECK(cudaEventDestroy(stop));
  return 0;
}
