// A Runner decorator that hands the wrapped runner tensors in another memory layout, holding
// the same values, and copies what the call writes back: the shared problems only know
// contiguous and padded-heads layouts, and the CUDA kernels treat these others specially
// (head-major strides, and the padded workspace paths for misaligned views). forward gets
// q, k, v and out relaid (out copied back); forward_kvcache the caches, copied back after
// the call's append. backward goes to the wrapped runner as is.
#pragma once

#include "support/backend_runner.hpp"

namespace fa_cuda_test {

enum class Layout {
  kHeadMajor,             // [b, h, s, d] memory (varlen [h, total, d]) viewed as [b, s, h, d]
  kMisalignedHeadStride,  // head rows d + 3 elements apart: strides not multiples of 8
  kMisalignedPointer,     // aligned strides, data one element past a 16-byte boundary
};

const char* to_string(Layout layout);

fa_test::Runner with_layout(fa_test::Runner inner, Layout layout);

}  // namespace fa_cuda_test
