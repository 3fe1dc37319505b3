// The tiled kernels for any CPU: 4-float vectors (SSE2 on x86-64, NEON on AArch64), the
// baseline the build itself targets.
#include "cpu/tiled/isa_prelude.hpp"

#define FA_TILED_ISA generic
#define FA_TILED_LANES 4
#include "cpu/tiled/isa_kernels.hpp"

namespace flashattn::cpu::tiled {
const KernelSet& generic_kernels() {
  static const KernelSet set = generic::make_kernel_set("generic");
  return set;
}
}  // namespace flashattn::cpu::tiled
