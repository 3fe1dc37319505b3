// The library's Status, raised as a Python exception that carries its message.
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "flashattn/flashattn.hpp"

namespace flashattn::python {

// Adds Error and its subclasses (one per StatusCode) to the module.
void bind_errors(nanobind::module_& m);

// Raises the exception class of `status.code()` with its message; returns on success.
// Call with the GIL held.
void raise_if_error(const Status& status);

// Raises InvalidArgumentError "<name>: expected <expected>, got <got>", the library's
// wording, for what the binding rejects before the library sees the call.
[[noreturn]] void raise_invalid_argument(const std::string& name, const std::string& expected,
                                         const std::string& got);

}  // namespace flashattn::python
