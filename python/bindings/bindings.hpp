// The pieces of the flashattn._C module, one file each.
#pragma once

#include <nanobind/nanobind.h>

#include "flashattn/flashattn.hpp"

namespace flashattn::python {

void bind_tensor(nanobind::module_& m);     // Tensor, DType, DeviceType
void bind_arguments(nanobind::module_& m);  // options, varlen, *Args, Launch, Backend
void bind_calls(nanobind::module_& m);      // forward, backward, forward_kvcache, queries
void bind_tensor_calls(nanobind::module_& m);  // the same calls on framework tensor objects
void bind_library_table(nanobind::module_& m);  // the C ABI's entry points, for torch_ext

// A Tensor over `data` with these sizes and strides (1 <= rank <= kMaxRank), the strides
// of size-1 and empty dimensions replaced by contiguous ones.
Tensor strided_view(void* data, DType dtype, Device device, const int64_t* shape,
                    const int64_t* strides, int rank);

}  // namespace flashattn::python
