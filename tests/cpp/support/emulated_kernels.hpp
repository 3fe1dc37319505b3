// The AVX512-BF16 and AMX kernel builds compiled for any CPU: the same 16-lane kernels,
// packing and blocking, with the bf16 products and the AMX tiles done in portable code
// (FA_TILED_EMULATED). They test the bf16 kernels' logic on machines without the
// instructions; the real builds run where the CPU has them.
#pragma once

#include "cpu/tiled/kernel_set.hpp"

namespace fa_test {

const flashattn::cpu::tiled::KernelSet& emulated_avx512_bf16_kernels();
const flashattn::cpu::tiled::KernelSet& emulated_amx_kernels();

}  // namespace fa_test
