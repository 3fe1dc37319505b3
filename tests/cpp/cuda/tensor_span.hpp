// Where the elements of a strided Tensor view live in memory: the byte range a copy of the
// view must move (gaps between elements included, so what a kernel writes into a gap is
// copied too) and the element offsets of the view itself (so gaps can be told apart).
#pragma once

#include <cstdint>
#include <vector>

#include "flashattn/flashattn.hpp"

namespace fa_cuda_test {

// Bytes [begin, end) relative to `t.data` covering every element of the view; negative
// strides make `begin` negative. Empty (begin == end == 0) when the view has no element.
struct ByteSpan {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t bytes() const { return end - begin; }
};
ByteSpan byte_span(const flashattn::Tensor& t);

// The offset, in elements from `t.data`, of every element of the view in row-major
// logical order.
std::vector<int64_t> element_offsets(const flashattn::Tensor& t);

}  // namespace fa_cuda_test
