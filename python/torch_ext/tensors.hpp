// torch tensors as the C ABI's fa_tensor: what the binding's read_tensor does for the
// Python path (tensor_objects.cpp), with the same rule for strides (strided_view in
// tensor_binding.cpp) and the same messages for what the library cannot be given.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "flashattn/flashattn.h"

namespace flashattn::torch_ext {

inline std::optional<fa_dtype> dtype_of(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return FA_F32;
    case at::kHalf:
      return FA_F16;
    case at::kBFloat16:
      return FA_BF16;
    case at::kInt:
      return FA_I32;
    case at::kFloat8_e4m3fn:
      return FA_F8E4M3;
    default:
      return std::nullopt;
  }
}

// torch's Python name of a dtype ("float64"), for messages.
inline std::string python_name(at::ScalarType type) {
  switch (type) {
    case at::kDouble:
      return "float64";
    case at::kLong:
      return "int64";
    case at::kShort:
      return "int16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kBool:
      return "bool";
    case at::kComplexFloat:
      return "complex64";
    case at::kComplexDouble:
      return "complex128";
    default:
      return c10::toString(type);
  }
}

// "(2, 3)" as Python prints a shape tuple, for messages.
inline std::string shape_text(at::IntArrayRef sizes) {
  std::string text = "(";
  for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + (sizes.size() == 1 ? ",)" : ")");
}

// Fills *out with `t` (absent when undefined) and returns "", or returns the binding's
// message for a tensor the library cannot be given (dtype, device, rank); *out is then
// unspecified. `writable`: the library writes it (an output), so its mutable pointer.
inline std::string describe(const at::Tensor& t, const char* name, fa_tensor* out,
                            bool writable = false) {
  *out = fa_tensor{};
  if (!t.defined()) return "";
  const std::optional<fa_dtype> dtype = dtype_of(t.scalar_type());
  if (!dtype) {
    return std::string(name) +
           ": expected dtype float32, float16, bfloat16, float8_e4m3fn (or int32 for "
           "indices), got " + python_name(t.scalar_type());
  }
  if (t.is_cuda()) {
    out->device_type = FA_CUDA;
    out->device_index = t.get_device();
  } else if (t.is_cpu()) {
    out->device_type = FA_CPU;
  } else {
    return std::string(name) + ": expected a cpu or cuda tensor, got device " + t.device().str();
  }
  const int64_t rank = t.dim();
  if (rank < 1 || rank > FA_MAX_RANK) {
    return std::string(name) + ": expected 1 to " + std::to_string(FA_MAX_RANK) +
           " dimensions, got shape " + shape_text(t.sizes());
  }
  out->dtype = *dtype;
  out->rank = static_cast<int32_t>(rank);
  out->data = writable ? t.data_ptr() : const_cast<void*>(t.const_data_ptr());
  const at::IntArrayRef sizes = t.sizes(), strides = t.strides();
  const bool empty = t.numel() == 0;
  int64_t contiguous = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    out->shape[i] = sizes[i];
    // As strided_view: the stride of a size-1 dimension, and every stride of an empty
    // tensor, addresses nothing; the contiguous one stands in for it.
    out->stride[i] = (empty || sizes[i] == 1) ? contiguous : strides[i];
    contiguous *= std::max<int64_t>(sizes[i], 1);
  }
  return "";
}

inline std::string describe(const std::optional<at::Tensor>& t, const char* name,
                            fa_tensor* out) {
  if (!t) {
    *out = fa_tensor{};
    return "";
  }
  return describe(*t, name, out);
}

}  // namespace flashattn::torch_ext
