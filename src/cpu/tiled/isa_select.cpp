// Run-time choice of the kernel build: the widest ISA the CPU and the OS support, unless
// a test, a benchmark or FLASHATTN_CPU_ISA asks for a narrower one.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "cpu/tiled/kernel_set.hpp"

namespace flashattn::cpu::tiled {
namespace {

constexpr int kAutomatic = -1;
std::atomic<int> forced_isa{kAutomatic};

// FLASHATTN_CPU_ISA, read once; kAutomatic when unset or unknown.
int isa_from_environment() {
  static const int isa = [] {
    const char* name = std::getenv("FLASHATTN_CPU_ISA");
    if (name == nullptr) return kAutomatic;
    if (std::strcmp(name, "generic") == 0) return static_cast<int>(Isa::kGeneric);
    if (std::strcmp(name, "avx2") == 0) return static_cast<int>(Isa::kAvx2);
    if (std::strcmp(name, "avx512") == 0) return static_cast<int>(Isa::kAvx512);
    return kAutomatic;
  }();
  return isa;
}

const KernelSet& kernels_of(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return avx512_kernels();
    case Isa::kAvx2: return avx2_kernels();
    case Isa::kGeneric: break;
  }
  return generic_kernels();
}

}  // namespace

bool isa_supported(Isa isa) {
#if defined(__x86_64__)
  // __builtin_cpu_supports checks the OS-enabled state (XCR0) as well as CPUID.
  switch (isa) {
    case Isa::kAvx512: return __builtin_cpu_supports("avx512f") && isa_supported(Isa::kAvx2);
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::kGeneric: return true;
  }
  return false;
#else
  return isa == Isa::kGeneric;
#endif
}

Isa best_supported_isa() {
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kGeneric;
}

const KernelSet& selected_kernels() {
  int wanted = forced_isa.load(std::memory_order_relaxed);
  if (wanted == kAutomatic) wanted = isa_from_environment();
  if (wanted != kAutomatic && isa_supported(static_cast<Isa>(wanted))) {
    return kernels_of(static_cast<Isa>(wanted));
  }
  return kernels_of(best_supported_isa());
}

void force_isa(Isa isa) { forced_isa.store(static_cast<int>(isa), std::memory_order_relaxed); }
void reset_isa() { forced_isa.store(kAutomatic, std::memory_order_relaxed); }

}  // namespace flashattn::cpu::tiled
