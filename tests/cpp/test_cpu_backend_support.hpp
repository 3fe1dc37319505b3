// Shared by the tests of the tiled CPU backend (test_cpu_backend_*.cpp): a fixture that
// runs its test once per instruction set this CPU supports (and once per emulated bf16
// build), and the Backend::kCpu runner.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "cpu/tiled/kernel_set.hpp"
#include "support/emulated_kernels.hpp"
#include "support/backend_runner.hpp"
#include "support/reference_problem.hpp"

namespace fa_test {

using flashattn::cpu::tiled::Isa;

// The kernels a test runs: an ISA build (skipped where this CPU lacks it), or an emulated
// build of the bf16 kernels of a wide ISA (emulated_kernels.hpp), which runs anywhere.
enum class Kernels { kGeneric, kAvx2, kAvx512, kAvx512Bf16, kAmx, kEmulatedAvx512Bf16, kEmulatedAmx };

inline std::string kernels_label(const ::testing::TestParamInfo<Kernels>& info) {
  switch (info.param) {
    case Kernels::kGeneric: return "generic";
    case Kernels::kAvx2: return "avx2";
    case Kernels::kAvx512: return "avx512";
    case Kernels::kAvx512Bf16: return "avx512bf16";
    case Kernels::kAmx: return "amx";
    case Kernels::kEmulatedAvx512Bf16: return "emulated_avx512bf16";
    case Kernels::kEmulatedAmx: return "emulated_amx";
  }
  return "unknown";
}

// Each test runs with one kernel build forced.
class CpuBackend : public ::testing::TestWithParam<Kernels> {
 protected:
  void SetUp() override {
    namespace tiled = flashattn::cpu::tiled;
    switch (GetParam()) {
      case Kernels::kEmulatedAvx512Bf16: tiled::force_kernels(&emulated_avx512_bf16_kernels()); return;
      case Kernels::kEmulatedAmx: tiled::force_kernels(&emulated_amx_kernels()); return;
      default: break;
    }
    const Isa isa = static_cast<Isa>(GetParam());
    if (!tiled::isa_supported(isa)) {
      GTEST_SKIP() << "this CPU (or OS) lacks " << kernels_label({GetParam(), 0});
    }
    tiled::force_isa(isa);
  }
  void TearDown() override { flashattn::cpu::tiled::reset_isa(); }

  static Runner cpu() { return host_runner(flashattn::Backend::kCpu); }
};

static_assert(static_cast<int>(Kernels::kAmx) == static_cast<int>(Isa::kAmx) &&
                  static_cast<int>(Kernels::kAvx512Bf16) == static_cast<int>(Isa::kAvx512Bf16),
              "the ISA builds keep their Isa values");

#define FA_INSTANTIATE_PER_ISA(Suite)                                                      \
  INSTANTIATE_TEST_SUITE_P(                                                                \
      Isa, Suite,                                                                          \
      ::testing::Values(Kernels::kGeneric, Kernels::kAvx2, Kernels::kAvx512,               \
                        Kernels::kAvx512Bf16, Kernels::kAmx, Kernels::kEmulatedAvx512Bf16, \
                        Kernels::kEmulatedAmx),                                            \
      kernels_label)

inline void expect_passes(const CheckResult& result) {
  EXPECT_TRUE(result.passed()) << result.summary();
}

}  // namespace fa_test
