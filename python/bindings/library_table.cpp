// _C.library_table(): the address of the C ABI's entry points in this module, for the
// optional torch extension (library_table.h says why a table and not a second library).
#include "library_table.h"

#include <nanobind/nanobind.h>

#include <cstdint>

#include "bindings.hpp"

namespace nb = nanobind;

namespace flashattn::python {
namespace {

const flashattn_library_table table = {
    sizeof(flashattn_library_table),
    FLASHATTN_LIBRARY_TABLE_VERSION,
    &fa_forward_args_init,
    &fa_backward_args_init,
    &fa_launch_init,
    &fa_forward,
    &fa_backward,
    &fa_last_error_message,
};

}  // namespace

void bind_library_table(nb::module_& m) {
  m.def("library_table", [] { return reinterpret_cast<uintptr_t>(&table); },
        "The address of a flashattn_library_table (python/bindings/library_table.h): the C "
        "ABI's entry points in this module, for flashattn's torch extension.");
}

}  // namespace flashattn::python
