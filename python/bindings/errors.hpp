// The library's Status, raised as a Python exception that carries its message.
#pragma once

#include <nanobind/nanobind.h>

#include "flashattn/flashattn.hpp"

namespace flashattn::python {

// Adds Error and its subclasses (one per StatusCode) to the module.
void bind_errors(nanobind::module_& m);

// Raises the exception class of `status.code()` with its message; returns on success.
// Call with the GIL held.
void raise_if_error(const Status& status);

}  // namespace flashattn::python
