// The tiled kernels for x86-64 CPUs with AVX2, FMA and F16C (8 floats per vector).
#include "cpu/tiled/isa_prelude.hpp"

#if defined(__x86_64__)
// Every function defined below, up to the pop, is compiled for this ISA.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#define FA_TILED_ISA avx2
#define FA_TILED_LANES 8
#include "cpu/tiled/isa_kernels.hpp"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace flashattn::cpu::tiled {
const KernelSet& avx2_kernels() {
  static const KernelSet set = avx2::make_kernel_set("avx2");
  return set;
}
}  // namespace flashattn::cpu::tiled
#else
namespace flashattn::cpu::tiled {
const KernelSet& avx2_kernels() { return generic_kernels(); }
}  // namespace flashattn::cpu::tiled
#endif
