#include "tensor_objects.hpp"

#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "errors.hpp"

namespace nb = nanobind;

namespace flashattn::python {
namespace {

// What register_tensor_framework was given. Never destroyed: it holds Python objects,
// which must not be released after the interpreter is gone.
struct Framework {
  nb::object tensor_type;
  std::string tensor_name;  // for messages, e.g. "torch.Tensor"
  std::vector<std::pair<nb::object, DType>> dtypes;
  nb::object allocate_bytes;  // (like, nbytes) -> uint8 tensor on like's device
  // Attribute names, interned once so a lookup hashes nothing.
  nb::object dtype, is_cuda, is_cpu, get_device, data_ptr, shape, stride, device;
};
Framework* registered = nullptr;

const Framework& framework() {
  if (registered == nullptr) {
    throw nb::type_error("flashattn._C: no tensor framework registered (import flashattn first)");
  }
  return *registered;
}

nb::object interned(const char* text) { return nb::steal(PyUnicode_InternFromString(text)); }

// A new reference, or a raised Python error.
nb::object checked(PyObject* result) {
  if (result == nullptr) throw nb::python_error();
  return nb::steal(result);
}

nb::object call_method(nb::handle object, const nb::object& name) {
  return checked(PyObject_CallMethodObjArgs(object.ptr(), name.ptr(), nullptr));
}

int64_t to_int64(nb::handle value) {
  const long long number = PyLong_AsLongLong(value.ptr());
  if (number == -1 && PyErr_Occurred()) throw nb::python_error();
  return number;
}

std::string text_of(nb::handle object) { return nb::cast<std::string>(nb::str(object)); }

// "torch.bfloat16" -> "bfloat16", as the framework's users write it.
std::string short_name(nb::handle dtype) {
  const std::string text = text_of(dtype);
  const size_t dot = text.rfind('.');
  return dot == std::string::npos ? text : text.substr(dot + 1);
}

DType dtype_of(const Framework& f, nb::handle object, const char* name) {
  const nb::object dtype = checked(PyObject_GetAttr(object.ptr(), f.dtype.ptr()));
  for (const auto& [known, ours] : f.dtypes) {
    if (known.is(dtype)) return ours;
  }
  raise_invalid_argument(name,
                         "dtype float32, float16, bfloat16, float8_e4m3fn (or int32 for indices)",
                         short_name(dtype));
}

bool truth(nb::handle object, const nb::object& attribute) {
  const int value = PyObject_IsTrue(checked(PyObject_GetAttr(object.ptr(), attribute.ptr())).ptr());
  if (value < 0) throw nb::python_error();
  return value != 0;
}

Device device_of(const Framework& f, nb::handle object, const char* name) {
  if (truth(object, f.is_cuda)) {
    return Device{DeviceType::kCUDA, static_cast<int>(to_int64(call_method(object, f.get_device)))};
  }
  if (truth(object, f.is_cpu)) return Device{DeviceType::kCPU, 0};
  const nb::object device = checked(PyObject_GetAttr(object.ptr(), f.device.ptr()));
  raise_invalid_argument(name, "a cpu or cuda tensor", "device " + text_of(device));
}

// The items of a tuple of ints (torch.Size, stride()): at most kMaxRank are kept.
int read_dims(nb::handle tuple, int64_t* dims) {
  const Py_ssize_t size = PyTuple_Size(tuple.ptr());
  if (size < 0) throw nb::python_error();
  for (Py_ssize_t i = 0; i < size && i < kMaxRank; ++i) {
    dims[i] = to_int64(PyTuple_GetItem(tuple.ptr(), i));
  }
  return static_cast<int>(size);
}

std::string shape_text(nb::handle shape) { return text_of(nb::tuple(nb::borrow(shape))); }

void register_tensor_framework(nb::handle tensor_type, const std::string& tensor_name,
                               nb::dict dtypes, nb::handle allocate_bytes) {
  auto* f = new Framework();
  f->tensor_type = nb::borrow(tensor_type);
  f->tensor_name = tensor_name;
  for (auto [dtype, ours] : dtypes) f->dtypes.emplace_back(nb::borrow(dtype), nb::cast<DType>(ours));
  f->allocate_bytes = nb::borrow(allocate_bytes);
  f->dtype = interned("dtype");
  f->is_cuda = interned("is_cuda");
  f->is_cpu = interned("is_cpu");
  f->get_device = interned("get_device");
  f->data_ptr = interned("data_ptr");
  f->shape = interned("shape");
  f->stride = interned("stride");
  f->device = interned("device");
  registered = f;  // a second registration replaces the first; the first is kept alive
}

}  // namespace

Tensor read_tensor(nb::handle object, const char* name) {
  if (object.is_none()) return Tensor{};
  const Framework& f = framework();
  const int is_tensor = PyObject_IsInstance(object.ptr(), f.tensor_type.ptr());
  if (is_tensor < 0) throw nb::python_error();
  if (is_tensor == 0) {
    const std::string got = nb::cast<std::string>(nb::type_name(object.type()));
    throw nb::type_error((std::string(name) + ": expected a " + f.tensor_name + ", got " +
                          got.substr(got.rfind('.') + 1)).c_str());
  }
  const DType dtype = dtype_of(f, object, name);
  const Device device = device_of(f, object, name);
  const nb::object shape = checked(PyObject_GetAttr(object.ptr(), f.shape.ptr()));
  int64_t sizes[kMaxRank] = {};
  const int rank = read_dims(shape, sizes);
  if (rank < 1 || rank > kMaxRank) {
    raise_invalid_argument(name, "1 to " + std::to_string(kMaxRank) + " dimensions",
                           "shape " + shape_text(shape));
  }
  int64_t strides[kMaxRank] = {};
  read_dims(call_method(object, f.stride), strides);
  const auto data = static_cast<uintptr_t>(to_int64(call_method(object, f.data_ptr)));
  return strided_view(reinterpret_cast<void*>(data), dtype, device, sizes, strides, rank);
}

const void* read_address(nb::handle object, const char* name) {
  if (object.is_none()) return nullptr;
  const Framework& f = framework();
  const int is_tensor = PyObject_IsInstance(object.ptr(), f.tensor_type.ptr());
  if (is_tensor < 0) throw nb::python_error();
  if (is_tensor == 0) {
    throw nb::type_error((std::string(name) + ": expected a " + f.tensor_name).c_str());
  }
  return reinterpret_cast<const void*>(
      static_cast<uintptr_t>(to_int64(call_method(object, f.data_ptr))));
}

nb::object allocate_bytes(nb::handle like, size_t bytes, void** data) {
  const Framework& f = framework();
  nb::object buffer = f.allocate_bytes(like, bytes);
  *data = reinterpret_cast<void*>(static_cast<uintptr_t>(to_int64(call_method(buffer, f.data_ptr))));
  return buffer;
}

int to_int32(nb::handle value, const char* name) {
  PyObject* number = PyNumber_Long(value.ptr());
  if (number == nullptr) {
    PyErr_Clear();
    raise_invalid_argument(name, "an integer", text_of(nb::repr(value)));
  }
  const nb::object owned = nb::steal(number);
  int overflow = 0;
  const long long result = PyLong_AsLongLongAndOverflow(number, &overflow);
  if (result == -1 && PyErr_Occurred()) throw nb::python_error();
  if (overflow != 0 || result < INT32_MIN || result > INT32_MAX) {
    raise_invalid_argument(name, "an integer that fits int32 (|x| < 2^31)", text_of(owned));
  }
  return static_cast<int>(result);
}

void bind_tensor_objects(nb::module_& m) {
  m.def("register_tensor_framework", &register_tensor_framework, nb::arg("tensor_type"),
        nb::arg("tensor_name"), nb::arg("dtypes"), nb::arg("allocate_bytes"),
        "Makes the *_tensors calls take instances of `tensor_type`: `dtypes` maps its dtype "
        "objects to DType, and allocate_bytes(like, nbytes) returns a uint8 tensor on like's "
        "device for a call's workspace.");
}

}  // namespace flashattn::python
