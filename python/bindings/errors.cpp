#include "errors.hpp"

namespace nb = nanobind;

namespace flashattn::python {
namespace {

// Created once at import; the module keeps a reference to each, so they live as long
// as the interpreter has the module.
struct ErrorTypes {
  PyObject* error = nullptr;             // every failure the library reports
  PyObject* invalid_argument = nullptr;  // also a ValueError
  PyObject* unsupported = nullptr;       // also a NotImplementedError
  PyObject* cuda = nullptr;
  PyObject* internal = nullptr;
};
ErrorTypes types;

// Python classes with several bases (Error plus the builtin a caller may already catch).
PyObject* new_error_type(nb::module_& m, const char* name, std::initializer_list<PyObject*> bases,
                         const char* doc) {
  nb::object base_tuple = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(bases.size())));
  Py_ssize_t i = 0;
  for (PyObject* base : bases) {
    Py_INCREF(base);
    PyTuple_SetItem(base_tuple.ptr(), i++, base);
  }
  const std::string qualified = std::string("flashattn.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base_tuple.ptr(), nullptr);
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::steal(type);
  return type;
}

PyObject* type_of(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
      return types.invalid_argument;
    case StatusCode::kUnsupported:
      return types.unsupported;
    case StatusCode::kCudaError:
      return types.cuda;
    default:
      return types.internal;
  }
}

}  // namespace

void bind_errors(nb::module_& m) {
  types.error = new_error_type(m, "Error", {PyExc_RuntimeError},
                               "A call flashattn rejected or could not run; the message names "
                               "the argument and what was expected.");
  types.invalid_argument =
      new_error_type(m, "InvalidArgumentError", {types.error, PyExc_ValueError},
                     "The arguments violate the contract (shapes, dtypes, options).");
  types.unsupported =
      new_error_type(m, "UnsupportedError", {types.error, PyExc_NotImplementedError},
                     "A valid call this build, backend or device cannot run.");
  types.cuda = new_error_type(m, "CudaError", {types.error}, "The CUDA runtime reported an error.");
  types.internal =
      new_error_type(m, "InternalError", {types.error}, "A bug in flashattn: please report it.");
}

void raise_if_error(const Status& status) {
  if (status.ok()) return;
  PyErr_SetString(type_of(status.code()), status.message().c_str());
  throw nb::python_error();
}

void raise_invalid_argument(const std::string& name, const std::string& expected,
                            const std::string& got) {
  PyErr_SetString(types.invalid_argument, (name + ": expected " + expected + ", got " + got).c_str());
  throw nb::python_error();
}

}  // namespace flashattn::python
