// The machine's peak fp32 FMA rate, measured: the yardstick for the CPU backend's GFLOP/s.
#pragma once

// GFLOP/s (an FMA counts as 2 flops) of `threads` OpenMP threads, each running a loop of
// independent fused multiply-adds with the widest vector ISA this CPU supports at run
// time (AVX-512F, AVX2+FMA, else SSE2 multiply + add). Takes about a second.
double measure_cpu_peak_fp32_gflops(int threads);

// The ISA measure_cpu_peak_fp32_gflops uses: "avx512", "avx2+fma" or "sse2".
const char* cpu_peak_isa();

// The machine's peak bf16 rate (fp32 accumulation), measured the same way with the
// widest bf16 instruction the CPU and OS allow: AMX TDPBF16PS tiles, else AVX512-BF16
// VDPBF16PS (also when the kernels are forced to avx512bf16). 0 when neither is there.
double measure_cpu_peak_bf16_gflops(int threads);

// The ISA measure_cpu_peak_bf16_gflops uses: "amx", "avx512bf16" or "none".
const char* cpu_peak_bf16_isa();
