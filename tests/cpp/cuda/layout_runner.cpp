#include "layout_runner.hpp"

#include <cstring>
#include <utility>
#include <vector>

#include "tensor_span.hpp"

namespace fa_cuda_test {
namespace {

using fa_test::HostTensor;
using flashattn::Tensor;

// Element-wise copy between two views of the same shape and dtype, whatever their strides.
void copy_elements(const Tensor& from, const Tensor& to) {
  const size_t element = flashattn::dtype_size(from.dtype);
  const std::vector<int64_t> from_offsets = element_offsets(from);
  const std::vector<int64_t> to_offsets = element_offsets(to);
  for (size_t n = 0; n < from_offsets.size(); ++n) {
    std::memcpy(static_cast<uint8_t*>(to.data) + to_offsets[n] * element,
                static_cast<const uint8_t*>(from.data) + from_offsets[n] * element, element);
  }
}

// A [.., rows, heads, dim] tensor holding the values of `from` in `layout`. The result may
// be moved but not copied: a copy's view would start at its storage again.
HostTensor relaid(const Tensor& from, Layout layout) {
  const std::vector<int64_t> shape(from.shape, from.shape + from.rank);
  const int rows = from.rank - 3, heads = from.rank - 2, dim = from.rank - 1;
  HostTensor to;
  switch (layout) {
    case Layout::kHeadMajor: {
      std::vector<int64_t> memory_shape = shape;
      std::swap(memory_shape[rows], memory_shape[heads]);
      to = HostTensor(from.dtype, memory_shape);
      Tensor& view = to.view();
      std::swap(view.shape[rows], view.shape[heads]);
      std::swap(view.stride[rows], view.stride[heads]);
      break;
    }
    case Layout::kMisalignedHeadStride:
      to = HostTensor::strided(from.dtype, shape, dim, 3);
      break;
    case Layout::kMisalignedPointer:
      // 8 spare elements after each head row keep the strides aligned and leave room for
      // the shift of the start.
      to = HostTensor::strided(from.dtype, shape, dim, 8);
      to.view().data = static_cast<uint8_t*>(to.view().data) + flashattn::dtype_size(from.dtype);
      break;
  }
  copy_elements(from, to.view());
  return to;
}

}  // namespace

const char* to_string(Layout layout) {
  switch (layout) {
    case Layout::kHeadMajor: return "head-major";
    case Layout::kMisalignedHeadStride: return "misaligned-head-stride";
    case Layout::kMisalignedPointer: return "misaligned-pointer";
  }
  return "unknown";
}

fa_test::Runner with_layout(fa_test::Runner inner, Layout layout) {
  fa_test::Runner runner = inner;
  runner.name = inner.name + " (" + to_string(layout) + ")";
  runner.forward = [forward = inner.forward, layout](const flashattn::ForwardArgs& host_args) {
    const HostTensor q = relaid(host_args.q, layout);
    const HostTensor k = relaid(host_args.k, layout);
    const HostTensor v = relaid(host_args.v, layout);
    HostTensor out = relaid(host_args.out, layout);
    flashattn::ForwardArgs args = host_args;
    args.q = q.view();
    args.k = k.view();
    args.v = v.view();
    args.out = out.view();
    const flashattn::Status status = forward(args);
    copy_elements(out.view(), host_args.out);
    return status;
  };
  runner.forward_kvcache = [forward_kvcache = inner.forward_kvcache,
                            layout](const flashattn::KVCacheArgs& host_args) {
    HostTensor k_cache = relaid(host_args.k_cache, layout);
    HostTensor v_cache = relaid(host_args.v_cache, layout);
    flashattn::KVCacheArgs args = host_args;
    args.k_cache = k_cache.view();
    args.v_cache = v_cache.view();
    const flashattn::Status status = forward_kvcache(args);
    copy_elements(k_cache.view(), host_args.k_cache);
    copy_elements(v_cache.view(), host_args.v_cache);
    return status;
  };
  return runner;
}

}  // namespace fa_cuda_test
