// The tiled kernels for x86-64 CPUs with AVX-512F (16 floats per vector, 32 registers).
#include "cpu/tiled/isa_prelude.hpp"

#if defined(__x86_64__)
// Every function defined below, up to the pop, is compiled for this ISA.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
#endif
#define FA_TILED_ISA avx512
#define FA_TILED_LANES 16
#include "cpu/tiled/isa_kernels.hpp"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace flashattn::cpu::tiled {
const KernelSet& avx512_kernels() {
  static const KernelSet set = avx512::make_kernel_set("avx512");
  return set;
}
}  // namespace flashattn::cpu::tiled
#else
namespace flashattn::cpu::tiled {
const KernelSet& avx512_kernels() { return generic_kernels(); }
}  // namespace flashattn::cpu::tiled
#endif
