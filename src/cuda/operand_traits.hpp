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
// of 16 bytes (8 elements of 2 bytes, 16 of an e4m3 cache's 1). Other views go through the
// padded copy.
inline bool aligned_for_kernels(const core::Operand& op, bool varlen, int element_bytes = 2) {
  const int64_t chunk = 16 / element_bytes;
  return reinterpret_cast<uintptr_t>(op.ptr) % 16 == 0 && op.row_stride % chunk == 0 &&
         op.head_stride % chunk == 0 && (varlen || op.batch_stride % chunk == 0);
}

}  // namespace flashattn::cuda
