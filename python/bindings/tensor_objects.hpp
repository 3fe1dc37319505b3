// Framework tensors (torch's) read in C++ through the attributes they share: isinstance
// of the registered type, dtype, is_cuda / is_cpu, get_device(), data_ptr(), shape and
// stride(). The module still never includes or links the framework: its tensor type,
// dtypes and byte allocator are registered from Python at import.
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "flashattn/flashattn.hpp"

namespace flashattn::python {

// `object` described as a Tensor, or Tensor{} for None. Raises TypeError for another type
// and InvalidArgumentError (naming `name`) for a dtype, device or rank the library cannot
// take.
Tensor read_tensor(nanobind::handle object, const char* name);
// The address of a framework tensor's data, or nullptr for None (a pointer argument such as
// AttentionOptions::dropout_seed_offset, whose tensor the Python layer makes).
const void* read_address(nanobind::handle object, const char* name);

// A uint8 tensor of `bytes` on `like`'s device from the framework's allocator (ordered on
// its current stream), and its address.
nanobind::object allocate_bytes(nanobind::handle like, size_t bytes, void** data);

// Python's int(value) checked to fit int32; InvalidArgumentError naming `name` otherwise.
int to_int32(nanobind::handle value, const char* name);

void bind_tensor_objects(nanobind::module_& m);  // register_tensor_framework

}  // namespace flashattn::python
