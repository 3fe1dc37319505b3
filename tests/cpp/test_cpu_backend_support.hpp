// Shared by the tests of the tiled CPU backend (test_cpu_backend_*.cpp): a fixture that
// runs its test once per instruction set this CPU supports, and the Backend::kCpu runner.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "cpu/tiled/kernel_set.hpp"
#include "support/backend_runner.hpp"
#include "support/reference_problem.hpp"

namespace fa_test {

using flashattn::cpu::tiled::Isa;

inline std::string isa_label(const ::testing::TestParamInfo<Isa>& info) {
  switch (info.param) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kGeneric: return "generic";
  }
  return "unknown";
}

// Each test runs with the kernels of one ISA forced; unsupported ISAs skip.
class CpuBackend : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!flashattn::cpu::tiled::isa_supported(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << isa_label({GetParam(), 0});
    }
    flashattn::cpu::tiled::force_isa(GetParam());
  }
  void TearDown() override { flashattn::cpu::tiled::reset_isa(); }

  static Runner cpu() { return host_runner(flashattn::Backend::kCpu); }
};

#define FA_INSTANTIATE_PER_ISA(Suite)                                                    \
  INSTANTIATE_TEST_SUITE_P(Isa, Suite,                                                   \
                           ::testing::Values(Isa::kGeneric, Isa::kAvx2, Isa::kAvx512), \
                           isa_label)

inline void expect_passes(const CheckResult& result) {
  EXPECT_TRUE(result.passed()) << result.summary();
}

}  // namespace fa_test
