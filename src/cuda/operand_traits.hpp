// Host-side facts about kernel operands shared by the forward and backward launchers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/params.hpp"

namespace flashattn::cuda {

template <class T>
constexpr core::ElementType element_type_of();
template <>
constexpr core::ElementType element_type_of<__half>() { return core::ElementType::kF16; }
template <>
constexpr core::ElementType element_type_of<__nv_bfloat16>() { return core::ElementType::kBF16; }

// The kernels read 16-byte chunks in place: pointers 16-byte aligned, strides multiples
// of 8 elements. Other views go through the padded copy.
inline bool aligned_for_kernels(const core::Operand& op, bool varlen) {
  return reinterpret_cast<uintptr_t>(op.ptr) % 16 == 0 && op.row_stride % 8 == 0 &&
         op.head_stride % 8 == 0 && (varlen || op.batch_stride % 8 == 0);
}

}  // namespace flashattn::cuda
