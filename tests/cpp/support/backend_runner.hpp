// How the shared test suites run a backend and report the tolerance rule. A Runner
// receives the public-API arguments over host tensors and must leave its outputs in those
// host tensors: a device runner copies the inputs to the device, calls the library and
// copies the outputs (and, for forward_kvcache, the updated caches) back.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cpu/reference.hpp"
#include "flashattn/flashattn.hpp"
#include "support/host_tensor.hpp"

namespace fa_test {

struct Runner {
  std::string name;
  std::function<flashattn::Status(const flashattn::ForwardArgs&)> forward;
  std::function<flashattn::Status(const flashattn::BackwardArgs&)> backward;
  std::function<flashattn::Status(const flashattn::KVCacheArgs&)> forward_kvcache;
};

// The public entry points with Launch{backend}, on host memory.
Runner host_runner(flashattn::Backend backend);
// The reference in a given precision (kLowPrecisionNaive is not reachable through the
// public API): the API's validation fills the Params, then cpu::reference_* runs.
Runner reference_runner(flashattn::cpu::ReferencePrecision precision);

// One compared quantity (out, lse, dq, ...) under FA2's rule
// max|x - ref| <= 2 * max|x_lowp - ref| + eps.
struct QuantityCheck {
  std::string name;
  ToleranceReport report;
};

struct CheckResult {
  std::string problem;      // what was run, for the failure message
  flashattn::Status status;  // of the backend under test (then nothing is compared)
  std::vector<QuantityCheck> quantities;

  bool passed() const;
  std::string summary() const;  // the problem, then one line per quantity
};

// eps of the tolerance rule: twice the unit roundoff of `dtype` at the magnitude of the
// exact result (at least 1), times `scale`.
double tolerance_eps(flashattn::DType dtype, const HostTensor& exact, double scale = 1.0);

// Appends the check of `name` (backend vs exact vs low-precision) to `result`.
void compare(CheckResult* result, const std::string& name, const HostTensor& backend,
             const HostTensor& exact, const HostTensor& lowp, double eps);

}  // namespace fa_test
