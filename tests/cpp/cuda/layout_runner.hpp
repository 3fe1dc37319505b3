// A Runner decorator that hands the wrapped runner q, k, v and out in another memory
// layout, holding the same values, and copies out back: the shared problems only know
// contiguous and padded-heads layouts, and the CUDA kernels treat these others specially
// (head-major strides, and the padded workspace path for misaligned views).
// Only forward is relaid out; backward and forward_kvcache go to the wrapped runner as is.
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
