#include "cpu_peak.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

// Enough independent accumulators to cover the FMA latency on every port (4-5 cycles x
// 2 ports), so the loop is bound by throughput only.
constexpr int kChains = 12;

// Each function returns a value derived from every accumulator so nothing is dead code;
// x * 0.999999 + 1e-7 stays bounded and never denormal.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) float fma_loop_avx512(long iterations) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.f + c);
  const __m512 factor = _mm512_set1_ps(0.999999f), addend = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], factor, addend);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return _mm512_reduce_add_ps(sum);
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(long iterations) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(1.f + c);
  const __m256 factor = _mm256_set1_ps(0.999999f), addend = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], factor, addend);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  return lanes[0] + lanes[7];
}

float mul_add_loop_sse2(long iterations) {
  __m128 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm_set1_ps(1.f + c);
  const __m128 factor = _mm_set1_ps(0.999999f), addend = _mm_set1_ps(1e-7f);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm_add_ps(_mm_mul_ps(acc[c], factor), addend);
  }
  __m128 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm_add_ps(sum, acc[c]);
  return _mm_cvtss_f32(sum);
}
#endif

enum class PeakIsa { kAvx512, kAvx2, kSse2, kScalar };

PeakIsa peak_isa() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return PeakIsa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return PeakIsa::kAvx2;
  return PeakIsa::kSse2;
#else
  return PeakIsa::kScalar;
#endif
}

float scalar_loop(long iterations) {
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = 1.f + c;
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * 0.999999f + 1e-7f;
  }
  float sum = 0.f;
  for (float a : acc) sum += a;
  return sum;
}

// Flops of one iteration (all chains) and the loop itself.
double run_loop(PeakIsa isa, long iterations, float* sink) {
  switch (isa) {
#if defined(__x86_64__)
    case PeakIsa::kAvx512: *sink += fma_loop_avx512(iterations); return 2.0 * 16 * kChains;
    case PeakIsa::kAvx2: *sink += fma_loop_avx2(iterations); return 2.0 * 8 * kChains;
    case PeakIsa::kSse2: *sink += mul_add_loop_sse2(iterations); return 2.0 * 4 * kChains;
#endif
    default: *sink += scalar_loop(iterations); return 2.0 * kChains;
  }
}

}  // namespace

const char* cpu_peak_isa() {
  switch (peak_isa()) {
    case PeakIsa::kAvx512: return "avx512";
    case PeakIsa::kAvx2: return "avx2+fma";
    case PeakIsa::kSse2: return "sse2";
    case PeakIsa::kScalar: break;
  }
  return "scalar";
}

double measure_cpu_peak_fp32_gflops(int threads) {
  const PeakIsa isa = peak_isa();
  threads = std::max(1, threads);
  volatile float keep = 0.f;
  // Rounds of at least kRoundSeconds: the first lets every core reach its sustained
  // (vector-license) clock and sizes the later ones; the best later round counts, so a
  // neighbour's burst on a shared machine lowers the figure less.
  constexpr double kRoundSeconds = 0.2;
  constexpr int kRounds = 5;
  long iterations = 1'000'000;
  double best = 0.0;
  for (int round = 0; round < kRounds; ++round) {
    double flops_per_iteration = 0.0;
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      float sink = 0.f;
      const double flops = run_loop(isa, iterations, &sink);
#pragma omp critical
      {
        keep = keep + sink;
        flops_per_iteration = flops;
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double gflops = flops_per_iteration * iterations * threads / seconds / 1e9;
    if (round == 0) {
      iterations = std::max(iterations, static_cast<long>(iterations * kRoundSeconds / seconds));
    } else {
      best = std::max(best, gflops);
    }
  }
  return best;
}
