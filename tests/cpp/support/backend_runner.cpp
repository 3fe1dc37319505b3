#include "support/backend_runner.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "api/validate.hpp"

namespace fa_test {

using flashattn::Backend;
using flashattn::Status;
using flashattn::cpu::ReferencePrecision;

Runner host_runner(Backend backend) {
  const flashattn::Launch launch{backend};
  Runner runner;
  runner.name = flashattn::to_string(backend);
  runner.forward = [launch](const flashattn::ForwardArgs& a) {
    return flashattn::forward(a, launch);
  };
  runner.backward = [launch](const flashattn::BackwardArgs& a) {
    return flashattn::backward(a, launch);
  };
  runner.forward_kvcache = [launch](const flashattn::KVCacheArgs& a) {
    return flashattn::forward_kvcache(a, launch);
  };
  return runner;
}

Runner reference_runner(ReferencePrecision precision) {
  const flashattn::api::Target target{Backend::kReference, flashattn::Device{}, false};
  Runner runner;
  runner.name = precision == ReferencePrecision::kExact ? "reference" : "reference-lowp";
  runner.forward = [=](const flashattn::ForwardArgs& a) {
    flashattn::core::AttentionParams params;
    const Status status = flashattn::api::validate_forward(a, target, &params);
    return status.ok() ? flashattn::cpu::reference_forward(params, precision) : status;
  };
  runner.backward = [=](const flashattn::BackwardArgs& a) {
    flashattn::core::BackwardParams params;
    const Status status = flashattn::api::validate_backward(a, target, &params);
    return status.ok() ? flashattn::cpu::reference_backward(params, precision) : status;
  };
  runner.forward_kvcache = [=](const flashattn::KVCacheArgs& a) {
    flashattn::core::KVCacheParams params;
    const Status status = flashattn::api::validate_kvcache(a, target, &params);
    return status.ok() ? flashattn::cpu::reference_forward_kvcache(params, precision) : status;
  };
  return runner;
}

bool CheckResult::passed() const {
  if (!status.ok()) return false;
  return std::all_of(quantities.begin(), quantities.end(),
                     [](const QuantityCheck& q) { return q.report.passed(); });
}

std::string CheckResult::summary() const {
  std::ostringstream text;
  text << problem;
  if (!status.ok()) text << "\n  backend failed: " << status.message();
  for (const QuantityCheck& q : quantities) {
    text << "\n  " << q.name << ": error " << q.report.error << ", low-precision baseline "
         << q.report.baseline << ", bound " << q.report.bound
         << (q.report.passed() ? "" : "  <-- FAILED");
  }
  return text.str();
}

double tolerance_eps(flashattn::DType dtype, const HostTensor& exact, double scale) {
  double unit_roundoff = std::ldexp(1.0, -24);
  if (dtype == flashattn::DType::kF16) unit_roundoff = std::ldexp(1.0, -11);
  if (dtype == flashattn::DType::kBF16) unit_roundoff = std::ldexp(1.0, -8);
  if (dtype == flashattn::DType::kF8E4M3) unit_roundoff = std::ldexp(1.0, -4);
  double magnitude = 1.0;
  for (int64_t n = 0; n < exact.numel(); ++n) {
    const double x = std::fabs(static_cast<double>(exact.get(n)));
    if (std::isfinite(x)) magnitude = std::max(magnitude, x);
  }
  return 2.0 * unit_roundoff * magnitude * scale;
}

void compare(CheckResult* result, const std::string& name, const HostTensor& backend,
             const HostTensor& exact, const HostTensor& lowp, double eps) {
  result->quantities.push_back({name, tolerance_check(backend, exact, lowp, eps)});
}

}  // namespace fa_test
