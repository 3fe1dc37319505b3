#include "support/host_tensor.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/numeric.hpp"

namespace fa_test {
HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape) {
  view_.dtype = dtype;
  view_.rank = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int d = view_.rank - 1; d >= 0; --d) {
    view_.shape[d] = shape[d];
    view_.stride[d] = stride;
    stride *= shape[d];
  }
  storage_.assign(static_cast<size_t>(stride) * flashattn::dtype_size(dtype), 0);
  view_.data = storage_.empty() ? nullptr : storage_.data();
}

HostTensor HostTensor::strided(DType dtype, std::vector<int64_t> shape, int padded_dim,
                               int64_t extra) {
  HostTensor t;
  t.view_.dtype = dtype;
  t.view_.rank = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int d = t.view_.rank - 1; d >= 0; --d) {
    t.view_.shape[d] = shape[d];
    t.view_.stride[d] = stride;
    stride *= shape[d] + (d == padded_dim ? extra : 0);
  }
  t.storage_.assign(static_cast<size_t>(stride) * flashattn::dtype_size(dtype), 0);
  t.view_.data = t.storage_.empty() ? nullptr : t.storage_.data();
  return t;
}

HostTensor::HostTensor(const HostTensor& other) : storage_(other.storage_), view_(other.view_) {
  view_.data = storage_.empty() ? nullptr : storage_.data();
}

HostTensor& HostTensor::operator=(const HostTensor& other) {
  if (this != &other) {
    storage_ = other.storage_;
    view_ = other.view_;
    view_.data = storage_.empty() ? nullptr : storage_.data();
  }
  return *this;
}

int64_t HostTensor::offset_of(int64_t n) const {
  int64_t offset = 0;
  for (int d = view_.rank - 1; d >= 0; --d) {
    const int64_t size = view_.shape[d];
    offset += (n % size) * view_.stride[d];
    n /= size;
  }
  return offset;
}

float HostTensor::get(int64_t n) const {
  const int64_t off = offset_of(n);
  if (view_.dtype == DType::kI32) return static_cast<float>(static_cast<const int32_t*>(view_.data)[off]);
  return flashattn::core::load_element(view_.data, off, flashattn::core::element_type(view_.dtype));
}

void HostTensor::set(int64_t n, float value) {
  const int64_t off = offset_of(n);
  if (view_.dtype == DType::kI32) {
    static_cast<int32_t*>(view_.data)[off] = static_cast<int32_t>(value);
    return;
  }
  flashattn::core::store_element(view_.data, off, flashattn::core::element_type(view_.dtype), value);
}

std::vector<float> HostTensor::values() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  for (int64_t n = 0; n < numel(); ++n) out[n] = get(n);
  return out;
}

void HostTensor::fill_uniform(std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t n = 0; n < numel(); ++n) set(n, dist(rng));
}

void HostTensor::fill_normal(std::mt19937& rng, float stddev) {
  std::normal_distribution<float> dist(0.f, stddev);
  for (int64_t n = 0; n < numel(); ++n) set(n, dist(rng));
}

void HostTensor::fill(float value) {
  for (int64_t n = 0; n < numel(); ++n) set(n, value);
}

void HostTensor::poison() {
  const size_t elem = flashattn::dtype_size(view_.dtype);
  for (size_t i = 0; i + elem <= storage_.size(); i += elem) {
    switch (view_.dtype) {
      case DType::kF32: {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(&storage_[i], &nan, 4);
        break;
      }
      case DType::kF16: storage_[i] = 0x00; storage_[i + 1] = 0x7E; break;
      case DType::kBF16: storage_[i] = 0xC0; storage_[i + 1] = 0x7F; break;
      case DType::kF8E4M3: storage_[i] = 0x7F; break;
      case DType::kI32: {
        const int32_t bad = 0x7fffffff;
        std::memcpy(&storage_[i], &bad, 4);
        break;
      }
    }
  }
}

HostTensor int32_tensor(const std::vector<int32_t>& values) {
  HostTensor t(DType::kI32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.set(static_cast<int64_t>(i), static_cast<float>(values[i]));
  return t;
}

HostTensor float_tensor(const std::vector<float>& values) {
  HostTensor t(DType::kF32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.set(static_cast<int64_t>(i), values[i]);
  return t;
}

double max_abs_diff(const HostTensor& a, const HostTensor& b) {
  double worst = 0.0;
  for (int64_t n = 0; n < a.numel(); ++n) {
    const double x = a.get(n), y = b.get(n);
    if (std::isnan(x) != std::isnan(y)) return std::numeric_limits<double>::infinity();
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return std::numeric_limits<double>::infinity();
      continue;
    }
    if (!std::isnan(x)) worst = std::max(worst, std::fabs(x - y));
  }
  return worst;
}

double max_abs(const HostTensor& a) {
  double worst = 0.0;
  for (int64_t n = 0; n < a.numel(); ++n) worst = std::max(worst, std::fabs(static_cast<double>(a.get(n))));
  return worst;
}

bool has_nan(const HostTensor& a) {
  for (int64_t n = 0; n < a.numel(); ++n) {
    if (std::isnan(a.get(n))) return true;
  }
  return false;
}

ToleranceReport tolerance_check(const HostTensor& out, const HostTensor& ref,
                                const HostTensor& lowp, double eps) {
  ToleranceReport report{};
  report.error = max_abs_diff(out, ref);
  report.baseline = max_abs_diff(lowp, ref);
  report.bound = 2.0 * report.baseline + eps;
  return report;
}

}  // namespace fa_test
