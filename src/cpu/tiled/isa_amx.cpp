// The tiled kernels for x86-64 CPUs with AMX-BF16 (and AVX512-BF16): the AVX-512 kernels,
// with the bf16 tile products on AMX tiles (gemm_bf16.hpp). fp32 and fp16 calls run the
// AVX-512 build. The tile instructions are inline assembly, so only the vector code needs
// the target below.
#include "cpu/tiled/isa_prelude.hpp"

#if defined(__x86_64__)
// Every function defined below, up to the pop, is compiled for this ISA.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bf16,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16,avx2,fma,f16c")
#endif
#define FA_TILED_ISA amx
#define FA_TILED_LANES 16
#define FA_TILED_BF16 FA_TILED_BF16_AMX
#include "cpu/tiled/isa_kernels.hpp"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace flashattn::cpu::tiled {
const KernelSet& amx_kernels() {
  static const KernelSet set = amx::make_bf16_kernel_set<&avx512_kernels>("amx");
  return set;
}
}  // namespace flashattn::cpu::tiled
#else
namespace flashattn::cpu::tiled {
const KernelSet& amx_kernels() { return generic_kernels(); }
}  // namespace flashattn::cpu::tiled
#endif
