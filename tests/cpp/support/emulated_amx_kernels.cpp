// The amx kernel build, emulated (emulated_kernels.hpp): no target region, so it runs
// on any CPU.
#include "support/emulated_kernels.hpp"

#include "cpu/tiled/isa_prelude.hpp"

#define FA_TILED_ISA emulated_amx
#define FA_TILED_LANES 16
#define FA_TILED_EMULATED 1
#define FA_TILED_BF16 FA_TILED_BF16_AMX
#include "cpu/tiled/isa_kernels.hpp"

namespace fa_test {
const flashattn::cpu::tiled::KernelSet& emulated_amx_kernels() {
  static const flashattn::cpu::tiled::KernelSet set =
      flashattn::cpu::tiled::emulated_amx::make_kernel_set("emulated-amx");
  return set;
}
}  // namespace fa_test
