// Small value helpers of the public API: tensors, dtypes, names.
#include "flashattn/flashattn.hpp"

namespace flashattn {

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

Tensor make_strided_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                           std::initializer_list<int64_t> stride, Device device) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(shape.size() < kMaxRank ? shape.size() : kMaxRank);
  int d = 0;
  for (int64_t s : shape) {
    if (d < kMaxRank) t.shape[d] = s;
    ++d;
  }
  d = 0;
  for (int64_t s : stride) {
    if (d < kMaxRank) t.stride[d] = s;
    ++d;
  }
  return t;
}

Tensor make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
  Tensor t = make_strided_tensor(data, dtype, shape, {}, device);
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.stride[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF8E4M3: return 1;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kF32:
    case DType::kI32: return 4;
  }
  return 0;
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "int32";
    case DType::kF8E4M3: return "e4m3";
  }
  return "unknown dtype";
}

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::kAuto: return "auto";
    case Backend::kReference: return "reference";
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
  }
  return "unknown backend";
}

const char* to_string(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kCudaError: return "CUDA error";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown status";
}

const char* version() { return FLASHATTN_VERSION; }

}  // namespace flashattn
