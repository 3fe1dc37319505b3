// Host tensors for tests: owned storage plus a flashattn::Tensor view, random fills,
// poisoning, strided views and element access in logical order.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "flashattn/flashattn.hpp"

namespace fa_test {

using flashattn::DType;
using flashattn::Tensor;

class HostTensor {
 public:
  HostTensor() = default;
  // Contiguous, zero-filled.
  HostTensor(DType dtype, std::vector<int64_t> shape);
  // Padded rows: dimension `padded_dim` gets `extra` unused elements of stride, so the
  // view is strided (a slice of a larger buffer) while the last dim stays contiguous.
  static HostTensor strided(DType dtype, std::vector<int64_t> shape, int padded_dim, int64_t extra);
  // A copy owns its own storage (the view points into it, not into the original's).
  HostTensor(const HostTensor& other);
  HostTensor& operator=(const HostTensor& other);
  HostTensor(HostTensor&&) noexcept = default;
  HostTensor& operator=(HostTensor&&) noexcept = default;

  const Tensor& view() const { return view_; }
  Tensor& view() { return view_; }
  DType dtype() const { return view_.dtype; }
  int rank() const { return view_.rank; }
  int64_t size(int dim) const { return view_.shape[dim]; }
  int64_t numel() const { return view_.numel(); }

  // Element `n` in row-major logical order, as float (int32 for kI32 tensors).
  float get(int64_t n) const;
  void set(int64_t n, float value);
  std::vector<float> values() const;  // every element in logical order

  void fill_uniform(std::mt19937& rng, float lo = -1.f, float hi = 1.f);
  void fill_normal(std::mt19937& rng, float stddev = 1.f);
  void fill(float value);
  void poison();  // NaN for float tensors, 0x7fffffff for int32 (whole buffer, gaps too)

  // The gap elements of a strided tensor, to check nothing was written there.
  std::vector<uint8_t> raw_bytes() const { return storage_; }

 private:
  int64_t offset_of(int64_t n) const;
  std::vector<uint8_t> storage_;
  Tensor view_;
};

// An int32 host tensor holding `values`.
HostTensor int32_tensor(const std::vector<int32_t>& values);
// fp32 [n] tensor holding `values`.
HostTensor float_tensor(const std::vector<float>& values);

double max_abs_diff(const HostTensor& a, const HostTensor& b);
double max_abs(const HostTensor& a);
bool has_nan(const HostTensor& a);

// FA2's tolerance rule: max|out - ref| <= 2 * max|lowp - ref| + eps.
struct ToleranceReport {
  double error;      // max|out - ref|
  double baseline;   // max|lowp - ref|
  double bound;      // 2 * baseline + eps
  bool passed() const { return error <= bound; }
};
ToleranceReport tolerance_check(const HostTensor& out, const HostTensor& ref,
                                const HostTensor& lowp, double eps);

}  // namespace fa_test
