#include "check.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "core/numeric.hpp"

namespace fa_bench {
namespace {

using flashattn::DType;
using flashattn::Tensor;

std::vector<float> to_float(const void* bytes, size_t count, DType dtype) {
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    out[i] = flashattn::core::load_element(bytes, static_cast<int64_t>(i), flashattn::core::element_type(dtype));
  }
  return out;
}

std::vector<float> download_as_float(Memory& memory, const Tensor& t) {
  std::vector<uint8_t> bytes(static_cast<size_t>(t.numel()) * flashattn::dtype_size(t.dtype));
  memory.download(bytes.data(), t.data, bytes.size());
  return to_float(bytes.data(), static_cast<size_t>(t.numel()), t.dtype);
}

Tensor host_view(std::vector<float>& data, const Tensor& like) {
  Tensor t = like;
  t.data = data.data();
  t.dtype = DType::kF32;
  t.device = {flashattn::DeviceType::kCPU, 0};
  return t;
}

void compare(const std::vector<float>& got, const std::vector<float>& ref, CheckResult* result) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - ref[i]);
    result->max_abs_err = std::isnan(diff) ? std::numeric_limits<double>::infinity()
                                           : std::max(result->max_abs_err, diff);
    result->max_ref = std::max(result->max_ref, std::fabs(static_cast<double>(ref[i])));
  }
}

}  // namespace

CheckResult check_against_reference(Memory& memory, const Options& o, const HostInputs& in,
                                    const BufferSet& set) {
  CheckResult result;
  const flashattn::Launch reference{flashattn::Backend::kReference};
  std::vector<float> q = to_float(in.q.data(), in.q.size() / flashattn::dtype_size(in.dtype), in.dtype);
  std::vector<float> k = to_float(in.k.data(), in.k.size() / flashattn::dtype_size(in.dtype), in.dtype);
  std::vector<float> v = to_float(in.v.data(), in.v.size() / flashattn::dtype_size(in.dtype), in.dtype);
  std::vector<float> out(q.size()), lse(static_cast<size_t>(set.lse.numel()));

  flashattn::ForwardArgs fwd = forward_args(set, o);
  fwd.q = host_view(q, set.q);
  fwd.k = host_view(k, set.k);
  fwd.v = host_view(v, set.v);
  fwd.out = host_view(out, set.out);
  fwd.lse = host_view(lse, set.lse);
  flashattn::Status status = flashattn::forward(fwd, reference);
  if (!status.ok()) {
    result.error = "reference forward: " + status.message();
    return result;
  }
  if (o.direction == Direction::kForward) {
    compare(download_as_float(memory, set.out), out, &result);
    result.ran = true;
    return result;
  }

  std::vector<float> dout = to_float(in.dout.data(), q.size(), in.dtype);
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  flashattn::BackwardArgs bwd = backward_args(set, o);
  bwd.dout = host_view(dout, set.dout);
  bwd.q = fwd.q;
  bwd.k = fwd.k;
  bwd.v = fwd.v;
  bwd.out = fwd.out;
  bwd.lse = fwd.lse;
  bwd.dq = host_view(dq, set.dq);
  bwd.dk = host_view(dk, set.dk);
  bwd.dv = host_view(dv, set.dv);
  status = flashattn::backward(bwd, reference);
  if (!status.ok()) {
    result.error = "reference backward: " + status.message();
    return result;
  }
  compare(download_as_float(memory, set.dq), dq, &result);
  compare(download_as_float(memory, set.dk), dk, &result);
  compare(download_as_float(memory, set.dv), dv, &result);
  result.ran = true;
  return result;
}

}  // namespace fa_bench
