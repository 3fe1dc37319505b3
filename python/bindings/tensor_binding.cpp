// flashattn::Tensor for Python: a strided view described by a raw pointer, a dtype, a
// device, and shape/strides in elements. The Python layer builds one per numpy array or
// torch tensor; nothing here knows either framework.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bindings.hpp"

namespace nb = nanobind;

namespace flashattn::python {
namespace {

void init_tensor(Tensor* self, uintptr_t data, DType dtype, const std::vector<int64_t>& shape,
                 const std::vector<int64_t>& strides, DeviceType device_type, int device_index) {
  if (shape.size() != strides.size()) {
    throw nb::value_error(("Tensor: expected as many strides as dimensions, got " +
                           std::to_string(shape.size()) + " and " +
                           std::to_string(strides.size()))
                              .c_str());
  }
  if (shape.empty() || shape.size() > static_cast<size_t>(kMaxRank)) {
    throw nb::value_error(("Tensor: expected 1.." + std::to_string(kMaxRank) +
                           " dimensions, got " + std::to_string(shape.size()))
                              .c_str());
  }
  new (self) Tensor(strided_view(reinterpret_cast<void*>(data), dtype,
                                 Device{device_type, device_index}, shape.data(),
                                 strides.data(), static_cast<int>(shape.size())));
}

std::vector<int64_t> dims(const int64_t* values, int rank) {
  return std::vector<int64_t>(values, values + rank);
}

std::string repr(const Tensor& t) {
  std::string text = std::string("Tensor(") + to_string(t.dtype) + ", shape=[";
  for (int i = 0; i < t.rank; ++i) text += (i ? ", " : "") + std::to_string(t.shape[i]);
  text += "], strides=[";
  for (int i = 0; i < t.rank; ++i) text += (i ? ", " : "") + std::to_string(t.stride[i]);
  text += std::string("], ") + (t.device.type == DeviceType::kCUDA ? "cuda:" : "cpu:") +
          std::to_string(t.device.index) + ")";
  return text;
}

}  // namespace

Tensor strided_view(void* data, DType dtype, Device device, const int64_t* shape,
                    const int64_t* strides, int rank) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = rank;
  const bool empty = std::find(shape, shape + rank, 0) != shape + rank;
  int64_t contiguous = 1;
  for (int i = rank - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    // Frameworks leave the stride of a size-1 dimension, and every stride of an empty
    // array, arbitrary (numpy may report 0); those strides address nothing, so the
    // contiguous ones stand in for them rather than failing validation. Done here, not in
    // Python, because it runs for every tensor of every call.
    t.stride[i] = (empty || shape[i] == 1) ? contiguous : strides[i];
    contiguous *= std::max<int64_t>(shape[i], 1);
  }
  return t;
}

void bind_tensor(nb::module_& m) {
  nb::enum_<DType>(m, "DType")
      .value("F32", DType::kF32)
      .value("F16", DType::kF16)
      .value("BF16", DType::kBF16)
      .value("I32", DType::kI32)
      .value("F8E4M3", DType::kF8E4M3);
  nb::enum_<DeviceType>(m, "DeviceType")
      .value("CPU", DeviceType::kCPU)
      .value("CUDA", DeviceType::kCUDA);

  nb::class_<Tensor>(m, "Tensor",
                     "A strided view of memory the caller owns (strides in elements). "
                     "Tensor() is an absent optional argument.")
      .def(nb::init<>())
      .def("__init__", &init_tensor, nb::arg("data"), nb::arg("dtype"), nb::arg("shape"),
           nb::arg("strides"), nb::arg("device_type") = DeviceType::kCPU,
           nb::arg("device_index") = 0)
      .def_prop_ro("data", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data); })
      .def_ro("dtype", &Tensor::dtype)
      .def_prop_ro("shape", [](const Tensor& t) { return dims(t.shape, t.rank); })
      .def_prop_ro("strides", [](const Tensor& t) { return dims(t.stride, t.rank); })
      .def_prop_ro("device_type", [](const Tensor& t) { return t.device.type; })
      .def_prop_ro("device_index", [](const Tensor& t) { return t.device.index; })
      .def_prop_ro("present", &Tensor::present)
      .def("__repr__", &repr);
}

}  // namespace flashattn::python
