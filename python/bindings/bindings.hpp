// The pieces of the flashattn._C module, one file each.
#pragma once

#include <nanobind/nanobind.h>

#include "flashattn/flashattn.hpp"

namespace flashattn::python {

void bind_tensor(nanobind::module_& m);     // Tensor, DType, DeviceType
void bind_arguments(nanobind::module_& m);  // options, varlen, *Args, Launch, Backend
void bind_calls(nanobind::module_& m);      // forward, backward, forward_kvcache, queries

}  // namespace flashattn::python
