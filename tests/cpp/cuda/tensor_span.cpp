#include "tensor_span.hpp"

#include <algorithm>

namespace fa_cuda_test {

ByteSpan byte_span(const flashattn::Tensor& t) {
  if (t.numel() <= 0) return {};
  int64_t lowest = 0, highest = 0;  // element offsets of the extreme elements
  for (int d = 0; d < t.rank; ++d) {
    const int64_t reach = (t.shape[d] - 1) * t.stride[d];
    lowest += std::min<int64_t>(reach, 0);
    highest += std::max<int64_t>(reach, 0);
  }
  const auto element = static_cast<int64_t>(flashattn::dtype_size(t.dtype));
  return {lowest * element, (highest + 1) * element};
}

std::vector<int64_t> element_offsets(const flashattn::Tensor& t) {
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(std::max<int64_t>(t.numel(), 0)));
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t rest = n, offset = 0;
    for (int d = t.rank - 1; d >= 0; --d) {
      offset += (rest % t.shape[d]) * t.stride[d];
      rest /= t.shape[d];
    }
    offsets.push_back(offset);
  }
  return offsets;
}

}  // namespace fa_cuda_test
