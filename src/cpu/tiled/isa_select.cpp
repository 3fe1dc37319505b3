// Run-time choice of the kernel build: the widest ISA the CPU and the OS support, unless
// a test, a benchmark or FLASHATTN_CPU_ISA asks for a narrower one.
#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "cpu/tiled/kernel_set.hpp"

namespace flashattn::cpu::tiled {
namespace {

constexpr int kAutomatic = -1;
std::atomic<int> forced_isa{kAutomatic};
std::atomic<const KernelSet*> forced_kernels{nullptr};

// FLASHATTN_CPU_ISA, read once; kAutomatic when unset or unknown.
int isa_from_environment() {
  static const int isa = [] {
    const char* name = std::getenv("FLASHATTN_CPU_ISA");
    if (name == nullptr) return kAutomatic;
    if (std::strcmp(name, "generic") == 0) return static_cast<int>(Isa::kGeneric);
    if (std::strcmp(name, "avx2") == 0) return static_cast<int>(Isa::kAvx2);
    if (std::strcmp(name, "avx512") == 0) return static_cast<int>(Isa::kAvx512);
    if (std::strcmp(name, "avx512bf16") == 0) return static_cast<int>(Isa::kAvx512Bf16);
    if (std::strcmp(name, "amx") == 0) return static_cast<int>(Isa::kAmx);
    return kAutomatic;
  }();
  return isa;
}

const KernelSet& kernels_of(Isa isa) {
  switch (isa) {
    case Isa::kAmx: return amx_kernels();
    case Isa::kAvx512Bf16: return avx512_bf16_kernels();
    case Isa::kAvx512: return avx512_kernels();
    case Isa::kAvx2: return avx2_kernels();
    case Isa::kGeneric: break;
  }
  return generic_kernels();
}

#if defined(__x86_64__)
// CPUID leaf 7: subleaf 1 EAX bit 5 is AVX512-BF16; subleaf 0 EDX bits 22 and 24 are
// AMX-BF16 and AMX-TILE. Read once: CPUID can trap to the hypervisor in a VM, and every
// call asks.
bool cpu_has_avx512_bf16() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 5)) != 0;
  }();
  return has;
}

bool cpu_has_amx_bf16() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (1u << 22)) != 0 &&
           (edx & (1u << 24)) != 0;
  }();
  return has;
}

// Linux enables the AMX tile data per process, on request (kernel 5.16 and later); an
// older kernel, another OS or a sandbox that refuses leaves AMX off.
bool os_allows_amx() {
#if defined(__linux__)
  constexpr long kArchRequestXcompPermission = 0x1023;  // ARCH_REQ_XCOMP_PERM
  constexpr long kXfeatureTileData = 18;                // XFEATURE_XTILEDATA
  static const bool allowed =
      syscall(SYS_arch_prctl, kArchRequestXcompPermission, kXfeatureTileData) == 0;
  return allowed;
#else
  return false;
#endif
}
#endif

}  // namespace

bool isa_supported(Isa isa) {
#if defined(__x86_64__)
  // __builtin_cpu_supports checks the OS-enabled state (XCR0) as well as CPUID.
  switch (isa) {
    case Isa::kAmx:
      return cpu_has_amx_bf16() && isa_supported(Isa::kAvx512Bf16) && os_allows_amx();
    case Isa::kAvx512Bf16: return cpu_has_avx512_bf16() && isa_supported(Isa::kAvx512);
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
  if (isa_supported(Isa::kAmx)) return Isa::kAmx;
  // Not kAvx512Bf16: where it was measured (an AMX Xeon, bench/RESULTS.md), VDPBF16PS
  // delivers half the flops of fp32 FMA, so its kernels lose to the AVX-512 ones; it runs
  // when asked for (FLASHATTN_CPU_ISA=avx512bf16, the tests).
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kGeneric;
}

const KernelSet& selected_kernels() {
  const KernelSet* forced = forced_kernels.load(std::memory_order_relaxed);
  if (forced != nullptr) return *forced;
  int wanted = forced_isa.load(std::memory_order_relaxed);
  if (wanted == kAutomatic) wanted = isa_from_environment();
  if (wanted != kAutomatic && isa_supported(static_cast<Isa>(wanted))) {
    return kernels_of(static_cast<Isa>(wanted));
  }
  return kernels_of(best_supported_isa());
}

void force_isa(Isa isa) { forced_isa.store(static_cast<int>(isa), std::memory_order_relaxed); }
void reset_isa() {
  forced_isa.store(kAutomatic, std::memory_order_relaxed);
  forced_kernels.store(nullptr, std::memory_order_relaxed);
}
void force_kernels(const KernelSet* kernels) {
  forced_kernels.store(kernels, std::memory_order_relaxed);
}

}  // namespace flashattn::cpu::tiled
