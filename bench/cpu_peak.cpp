#include "cpu_peak.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu/tiled/kernel_set.hpp"
#include "cpu/tiled/tiled.hpp"

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

// bf16: VDPBF16PS (two bf16 products into each of 16 fp32 lanes, 64 flops), chains as
// above; a + b * 1e-4 * 1e-4 per step stays bounded.
__attribute__((target("avx512f,avx512bf16"))) float dot_loop_avx512_bf16(long iterations) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.f + c);
  const __m512bh small = (__m512bh)_mm512_set1_epi16(0x38D2);  // bf16 1.0e-4
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], small, small);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return _mm512_reduce_add_ps(sum);
}

// AMX: TDPBF16PS into four independent 16 x 16 fp32 tiles from two A and two B tiles held
// in the tile registers (16 x 16 x 32 products, 16384 flops each), the loop of a GEMM's
// inner block without its loads. Needs the tiles enabled (isa_supported(kAmx)).
float dot_loop_amx(long iterations) {
  struct alignas(64) Config {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
  } config{};
  config.palette = 1;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  alignas(64) uint16_t operand[16][32];
  for (auto& row : operand) {
    for (uint16_t& x : row) x = 0x38D2;  // bf16 1.0e-4
  }
  alignas(64) float out[16][16];
  __asm__ volatile("ldtilecfg %0" ::"m"(config));
  __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" ::);
  __asm__ volatile(
      "tileloadd (%0,%1,1), %%tmm4\n\ttileloadd (%0,%1,1), %%tmm5\n\t"
      "tileloadd (%0,%1,1), %%tmm6\n\ttileloadd (%0,%1,1), %%tmm7" ::"r"(&operand[0][0]),
      "r"(64L)
      : "memory");
  for (long i = 0; i < iterations; ++i) {
    __asm__ volatile(
        "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
        "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3" ::);
  }
  __asm__ volatile("tilestored %%tmm3, (%0,%1,1)" ::"r"(&out[0][0]), "r"(64L) : "memory");
  __asm__ volatile("tilerelease" ::);
  return out[0][0];
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

// Flops of one iteration (all chains) of the fp32 loop of `isa`, and the loop itself.
double fp32_flops_per_iteration(PeakIsa isa) {
  switch (isa) {
    case PeakIsa::kAvx512: return 2.0 * 16 * kChains;
    case PeakIsa::kAvx2: return 2.0 * 8 * kChains;
    case PeakIsa::kSse2: return 2.0 * 4 * kChains;
    case PeakIsa::kScalar: break;
  }
  return 2.0 * kChains;
}

float run_fp32_loop(PeakIsa isa, long iterations) {
  switch (isa) {
#if defined(__x86_64__)
    case PeakIsa::kAvx512: return fma_loop_avx512(iterations);
    case PeakIsa::kAvx2: return fma_loop_avx2(iterations);
    case PeakIsa::kSse2: return mul_add_loop_sse2(iterations);
#endif
    default: return scalar_loop(iterations);
  }
}

// Rounds of at least kRoundSeconds: the first lets every core reach its sustained
// (vector-license) clock and sizes the later ones; the best later round counts, so a
// neighbour's burst on a shared machine lowers the figure less. `loop` runs `iterations`
// steps of `flops_per_iteration` flops on each of `threads` threads.
template <typename Loop>
double best_rate(int threads, double flops_per_iteration, long first_iterations, Loop loop) {
  volatile float keep = 0.f;
  constexpr double kRoundSeconds = 0.2;
  constexpr int kRounds = 5;
  long iterations = first_iterations;
  double best = 0.0;
  for (int round = 0; round < kRounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const float sink = loop(iterations);
#pragma omp critical
      keep = keep + sink;
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

}  // namespace

const char* cpu_peak_bf16_isa() {
  using flashattn::cpu::tiled::Isa;
  using flashattn::cpu::tiled::isa_supported;
  // The kernels forced to AVX512-BF16 are measured against its own peak.
  if (std::string(flashattn::cpu::tiled::isa_name()) == "avx512bf16") return "avx512bf16";
  if (isa_supported(Isa::kAmx)) return "amx";
  if (isa_supported(Isa::kAvx512Bf16)) return "avx512bf16";
  return "none";
}

double measure_cpu_peak_bf16_gflops(int threads) {
  threads = std::max(1, threads);
#if defined(__x86_64__)
  const std::string isa = cpu_peak_bf16_isa();
  if (isa == "amx") return best_rate(threads, 4 * 16384.0, 100'000, dot_loop_amx);
  if (isa == "avx512bf16") {
    return best_rate(threads, 64.0 * kChains, 100'000, dot_loop_avx512_bf16);
  }
#endif
  return 0.0;
}

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
  return best_rate(std::max(1, threads), fp32_flops_per_iteration(isa), 1'000'000,
                   [isa](long iterations) { return run_fp32_loop(isa, iterations); });
}
